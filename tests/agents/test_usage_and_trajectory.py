"""Usage normalisation, cost from the dated price table, ATIF trajectories and their telemetry."""

from __future__ import annotations

from pytest_maka.core.trajectory import Trajectory, claimed_success, telemetry
from pytest_maka.core.usage import normalise, price_cost, tokens, with_cost
from pytest_maka.subjects.presets.prices import price_table, shipped


def test_unknown_stays_none_never_zero() -> None:
    assert normalise({"input_tokens": "12", "output_tokens": True, "cost_usd": -1}) == {}
    assert tokens({}) is None
    usage, source = with_cost({"input_tokens": 10}, "claude-sonnet-4-5", shipped())
    assert "cost_usd" not in usage and source is None, "no output count: the cost stays unknown"
    assert with_cost({"input_tokens": 10, "output_tokens": 5}, "some-unpriced-model", shipped()) == (
        {"input_tokens": 10, "output_tokens": 5},
        None,
    )


def test_cost_from_the_dated_table_and_from_the_agent() -> None:
    usage = {"input_tokens": 1_000_000, "output_tokens": 100_000, "cache_read_tokens": 1_000_000}
    priced, source = with_cost(usage, "anthropic/claude-sonnet-4-5", shipped())
    assert priced["cost_usd"] == 3.0 + 1.5 + 0.3
    assert source == f"price_table:{shipped()['date']}"
    own, source = with_cost({**usage, "cost_usd": 0.25}, "claude-sonnet-4-5", shipped())
    assert own["cost_usd"] == 0.25 and source == "subject"


def test_a_spec_override_wins_and_marks_the_date() -> None:
    table = price_table({"my-model": {"input": 1.0, "output": 2.0}})
    assert price_cost({"input_tokens": 10**6, "output_tokens": 10**6}, "my-model", table) == 3.0
    assert table["date"].endswith("+spec")
    assert price_cost({"input_tokens": 1, "output_tokens": 1, "cache_write_tokens": 5}, "my-model", table) is None


def test_trajectory_merges_call_updates_and_attaches_results() -> None:
    traj = Trajectory(agent="a", model="m")
    traj.step("user", "do it", ts=1000.0)
    traj.call("c1", "Write", {}, ts=1001.0)
    traj.call("c1", "Write /app/x", {"file_path": "/app/x", "content": "hi"})
    traj.result("c1", "ok")
    traj.call("c2", "Bash", {"command": "pytest -q"}, ts=1004.5)
    traj.say("done")
    data = traj.to_json({"total_cost_usd": None, "total_prompt_tokens": 5})
    assert data["schema_version"].startswith("ATIF")
    calls = [c for s in data["steps"] for c in s.get("tool_calls") or []]
    assert [c["function_name"] for c in calls] == ["Write /app/x", "Bash"]
    assert data["steps"][1]["observation"]["results"] == [{"source_call_id": "c1", "content": "ok"}]
    assert data["final_metrics"] == {"total_prompt_tokens": 5}
    facts = telemetry(data, started_at=1000.0)
    assert facts["tool_calls"] == 2 and facts["time_to_first_write_s"] == 1.0
    assert facts["time_to_first_test_run_s"] == 4.5 and facts["tool_calls_before_first_write"] == 0


def test_structured_claims_only() -> None:
    assert claimed_success({"status": "complete"}) is True
    assert claimed_success({"passed": False}) is False
    assert claimed_success({"final_message": "I fixed everything!"}) is None
    assert claimed_success("done") is None


def test_token_usage_adds_field_by_field_and_keeps_unknown_unknown() -> None:
    from pytest_maka.core.usage import TokenUsage

    total = TokenUsage(input_tokens=3) + TokenUsage(input_tokens=4, output_tokens=1, cost_usd=0.5)
    total += TokenUsage(models={"m": TokenUsage(input_tokens=1)}) + TokenUsage(models={"m": TokenUsage(input_tokens=2)})
    assert total.as_dict() == {
        "input_tokens": 7,
        "output_tokens": 1,
        "cost_usd": 0.5,
        "models": {"m": {"input_tokens": 3}},
    }
    assert total.cache_read_tokens is None
    typed = TokenUsage.of(
        {"input_tokens": 2, "cache_tokens": 3, "output_tokens": "9", "models": {"x": {"output_tokens": 1}}}
    )
    assert typed.as_dict() == {"input_tokens": 2, "cache_read_tokens": 3, "models": {"x": {"output_tokens": 1}}}
    assert TokenUsage.of(None).as_dict() == {}
