"""Real ACP agents under provider faults, on both executors: claude-code-acp and ``opencode acp`` against
the stand-in model server that rejects every key, rate-limits every other request, never answers, or
never lets the agent finish (a budget stops it). The record says whose fault the result is.

The matrix (agent x fault x executor -> class) is in docs/agents.md, "ACP agents under provider faults".
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_maka.testing.model_faults import Fault
from pytest_maka.testing.model_server import Action, Script, model_server
from tests.conftest import Cohort, needs_bwrap

from .conftest import docker_model_server, opencode_acp

CLAUDE_ACP = "npm:@zed-industries/claude-code-acp@0.16.2"
WRITE = [Action.write("/app/done.txt", "ok\n")]
#: Tokens the scripted model reports per reply, and the looping script.
PER_REPLY_IN, PER_REPLY_OUT = 500, 30
LOOP = Script(actions=[Action.shell("true")], input_tokens=PER_REPLY_IN, output_tokens=PER_REPLY_OUT, repeat=True)
LIMIT = 3000  # crossed by reply 6 (6 x 530 = 3180)
COST_PER_REPLY = (PER_REPLY_IN * 3 + PER_REPLY_OUT * 15) / 1e6


@dataclass
class Model:
    """The stand-in provider as an agent sees it: its URL, what ``cohort.write`` needs to reach it, its requests."""

    url: str
    write: dict[str, Any]
    requests: Any  # () -> list of request paths

    def messages(self) -> int:
        return sum(1 for path in self.requests() if "/v1/messages" in path)


@contextmanager
def provider(executor: str, script: Script, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Model]:
    """The model server on the host's loopback (local: an allowlisted tunnel) or in a container (Docker)."""
    if executor == "local":
        with model_server(script) as server:
            yield Model(
                server.url,
                {"policy": {"egress": [f"127.0.0.1:{server.port}"]}},
                lambda: [r.path for r in server.requests],
            )
        return
    api = request.getfixturevalue("docker_api")
    with docker_model_server(api, script, tmp_path) as model:
        yield Model(model.url, {"executor": model.executor()}, lambda: [str(r["path"]) for r in model.requests()])


