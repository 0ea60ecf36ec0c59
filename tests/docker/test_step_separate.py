"""Multi-step tasks on the real engine: a step verified in a separate environment, and the
setup phase's network plan (``policy.setup_egress``) for each step's ``setup.sh``.

The tasks are laid out as Harbor 0.25's ``harbor tasks init --steps`` writes them.
"""

from __future__ import annotations

import contextlib
import textwrap
import uuid
from pathlib import Path

import docker.errors
import pytest
import requests.exceptions

from pytest_maka.testing.servers import EGRESS_TOKEN

from ..conftest import Cohort
from ..steps_helpers import write_steps_task

pytestmark = pytest.mark.docker

BASE = "python:3.11-slim"
NO_RETRY = {"infra": 0, "backoff_sec": 0}

#: Step one: reward 1 iff /app/one.txt says "one" and the verifier's /bin/sh is the image's.
TEST_ONE = textwrap.dedent(
    """\
    #!/bin/bash
    ok=1
    [ "$(cat /app/one.txt 2>/dev/null)" = one ] || ok=0
    [ -L /bin/sh ] || ok=0
    [ -e /app/planted.txt ] && ok=0
    mkdir -p /logs/verifier; echo $ok > /logs/verifier/reward.txt
    """
)
#: Step two (shared): the subject's environment went on after step one's separate verifier.
TEST_TWO = textwrap.dedent(
    """\
    #!/bin/bash
    ok=1
    [ "$(cat /app/one.txt 2>/dev/null)" = one ] || ok=0
    [ "$(cat /app/two.txt 2>/dev/null)" = two ] || ok=0
    echo $ok > /logs/verifier/reward.txt
    """
)
#: A subject that does not solve step one and tampers with its own environment instead.
HOSTILE = (
    "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt; echo planted > /app/planted.txt; "
    "printf '#!/bin/bash\\nmkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\\n' > /tmp/sh; "
    "chmod +x /tmp/sh; mv -f /tmp/sh /bin/sh; "
    "(trap '' TERM; while :; do echo 1 > /logs/verifier/reward.txt 2>/dev/null; sleep 0.05; done) >/dev/null 2>&1 &"
)


def _images(docker_api, task: str) -> None:  # type: ignore[no-untyped-def]
    for image in docker_api.images(filters={"label": f"io.pytest-maka.task={task}"}):
        with contextlib.suppress(docker.errors.APIError, requests.exceptions.RequestException):
            docker_api.remove_image(image["Id"], force=True)


def _base(task: Path) -> Path:
    (task / "environment" / "Dockerfile").write_text(f"FROM {BASE}\nWORKDIR /app\n")
    return task


def test_step_verified_separately_resists_tampering_and_the_oracle_passes_both_steps(
    cohort: Cohort, docker_api, tmp_path_factory: pytest.TempPathFactory
) -> None:  # type: ignore[no-untyped-def]
    name = f"sep-steps-{uuid.uuid4().hex[:8]}"
    _base(
        write_steps_task(
            cohort.tasks,
            name,
            [
                {
                    "name": "one",
                    "min_reward": 1.0,
                    "step_toml": ['artifacts = ["/app/one.txt"]'],
                    "verifier_toml": ['environment_mode = "separate"'],
                    "test": TEST_ONE,
                },
                {"name": "two", "test": TEST_TWO},
            ],
        )
    )
    state = tmp_path_factory.mktemp("state")
    cohort.write(
        subjects=[{"name": "oracle", "kind": "oracle"}, {"name": "evil", "kind": "command", "command": HOSTILE}],
        executor={"kind": "docker", "kill_grace_sec": 0.5, "state_dir": str(state)},
        retries=NO_RETRY,
    )
    try:
        result = cohort.run_subprocess("-n", "2", timeout=400)
        oracle, evil = (cohort.results()[f"{name}[{s}-r0]"] for s in ("oracle", "evil"))
        assert (oracle["status"], oracle["passed"]) == ("agent_success", True), result.stdout.str()[-3000:]
        one, two = oracle["steps"]
        assert (one["verdict"], two["verdict"]) == ("passed", "passed")
        assert (one["verifier"]["environment"], two["verifier"]["environment"]) == ("separate", "shared")

        # The hostile subject's reward files, planted file, replaced /bin/sh and daemon stayed in
        # its own environment: the fresh one saw none of them, and step two never ran.
        assert (evil["status"], evil["passed"]) == ("agent_failure", False), result.stdout.str()[-3000:]
        first, second = evil["steps"]
        assert (first["verdict"], first["rewards"]) == ("failed", {"reward": 0.0})
        assert first["verifier"]["environment"] == "separate"
        assert second["run"] is False and "below min_reward" in second["not_run"]
        assert docker_api.containers(all=True, filters={"label": f"io.pytest-maka.task={name}"}) == []
    finally:
        _images(docker_api, name)


FETCH = (
    'python3 -c "import sys, urllib.request as u\n'
    "for url in sys.argv[1:]:\n"
    "    try: print(url, u.urlopen(url, timeout=10).read().decode())\n"
    "    except Exception as e: print(url, 'FAILED', e)\" "
)


def test_setup_sh_gets_the_setup_allowlist_and_the_agent_phase_does_not(
    cohort: Cohort, docker_api, egress_upstream, tmp_path_factory: pytest.TempPathFactory
) -> None:  # type: ignore[no-untyped-def]
    network, ip, port = egress_upstream
    name = f"setup-net-{uuid.uuid4().hex[:8]}"
    host = f"allowed.test:{port}"
    setup = FETCH + f"http://{host}/setup > /app/setup-net.txt\ngrep -q {EGRESS_TOKEN} /app/setup-net.txt\n"
    _base(write_steps_task(cohort.tasks, name, [{"name": "one", "setup": setup}]))
    agent = FETCH + f"http://{host}/agent > $MAKA_LOGS_DIR/net.txt; echo one > /app/one.txt"
    cohort.write(
        subjects=[{"name": "a", "kind": "command", "command": agent}],
        executor={
            "kind": "docker",
            "state_dir": str(tmp_path_factory.mktemp("state")),
            "egress_network": network,
            "egress_hosts": {"allowed.test": ip},
        },
        policy={"setup_egress": [host]},
        retries=NO_RETRY,
    )
    try:
        result = cohort.run_subprocess(timeout=300)
        record = cohort.results()[f"{name}[a-r0]"]
        assert record["status"] == "agent_success", result.stdout.str()[-3000:]
        (step,) = record["steps"]
        assert step["network"]["setup"]["mode"] == "allowlist" and step["network"]["agent"]["mode"] == "none"
        seen = (cohort.out / step["artifacts"]["agent_logs"] / "net.txt").read_text()
        assert "FAILED" in seen and EGRESS_TOKEN not in seen, seen
        net = record["isolation"]["network"]
        assert (net["setup"], net["agent"]) == ("allowlist", "none")
        assert net["phases"]["setup"]["connections"]["allowed"] == 1, net["phases"]
    finally:
        _images(docker_api, name)
