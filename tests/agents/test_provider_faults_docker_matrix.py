"""Every preset under provider faults on the Docker executor: the scripted model server in a container
on an internal network of its own, reached only through the egress proxy over plain HTTP.

For each of the eight presets, a provider that rejects every key (401) and one that reads each request
and never answers (``Fault("hang")``) end ``infra_failure``, not retried, and the subject's next cell is
not run. The evidence is the CLI's own report where it gives one, and always the egress proxy's: the
statuses of the plain-HTTP answers it read (``egress.log`` ``statuses``) and the connections that got
not one byte back (docs/agents.md, "Provider evidence").
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_maka.testing.model_faults import Fault
from pytest_maka.testing.model_server import Action, Script
from tests.conftest import Cohort

from .conftest import BY_KIND, DockerModel, docker_model_server, installed

pytestmark = [pytest.mark.docker, pytest.mark.agent]

KINDS = ["claude-code", "codex", "gemini-cli", "opencode", "pi", "qwen-code", "aider", "mini-swe-agent"]
#: A model each preset's CLI knows without a provider catalogue (the others use the preset's default).
MODELS = {"pi": "claude-sonnet-4-5", "gemini-cli": "gemini-2.5-pro"}
#: claude-code retries a 401 until its timeout; the others give up within seconds.
TIMEOUT_401 = {"claude-code": 15}
WRITE = [Action.write("/app/done.txt", "ok\n")]


def _run(
    cohort: Cohort, cache: Any, api: Any, tmp_path: Any, kind: str, fault: Fault, timeout: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """Cells ``a`` and ``b`` of ``kind`` against a model server with ``fault``: (the attempts, the
    server's POST requests, the run's last output lines)."""
    installed(cache, kind)
    with docker_model_server(api, Script(actions=WRITE, fault=fault), tmp_path) as server:
        for name in ("a", "b"):
            cohort.task(name, instruction="Create /app/done.txt containing ok.", agent_timeout=timeout)
        executor = server.executor(agent_install="mount")
        cohort.write(subjects=[_subject(kind, server, str(cache.root))], executor=executor, retries={"infra": 2})
        result = cohort.run()
        posts = [r for r in server.requests() if r.get("method") == "POST"]
    attempts = cohort.attempts()
    assert [a["cell_id"] for a in attempts] == ["a[agent-r0]", "b[agent-r0]"], "no retry, one attempt per cell"
    second = attempts[1]
    assert second["status"] == "infra_failure" and second["error"]["retryable"] is False, second["error"]
    assert second["error"]["message"].startswith("not run: provider"), second["error"]
    return attempts, posts, result.outlines[-20:]


def _subject(kind: str, server: DockerModel, cache: str) -> dict[str, object]:
    subject: dict[str, object] = {
        "name": "agent",
        "kind": kind,
        "base_url": server.url,
        "env": [BY_KIND[kind].key_env],
        "cache_dir": cache,
    }
    if kind in MODELS:
        subject["model"] = MODELS[kind]
    return subject


def _model_events(cohort: Cohort, record: dict[str, Any]) -> list[dict[str, Any]]:
    """The egress proxy's allowed agent-phase connections to the model server."""
    lines = (cohort.out / record["artifacts"]["egress_log"]).read_text().splitlines()
    events = [json.loads(line) for line in lines]
    return [e for e in events if e["phase"] == "agent" and e["allowed"] and e["destination"].startswith("model.test:")]


@pytest.mark.parametrize("kind", KINDS)
def test_every_request_rejected_on_docker_is_infra_failure(
    kind: str, cohort: Cohort, agent_cache: Any, secret_env: str, docker_api: Any, tmp_path: Any
) -> None:
    timeout = TIMEOUT_401.get(kind, 45)
    attempts, posts, tail = _run(cohort, agent_cache, docker_api, tmp_path, kind, Fault("401"), timeout)
    record = attempts[0]
    agent = record["agent"]
    assert record["status"] == "infra_failure", (record["error"], agent, tail)
    assert agent["provider_answered"] is False, agent
    assert set(agent["provider_errors"]) == {"401"}, agent
    assert 1 <= agent["provider_errors"]["401"] <= len(posts), (agent, posts)
    assert record["error"]["message"].startswith("provider refused every request: 401 x"), record["error"]
    assert record["error"]["retryable"] is False
    # the proxy read every answer the model server sent: 401s only, never a 2xx
    statuses = [s for e in _model_events(cohort, record) for s in e.get("statuses") or []]
    assert statuses and set(statuses) == {401}, statuses


@pytest.mark.parametrize("kind", KINDS)
def test_a_provider_that_never_answers_on_docker_is_infra_failure(
    kind: str, cohort: Cohort, agent_cache: Any, secret_env: str, docker_api: Any, tmp_path: Any
) -> None:
    attempts, posts, tail = _run(cohort, agent_cache, docker_api, tmp_path, kind, Fault("hang"), 20)
    record = attempts[0]
    agent = record["agent"]
    assert record["status"] == "infra_failure", (record["error"], agent, tail)
    assert agent["timed_out"] is True and agent["provider_answered"] is False, agent
    assert set(agent["provider_errors"]) == {"no answer"}, agent
    assert record["error"]["message"].startswith("provider never answered: no answer x"), record["error"]
    assert record["error"]["retryable"] is False
    assert posts, "the model server read at least one request"
    silent = [e for e in _model_events(cohort, record) if e["bytes_out"] and not e["bytes_in"]]
    assert len(silent) >= agent["provider_errors"]["no answer"] >= 1, (silent, agent)
