"""Per-step networks and the setup phase's plan, end to end in the bubblewrap sandbox.

A step's ``[steps.agent] network_mode`` / ``allowed_hosts`` replace the task's for that step
(Harbor 0.25); each step's ``setup.sh`` runs under the ``setup`` phase plan
(``policy.setup_egress``), never under the agent's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from pytest_maka.testing.servers import EGRESS_TOKEN, HttpServer, http_server

from ..conftest import Cohort, needs_bwrap
from ..steps_helpers import write_steps_task

pytestmark = [pytest.mark.sandbox, needs_bwrap]

LOCAL = {"kind": "local", "egress_hosts": {"allowed.test": "127.0.0.1"}}
#: The step's name from its instruction ("Write <name> to /app/<name>.txt.").
STEP = "$(echo $MAKA_INSTRUCTION | cut -d' ' -f2)"


def fetch(url: str, out: str) -> str:
    return f"curl -s -m 10 -o - -w ' %{{http_code}}\\n' {url} >> {out} 2>&1; "


@pytest.fixture
def server() -> Iterator[HttpServer]:
    with http_server() as s:
        yield s


def _egress(cohort: Cohort, record: dict) -> list[tuple[str, str, bool]]:
    lines = (cohort.out / record["artifacts"]["egress_log"]).read_text().splitlines()
    return [(x["phase"], x["destination"], x["allowed"]) for x in map(json.loads, lines)]


def test_a_steps_declared_agent_network_replaces_the_tasks_for_that_step_only(
    cohort: Cohort, server: HttpServer
) -> None:
    host = f"allowed.test:{server.port}"
    allowlist = ['network_mode = "allowlist"', f'allowed_hosts = ["{host}"]']
    write_steps_task(cohort.tasks, "nets", [{"name": "one", "agent_toml": allowlist}, {"name": "two"}])
    cmd = fetch(f"http://{host}/{STEP}", "$MAKA_LOGS_DIR/net.txt") + f"echo {STEP} > /app/{STEP}.txt"
    cohort.write(
        subjects=[{"name": "a", "kind": "command", "command": cmd}],
        executor=LOCAL,
        policy={"agent_network": True},  # grants what each step declares: an allowlist, then nothing
    )
    cohort.run().assert_outcomes(passed=1)
    assert server.paths == ["/one"], "step one reached its own allowed host; step two (no network) reached nothing"
    record = cohort.results()["nets[a-r0]"]
    one, two = record["steps"]
    assert one["network"]["agent"] == {"mode": "allowlist", "declared": "allowlist", "allowed": [host]}
    assert two["network"]["agent"] == {"mode": "none", "declared": "none"}
    assert (cohort.out / one["artifacts"]["agent_logs"] / "net.txt").read_text().count(EGRESS_TOKEN) == 1
    seen_two = (cohort.out / two["artifacts"]["agent_logs"] / "net.txt").read_text()
    assert EGRESS_TOKEN not in seen_two and " 000" in seen_two, seen_two  # no proxy, no route at all
    assert _egress(cohort, record) == [("agent", host, True)]
    assert record["isolation"]["network"]["agent"] == "none", "the task-level plan: the task declares no network"


def test_setup_sh_reaches_the_setup_allowlist_and_the_agent_of_the_same_attempt_does_not(
    cohort: Cohort, server: HttpServer
) -> None:
    host = f"allowed.test:{server.port}"
    setup = fetch(f"http://{host}/setup", "/app/setup-net.txt") + "grep -q ' 200' /app/setup-net.txt\n"
    write_steps_task(cohort.tasks, "setup-net", [{"name": "one", "setup": setup}])
    cmd = fetch(f"http://{host}/agent", "$MAKA_LOGS_DIR/net.txt") + "echo one > /app/one.txt"
    cohort.write(
        subjects=[{"name": "a", "kind": "command", "command": cmd}],
        executor=LOCAL,
        policy={"setup_egress": [host]},
    )
    cohort.run().assert_outcomes(passed=1)
    assert server.paths == ["/setup"], "setup.sh got through the proxy; the agent phase had no network"
    record = cohort.results()["setup-net[a-r0]"]
    (step,) = record["steps"]
    assert step["network"]["setup"]["mode"] == "allowlist" and step["network"]["setup"]["allowed"] == [host]
    assert step["network"]["agent"]["mode"] == "none"
    net = record["isolation"]["network"]
    assert (net["setup"], net["agent"]) == ("allowlist", "none")
    assert net["phases"]["setup"]["connections"] == {"allowed": 1, "refused": 0}
    assert _egress(cohort, record) == [("setup", host, True)]
    agent_seen = (cohort.out / step["artifacts"]["agent_logs"] / "net.txt").read_text()
    assert EGRESS_TOKEN not in agent_seen, agent_seen


def test_without_a_setup_grant_setup_sh_has_no_network(cohort: Cohort, server: HttpServer) -> None:
    """The other side: setup.sh no longer inherits whatever the sandbox has (a failed setup is infra)."""
    host = f"allowed.test:{server.port}"
    setup = fetch(f"http://{host}/setup", "/app/setup-net.txt") + "grep -q ' 200' /app/setup-net.txt\n"
    write_steps_task(cohort.tasks, "setup-off", [{"name": "one", "setup": setup}])
    cohort.write(
        subjects=[{"name": "a", "kind": "command", "command": "echo one > /app/one.txt"}],
        executor=LOCAL,
        policy={"egress": [host]},  # the agent's allowlist is not the setup phase's
        retries={"infra": 0, "backoff_sec": 0},
    )
    cohort.run()
    assert server.paths == []
    record = cohort.results()["setup-off[a-r0]"]
    assert record["status"] == "infra_failure" and "setup.sh exited with code 1" in record["error"]["message"]
    assert record["steps"][0]["network"]["setup"] == {"mode": "none", "declared": "none"}