def claude_acp(cache: Any, url: str) -> dict[str, Any]:
    from pytest_maka.subjects.acp.options import install_spec

    cache.ensure(install_spec(CLAUDE_ACP))
    return {
        "name": "acp",
        "kind": "acp",
        "command": "claude-code-acp",
        "install": CLAUDE_ACP,
        "env": ["ANTHROPIC_API_KEY"],
        "set_env": {"ANTHROPIC_BASE_URL": url, "IS_SANDBOX": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"},
        "cache_dir": str(cache.root),
    }


AGENTS = {"claude-code-acp": claude_acp, "opencode-acp": opencode_acp}
#: Each cell installs and runs a real agent CLI (``-m agent``) in bubblewrap or Docker.
EXECUTORS = [
    pytest.param("local", marks=[pytest.mark.agent, pytest.mark.sandbox, needs_bwrap], id="local"),
    pytest.param("docker", marks=[pytest.mark.agent, pytest.mark.docker], id="docker"),
]


def run(cohort: Cohort, model: Model, subject: dict[str, Any], **write: Any) -> Any:
    cohort.write(subjects=[subject], **model.write, **write)
    return cohort.run()


@pytest.mark.parametrize("agent", list(AGENTS))
@pytest.mark.parametrize("executor", EXECUTORS)
def test_every_request_rejected_is_infra_failure_and_stops_the_subject(
    cohort: Cohort,
    agent_cache,
    secret_env: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    agent: str,
    executor: str,
) -> None:  # type: ignore[no-untyped-def]
    with provider(executor, Script(actions=WRITE, fault=Fault("401")), request, tmp_path) as model:
        cohort.task("a", agent_timeout=25)  # claude-code-acp retries a 401 in silence until its timeout
        cohort.task("b", agent_timeout=25)
        result = run(cohort, model, AGENTS[agent](agent_cache, model.url), retries={"infra": 2})
        refused = model.messages()
    attempts = cohort.attempts()
    assert [a["cell_id"] for a in attempts] == ["a[acp-r0]", "b[acp-r0]"], "no retry, one attempt per cell"
    first, second = attempts
    assert first["status"] == "infra_failure", (first["error"], first["agent"], result.outlines[-20:])
    facts = first["agent"]
    assert facts["provider_answered"] is False and 1 <= facts["provider_errors"]["401"] <= refused, (facts, refused)
    assert first["error"]["message"].startswith("provider refused every request: 401 x"), first["error"]
    assert first["error"]["retryable"] is False
    assert second["status"] == "infra_failure" and second["error"]["retryable"] is False
    assert second["error"]["message"].startswith("not run: provider refused every request: 401 x"), second["error"]


@pytest.mark.parametrize("agent", list(AGENTS))
@pytest.mark.parametrize("executor", EXECUTORS)
def test_an_intermittent_429_is_official_and_counted(
    cohort: Cohort,
    agent_cache,
    secret_env: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    agent: str,
    executor: str,
) -> None:  # type: ignore[no-untyped-def]
    script = Script(actions=WRITE, final_text="Done.", fault=Fault("429", every=2))
    with provider(executor, script, request, tmp_path) as model:
        cohort.task("t", agent_timeout=120)
        result = run(cohort, model, AGENTS[agent](agent_cache, model.url), retries={"infra": 0})
        limited = model.messages() // 2
    record = cohort.results()["t[acp-r0]"]
    assert record["status"] == "agent_success", (record["error"], record["agent"], result.outlines[-20:])
    assert record["official"] is True
    facts = record["agent"]
    assert facts["provider_answered"] is True, facts
    assert 1 <= facts["provider_errors"]["429"] <= limited, (facts, limited)
    assert "provider_unusable" not in facts


@pytest.mark.parametrize("agent", list(AGENTS))
@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_provider_that_never_answers_is_infra_failure(
    cohort: Cohort,
    agent_cache,
    secret_env: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    agent: str,
    executor: str,
) -> None:  # type: ignore[no-untyped-def]
    with provider(executor, Script(actions=WRITE, fault=Fault("hang")), request, tmp_path) as model:
        cohort.task("t", agent_timeout=30)
        result = run(cohort, model, AGENTS[agent](agent_cache, model.url), retries={"infra": 1})
        asked = model.messages()
    attempts = cohort.attempts()
    assert len(attempts) == 1, "not retried"
    record = attempts[0]
    assert asked >= 1, "the agent reached the provider"
    assert record["status"] == "infra_failure", (record["error"], record["agent"], result.outlines[-20:])
    assert record["agent"]["timed_out"] is True and record["agent"]["provider_answered"] is False, record["agent"]
    assert record["error"]["message"].startswith("provider never answered: no answer x"), record["error"]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_looping_opencode_acp_reports_its_cost_only_when_its_turn_ends(
    cohort: Cohort,
    agent_cache,
    secret_env: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    executor: str,
) -> None:  # type: ignore[no-untyped-def]
    """opencode 1.18.33 sends its one ``usage_update`` (the session's cost by its price table) after a prompt
    ends: no budget can act mid-turn (docs/agents.md). The documented outcome: its timeout cancels the turn,
    the cost it then reports is kept, and the budget it crossed is named."""
    limit = 0.01
    with provider(executor, LOOP, request, tmp_path) as model:
        cohort.task("t", agent_timeout=45)  # opencode takes up to ~20 s to start in Docker on a loaded host
        subject = opencode_acp(agent_cache, model.url)
        result = run(cohort, model, subject, retries={"infra": 0}, budgets={"max_cost_usd": limit, "max_tokens": LIMIT})
        turns = model.messages()
    record = cohort.results()["t[acp-r0]"]
    assert turns > limit // COST_PER_REPLY + 2, turns  # past the limit: nothing metered it while it ran
    assert record["status"] == "agent_incomplete", (record["status"], record["error"], result.outlines[-20:])
    assert record["official"] is True
    assert record["agent"]["timed_out"] is True, record["agent"]
    assert record["budget"]["exceeded"] == "max_cost_usd", record["budget"]
    assert record["error"]["message"].endswith("over max_cost_usd by its own report"), record["error"]
    # kept: the session's cost, the replies the agent got (those in flight at the cancel may not count)
    cost = record["usage"]["cost_usd"]
    assert limit < cost <= turns * COST_PER_REPLY + 1e-9, (cost, turns)
    assert record["agent"]["cost"]["source"] == "agent"


@pytest.mark.parametrize("executor", EXECUTORS)
def test_looping_claude_code_acp_reports_no_usage_so_only_its_timeout_stops_it(
    cohort: Cohort,
    agent_cache,
    secret_env: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    executor: str,
) -> None:  # type: ignore[no-untyped-def]
    """claude-code-acp 0.16.2 sends no ``usage_update`` and no usage in its prompt answer: no budget can
    act on it mid-turn (docs/agents.md). The documented outcome: its timeout stops it, no usage is invented."""
    with provider(executor, LOOP, request, tmp_path) as model:
        cohort.task("t", agent_timeout=25)
        subject = claude_acp(agent_cache, model.url)
        result = run(cohort, model, subject, retries={"infra": 0}, budgets={"max_tokens": LIMIT})
        turns = model.messages()
    record = cohort.results()["t[acp-r0]"]
    assert turns > LIMIT // (PER_REPLY_IN + PER_REPLY_OUT) + 1, turns  # past the limit: nothing metered it
    assert record["status"] == "agent_incomplete", (record["status"], record["error"], result.outlines[-20:])
    assert record["agent"]["timed_out"] is True, record["agent"]
    assert "exceeded" not in record["budget"], record["budget"]
    assert record["usage"]["input_tokens"] is None and record["usage"]["cost_usd"] is None, record["usage"]
    assert record["agent"]["provider_answered"] is True, record["agent"]  # it spoke: its tool calls are recorded


def test_the_provider_of_a_url_inside_a_set_env_value_is_the_subjects(tmp_path: Path) -> None:
    """opencode's base URL is inside its JSON config: the proxy's statuses of it count as the provider's."""
    from pytest_maka.core.spec import SubjectSpec
    from pytest_maka.subjects.acp.options import AcpOptions
    from pytest_maka.subjects.acp.subject import AcpSubject

    config = {"provider": {"anthropic": {"options": {"baseURL": "http://model.test:8080/v1"}}}}
    options = AcpOptions.model_validate(
        {
            "command": "opencode acp",
            "set_env": {"OPENCODE_CONFIG_CONTENT": json.dumps(config), "ANTHROPIC_BASE_URL": "http://127.0.0.1:4000"},
        }
    )
    subject = AcpSubject(SubjectSpec("s", "acp", options, tmp_path / "cohort.yaml", "0" * 64))
    assert subject.egress() == ["model.test:8080", "127.0.0.1:4000"]
