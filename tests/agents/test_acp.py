"""The ACP subject against a real agent process in the sandbox: requests routed, permissions, budgets, timeouts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import Cohort, needs_bwrap

pytestmark = [pytest.mark.sandbox, needs_bwrap]
AGENT = (Path(__file__).parent / "fake_acp_agent.py").read_text()


def _cohort(cohort: Cohort, mode: str, **spec: object) -> None:
    cohort.task("t", workspace={"agent.py": AGENT}, agent_timeout=spec.pop("agent_timeout", 60))  # type: ignore[arg-type]
    subject = {"name": "acp-agent", "kind": "acp", "command": "python3 agent.py", "set_env": {"FAKE_ACP_MODE": mode}}
    cohort.write(subjects=[subject], retries={"infra": 0}, **spec)


def test_file_and_terminal_requests_run_in_the_sandbox(cohort: Cohort) -> None:
    _cohort(cohort, "work")
    cohort.run().assert_outcomes(passed=1)
    record = cohort.results()["t[acp-agent-r0]"]
    assert record["status"] == "agent_success"
    assert record["usage"]["input_tokens"] == 300 and record["usage"]["output_tokens"] == 40
    trajectory = json.loads((cohort.out / record["artifacts"]["trajectory"]).read_text())
    calls = {c["function_name"]: s for s in trajectory["steps"] for c in s.get("tool_calls") or []}
    assert set(calls) == {"Write done.txt", "Run tests"}
    run = calls["Run tests"]["observation"]["results"][0]["content"]
    assert "terminal-out" in run and '"exit_code": 0' in run.replace("'", '"').replace("exitCode", "exit_code")
    wrote = calls["Write done.txt"]["observation"]["results"][0]["content"]
    assert "ok" in wrote, "the agent read back what it wrote through fs/read_text_file"
    diff = (cohort.out / record["artifacts"]["diff"]).read_text()
    assert "+ran" in diff, "the terminal command ran in the task workdir"
    assert "1 terminal/create" in (cohort.out / record["artifacts"]["agent_log"]).read_text()
    assert record["agent"]["telemetry"]["tool_calls"] == 2
    assert record["agent"]["telemetry"]["time_to_first_test_run_s"] is not None
    assert record["subject_claim"] == {"final_message": "All done.", "authoritative": False}


def test_a_denied_permission_that_ends_the_turn_is_policy_denied(cohort: Cohort) -> None:
    cohort.task("t", workspace={"agent.py": AGENT})
    subject = {
        "name": "acp-agent",
        "kind": "acp",
        "command": "python3 agent.py",
        "permissions": "deny",
        "set_env": {"FAKE_ACP_MODE": "deny"},
    }
    cohort.write(subjects=[subject], retries={"infra": 0})
    cohort.run().assert_outcomes(errors=1)
    record = cohort.results()["t[acp-agent-r0]"]
    assert record["status"] == "policy_denied" and record["official"] is False
    assert "rm -rf /app" in record["error"]["message"]


def test_permissions_are_allowed_inside_isolation(cohort: Cohort) -> None:
    _cohort(cohort, "deny")  # the agent asks; policy: allow inside an isolating sandbox
    cohort.run().assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("budget", "value"), [("max_cost_usd", 1.0), ("max_tokens", 500), ("cohort_max_cost_usd", 2.0)]
)
def test_a_budget_cancels_the_turn_mid_run(cohort: Cohort, budget: str, value: float) -> None:
    _cohort(cohort, "budget", budgets={budget: value})  # the agent reports 1000 tokens and $5, then waits
    cohort.run().assert_outcomes(failed=1)
    record = cohort.results()["t[acp-agent-r0]"]
    if budget == "cohort_max_cost_usd":  # the experimenter's whole-run cap: the run ran out, not this cell
        assert record["status"] == "budget_exhausted"
        assert record["error"]["message"] == f"budget exhausted: {budget}"
    else:  # the figures are the agent's own report: stopped, it did not finish, and stays official (issue 22)
        assert record["status"] == "agent_incomplete" and record["official"] is True
        assert record["error"]["message"].endswith(f"; over {budget} by its own report")
    assert record["budget"]["exceeded"] == budget
    assert record["usage"]["cost_usd"] == 5.0  # the agent's own usage_update.cost, kept after the cancel
    assert record["agent"]["cost"] == {"source": "agent", "guess": False}
    assert "budget exceeded: cancelling" in (cohort.out / record["artifacts"]["agent_log"]).read_text()


def test_an_agent_that_ignores_cancel_is_stopped_at_the_timeout(cohort: Cohort) -> None:
    _cohort(cohort, "hang", agent_timeout=2)
    cohort.run().assert_outcomes(failed=1)
    record = cohort.results()["t[acp-agent-r0]"]
    assert record["status"] == "agent_incomplete"
    assert record["agent"]["timed_out"] is True


def test_an_agent_that_is_not_acp_is_the_agents_failure(cohort: Cohort) -> None:
    cohort.task("t")
    cohort.write(
        subjects=[{"name": "acp-agent", "kind": "acp", "command": "echo not-json; exit 3"}], retries={"infra": 0}
    )
    cohort.run().assert_outcomes(failed=1)
    record = cohort.results()["t[acp-agent-r0]"]
    assert record["status"] == "agent_incomplete"
    assert "failed to start a session" in record["agent"]["error"]


def test_a_turn_the_agent_reports_cancelled_is_agent_aborted_even_with_the_file_written(cohort: Cohort) -> None:
    _cohort(cohort, "cancelled")
    cohort.run()
    record = cohort.results()["t[acp-agent-r0]"]
    assert record["status"] == "agent_aborted" and record["official"] is False and record["passed"] is False, record
    assert record["agent"]["stop_reason"] == "cancelled"


def test_a_call_seen_only_in_tool_call_updates_and_tokens_in_meta_are_recorded(cohort: Cohort) -> None:
    _cohort(cohort, "meta")
    cohort.run().assert_outcomes(passed=1)
    record = cohort.results()["t[acp-agent-r0]"]
    assert record["usage"]["input_tokens"] == 70 and record["usage"]["output_tokens"] == 9  # _meta.quota.token_count
    assert record["agent"]["version"] == "0.0.7"  # from its initialize answer's agentInfo
    assert record["agent"]["name"] == "fake-acp-agent"  # its agentInfo.name: named in the report, not plain acp
    assert "| acp: fake-acp-agent 0.0.7 |" in (cohort.out / "summary.md").read_text()
    assert "acp: fake-acp-agent 0.0.7" in (cohort.out / "report.html").read_text()
    assert json.loads((cohort.out / record["artifacts"]["trajectory"]).read_text())["agent"]["version"] == "0.0.7"
    trajectory = json.loads((cohort.out / record["artifacts"]["trajectory"]).read_text())
    calls = [c for s in trajectory["steps"] for c in s.get("tool_calls") or []]
    assert calls == [{"tool_call_id": "t3", "function_name": "Write done.txt", "arguments": {"path": "done.txt"}}]
    step = next(s for s in trajectory["steps"] if s.get("tool_calls"))
    assert step["observation"]["results"][0]["content"] == "written"


@pytest.mark.agent  # installs from the npm registry (npm's own cache helps)
@pytest.mark.needs("npm")
def test_an_install_into_a_cold_cache_is_timings_install_not_setup(cohort: Cohort, tmp_path: Path) -> None:
    """A real npm install (a tiny package plus the portable Node runtime) into an empty cache: the cell
    that installed has ``timings.install``, the next cell (the cache warm) has none."""
    cohort.task("t", workspace={"agent.py": AGENT}, agent_timeout=60)
    subject = {
        "name": "acp-agent",
        "kind": "acp",
        "command": "python3 agent.py",
        "install": "npm:left-pad@1.3.0",
        "cache_dir": str(tmp_path / "cache"),
        "set_env": {"FAKE_ACP_MODE": "work"},
    }
    cohort.write(subjects=[subject], repetitions=2, retries={"infra": 0})
    cohort.run().assert_outcomes(passed=2)
    cold, warm = (cohort.results()[f"t[acp-agent-r{r}]"] for r in (0, 1))
    built = json.loads(next((tmp_path / "cache").glob("left-pad-1.3.0-*/.maka-install.json")).read_text())
    assert cold["timings"]["install"] >= built["seconds"] - 0.1, (cold["timings"], built)
    assert cold["timings"]["setup"] < cold["timings"]["install"], "the install is not part of setup"
    assert "install" not in warm["timings"], warm["timings"]
    assert any("/opt/maka/agent (ro" in m for m in cold["isolation"]["mounts"]), cold["isolation"]["mounts"]
