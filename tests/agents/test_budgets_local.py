"""Usage metered while real agent CLIs run, on the local executor, against a model server that never lets
them finish: a killed agent keeps the usage its stream reported, and a budget stops it within one request."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from pytest_maka.testing.model_server import Action, ModelServer, Script, model_server
from tests.conftest import Cohort, needs_bwrap

from .conftest import installed

pytestmark = [pytest.mark.sandbox, pytest.mark.agent, needs_bwrap]

#: Tokens the scripted model reports per reply.
PER_REPLY_IN, PER_REPLY_OUT = 500, 30
LOOP = Script(actions=[Action.shell("true")], input_tokens=PER_REPLY_IN, output_tokens=PER_REPLY_OUT, repeat=True)
#: A loop at a provider's pace: for the agents whose usage is read from a file rewritten after every step,
#: and for the budget stops, whose "within one request" is measured against a provider that takes its time
#: (an instant stand-in lets the agent send two requests while a loaded host stops it: CI saw 8 for 5-7).
PACED = replace(LOOP, reply_delay_sec=1.0)
SCRIPT = {"mini-swe-agent": PACED}


def subject(kind: str, server: ModelServer, cache: Any, **extra: Any) -> dict[str, Any]:
    key = {"claude-code": "ANTHROPIC_API_KEY", "pi": "ANTHROPIC_API_KEY", "opencode": "ANTHROPIC_API_KEY"}.get(
        kind, "OPENAI_API_KEY"
    )
    return {
        "name": "a",
        "kind": kind,
        "base_url": server.url,
        "env": [key],
        "cache_dir": str(cache.root),
        **extra,
    }


def run_looping(
    cohort: Cohort, kind: str, cache: Any, *, agent_timeout: float, budgets: dict[str, Any], paced: bool = False
) -> tuple:
    installed(cache, kind)
    with model_server(PACED if paced else SCRIPT.get(kind, LOOP)) as server:
        cohort.task("t", agent_timeout=agent_timeout)
        cohort.write(subjects=[subject(kind, server, cache)], retries={"infra": 0}, budgets=budgets)
        result = cohort.run()
        turns = len(server.tool_requests())
    record = cohort.results()["t[a-r0]"]
    return record, turns, result


#: Seconds before the kill: opencode 1.18.33 spent 13-18 s before its first model request on 2 busy cores.
TIMEOUT = {"opencode": 45.0}


#: mini-swe-agent streams no usage but saves its trajectory after every step: what it kept is read after the kill.
#: It rewrites that file whole (truncate, then write), so a kill inside a rewrite loses it; against an instant
#: stand-in it reached ~130 steps in 20 s and one run of 10 failed (most likely so); 1 s a reply here.
@pytest.mark.parametrize("kind", ["claude-code", "pi", "qwen-code", "opencode", "mini-swe-agent"])
def test_an_agent_killed_at_its_timeout_keeps_the_usage_it_streamed(
    cohort: Cohort, agent_cache: Any, secret_env: str, kind: str
) -> None:
    timeout = TIMEOUT.get(kind, 20.0)
    record, turns, result = run_looping(cohort, kind, agent_cache, agent_timeout=timeout, budgets={})
    assert turns >= 2, (turns, record["error"], result.outlines[-20:])
    assert record["agent"]["timed_out"] is True, record["agent"]
    assert record["status"] == "agent_incomplete", record["status"]
    usage = record["usage"]
    # every reply the agent printed before it was killed is counted (the last may not have reached its stream)
    assert usage["input_tokens"] is not None and usage["input_tokens"] >= PER_REPLY_IN * (turns - 1), (usage, turns)
    assert usage["input_tokens"] <= PER_REPLY_IN * turns, (usage, turns)
    assert record["agent"]["usage_partial"] is True
    assert record["agent"]["version"], record["agent"]


@pytest.mark.parametrize("kind", ["claude-code", "pi", "qwen-code", "opencode"])
def test_max_tokens_stops_a_looping_agent_within_one_request(
    cohort: Cohort, agent_cache: Any, secret_env: str, kind: str
) -> None:
    limit = 3000  # crossed by reply 6 (6 x 530 = 3180)
    crossing = limit // (PER_REPLY_IN + PER_REPLY_OUT) + 1
    record, turns, result = run_looping(
        cohort, kind, agent_cache, agent_timeout=90, budgets={"max_tokens": limit}, paced=True
    )
    # the figures are the agent's own output: stopped, it did not finish, and stays official (issue 22)
    assert record["status"] == "agent_incomplete", (record["status"], record["error"], result.outlines[-20:])
    assert record["official"] is True
    assert record["agent"]["timed_out"] is False, record["agent"]
    assert record["budget"]["exceeded"] == "max_tokens", record["budget"]
    used = record["usage"]["input_tokens"] + record["usage"]["output_tokens"]
    assert used > limit, record["usage"]
    assert crossing <= turns <= crossing + 1, (turns, crossing)
    assert record["agent"]["stop_reason"] == "budget"


def test_max_cost_stops_claude_code_by_the_price_table(cohort: Cohort, agent_cache: Any, secret_env: str) -> None:
    # claude-sonnet-4-5 at the table's $3/Mtok in, $15/Mtok out: 530 tokens a reply cost $0.00195
    record, turns, result = run_looping(
        cohort, "claude-code", agent_cache, agent_timeout=240, budgets={"max_cost_usd": 0.01}, paced=True
    )
    assert record["status"] == "agent_incomplete", (record["status"], record["error"], result.outlines[-20:])
    assert record["budget"]["exceeded"] == "max_cost_usd", record["budget"]
    assert 5 <= turns <= 7, turns
    assert record["usage"]["cost_usd"] > 0.01


def test_the_runs_cost_cap_stops_an_agent_in_flight(cohort: Cohort, agent_cache: Any, secret_env: str) -> None:
    record, turns, result = run_looping(
        cohort, "claude-code", agent_cache, agent_timeout=240, budgets={"cohort_max_cost_usd": 0.01}, paced=True
    )
    assert record["status"] == "budget_exhausted", (record["status"], record["error"], result.outlines[-20:])
    assert record["budget"]["exceeded"] == "cohort_max_cost_usd", record["budget"]
    assert 5 <= turns <= 7, turns
    assert record["agent"]["cost"]["source"] == "price_table"
