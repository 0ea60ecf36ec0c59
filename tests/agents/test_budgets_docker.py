"""A budget stops a looping agent within one request on the Docker executor too (the agent a live process in
its container, stopped with its process tree), and a killed agent keeps the usage it streamed."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_maka.testing.model_server import Action, Script
from tests.conftest import Cohort

from .conftest import docker_model_server, installed

pytestmark = [pytest.mark.docker, pytest.mark.agent]

PER_REPLY = 530
#: A provider answers in about a second: an instant stand-in lets the agent send its next request
#: while the engine is still stopping it (under load, two more than the budget allowed were seen).
LOOP = Script(actions=[Action.shell("true")], input_tokens=500, output_tokens=30, repeat=True, reply_delay_sec=1.0)


def _turns(requests: list[dict[str, Any]]) -> int:
    """The agent's own model requests (with tools), not its side requests."""
    return sum(1 for r in requests if isinstance(r.get("body"), dict) and r["body"].get("tools"))


@pytest.mark.parametrize(
    ("kind", "key"),
    [
        ("claude-code", "ANTHROPIC_API_KEY"),
        ("qwen-code", "OPENAI_API_KEY"),
        ("pi", "ANTHROPIC_API_KEY"),
        ("opencode", "ANTHROPIC_API_KEY"),
    ],
)
def test_max_tokens_stops_an_agent_in_docker_within_one_request(
    cohort: Cohort,
    agent_cache: Any,
    secret_env: str,
    docker_api: Any,
    tmp_path: Any,
    kind: str,
    key: str,
) -> None:
    installed(agent_cache, kind)
    limit = 3000
    crossing = limit // PER_REPLY + 1
    with docker_model_server(docker_api, LOOP, tmp_path) as model:
        cohort.task("t", agent_timeout=240)
        subject = {
            "name": "a",
            "kind": kind,
            "base_url": model.url,
            "env": [key],
            "cache_dir": str(agent_cache.root),
        }
        executor = model.executor(agent_install="mount")
        cohort.write(subjects=[subject], executor=executor, retries={"infra": 0}, budgets={"max_tokens": limit})
        result = cohort.run()
        turns = _turns(model.requests())
    record = cohort.results()["t[a-r0]"]
    # the figures are the agent's own output: stopped, it did not finish, and stays official (issue 22)
    assert record["status"] == "agent_incomplete", (record["status"], record["error"], result.outlines[-20:])
    assert record["official"] is True and record["error"]["message"].endswith("over max_tokens by its own report")
    assert record["budget"]["exceeded"] == "max_tokens"
    assert record["agent"]["timed_out"] is False
    assert crossing <= turns <= crossing + 1, (turns, crossing)
    assert record["usage"]["input_tokens"] + record["usage"]["output_tokens"] > limit
