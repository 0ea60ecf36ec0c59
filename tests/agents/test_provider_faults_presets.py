"""Provider failures against the other real agent CLIs on the local executor (claude-code and codex:
test_provider_faults.py): each preset's reader turns what its CLI printed into the record's evidence,
and the egress proxy adds the statuses of the answers it read: the model server on the host's
loopback is reached through a ``TUNNEL`` that reads them, so every failed request is counted,
even those a CLI retries without a word (opencode, pi, mini-swe-agent) or reports with no status
(aider's 401). aider makes one model request per task here, so an every-other-request 429 never
reaches it (docs/agents.md).
"""

from __future__ import annotations

import pytest

from pytest_maka.testing.model_faults import Fault
from pytest_maka.testing.model_server import Action, Script, model_server
from tests.conftest import Cohort, needs_bwrap

from .conftest import installed

pytestmark = [pytest.mark.sandbox, pytest.mark.agent, needs_bwrap]

WRITE = [Action.write("/app/done.txt", "ok\n")]
KEYS = {"gemini-cli": "GEMINI_API_KEY", "opencode": "ANTHROPIC_API_KEY", "pi": "ANTHROPIC_API_KEY"}
#: The presets that make a second model request (aider: see the module's docstring).
REPORTING = ["gemini-cli", "opencode", "pi", "qwen-code", "mini-swe-agent"]


def _subject(kind: str, url: str, cache: str) -> dict[str, object]:
    key = KEYS.get(kind, "OPENAI_API_KEY")
    return {"name": "agent", "kind": kind, "base_url": url, "env": [key], "cache_dir": cache}


@pytest.mark.parametrize("kind", [*REPORTING, "aider"])
def test_every_request_rejected_is_infra_failure_not_retried_and_stops_the_subject(
    cohort: Cohort, agent_cache, secret_env: str, kind: str
) -> None:  # type: ignore[no-untyped-def]
    installed(agent_cache, kind)
    with model_server(Script(actions=WRITE, fault=Fault("401"))) as server:
        cohort.task("a", agent_timeout=60)
        cohort.task("b", agent_timeout=60)
        cohort.write(subjects=[_subject(kind, server.url, str(agent_cache.root))], retries={"infra": 2})
        result = cohort.run()
        refused = len([r for r in server.seen() if r.method == "POST" and r.wire and "count_tokens" not in r.path])
    attempts = cohort.attempts()
    assert [a["cell_id"] for a in attempts] == ["a[agent-r0]", "b[agent-r0]"], "no retry, one attempt per cell"
    first, second = attempts
    assert first["status"] == "infra_failure", (first["error"], first["agent"], result.outlines[-20:])
    agent = first["agent"]
    assert agent["provider_answered"] is False, agent
    assert 1 <= agent["provider_errors"]["401"] <= refused, (agent, refused)
    assert set(agent["provider_errors"]) == {"401"}, agent
    message = first["error"]["message"]
    assert message.startswith("provider refused every request: 401 x") and first["error"]["retryable"] is False
    assert second["status"] == "infra_failure" and second["error"]["retryable"] is False
    assert second["error"]["message"].startswith("not run: provider refused every request: 401 x")
    assert second["agent"]["not_started"] == second["error"]["message"]


@pytest.mark.parametrize("kind", REPORTING)
def test_an_intermittent_429_is_official(cohort: Cohort, agent_cache, secret_env: str, kind: str) -> None:  # type: ignore[no-untyped-def]
    installed(agent_cache, kind)
    with model_server(Script(actions=WRITE, final_text="Done.", fault=Fault("429", every=2))) as server:
        cohort.task("t", agent_timeout=120)
        cohort.write(subjects=[_subject(kind, server.url, str(agent_cache.root))], retries={"infra": 0})
        result = cohort.run()
        limited = [r for r in server.seen() if r.method == "POST" and r.wire and "count_tokens" not in r.path][1::2]
    record = cohort.results()["t[agent-r0]"]
    assert limited, "the server refused at least one request with 429"
    assert record["status"] == "agent_success" and record["official"] is True, (record["error"], result.outlines[-20:])
    agent = record["agent"]
    assert agent["provider_answered"] is True and "provider_unusable" not in agent, agent
    # gemini-cli reports its retries; the others retry in silence, but the proxy read each 429
    assert agent.get("provider_errors") == {"429": len(limited)}, (agent, len(limited))


@pytest.mark.parametrize(
    ("kind", "status"),
    [
        ("pi", "429"),
        ("gemini-cli", "429"),
        ("aider", "500"),
        ("mini-swe-agent", "429"),
        ("opencode", "429"),
        ("qwen-code", "429"),
    ],
)
def test_every_request_failing_is_infra_failure_even_when_killed_retrying(
    cohort: Cohort, agent_cache, secret_env: str, kind: str, status: str
) -> None:  # type: ignore[no-untyped-def]
    """A 429 or 5xx on every request: most CLIs back off for minutes; the failures they printed
    before the timeout are the evidence (aider and mini-swe-agent: litellm's exception names).
    opencode gives up within the timeout and reports only its last attempt (a lower bound)."""
    installed(agent_cache, kind)
    with model_server(Script(actions=WRITE, fault=Fault(status))) as server:
        cohort.task("t", agent_timeout=45)
        cohort.write(subjects=[_subject(kind, server.url, str(agent_cache.root))], retries={"infra": 1})
        result = cohort.run()
        failed = len([r for r in server.seen() if r.method == "POST" and r.wire and "count_tokens" not in r.path])
    attempts = cohort.attempts()
    assert len(attempts) == 1, "not retried"
    record = attempts[0]
    assert record["status"] == "infra_failure", (record["error"], record["agent"], result.outlines[-20:])
    errors = record["agent"]["provider_errors"]
    assert set(errors) == {status} and (1 if kind == "opencode" else 2) <= errors[status] <= failed, (errors, failed)
    assert record["error"]["message"].startswith(f"provider failed every request: {status} x"), record["error"]


def test_qwen_code_when_the_provider_hangs_is_infra_failure(cohort: Cohort, agent_cache, secret_env: str) -> None:  # type: ignore[no-untyped-def]
    """qwen-code tunnels plain HTTP through CONNECT: the proxy's own "200 Connection established" is
    not an answer from the provider, so a provider that never answers is seen as such."""
    installed(agent_cache, "qwen-code")
    with model_server(Script(actions=WRITE, fault=Fault("hang"))) as server:
        cohort.task("t", agent_timeout=15)
        cohort.write(subjects=[_subject("qwen-code", server.url, str(agent_cache.root))], retries={"infra": 1})
        result = cohort.run()
    attempts = cohort.attempts()
    assert len(attempts) == 1, "not retried"
    record = attempts[0]
    assert record["status"] == "infra_failure", (record["error"], record["agent"], result.outlines[-20:])
    assert record["agent"]["provider_answered"] is False, record["agent"]
    assert record["error"]["message"].startswith("provider never answered: no answer x"), record["error"]
