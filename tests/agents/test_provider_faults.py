"""Provider failures against real agent CLIs on the local executor: the stand-in model server rejects
keys, rate-limits or hangs, and the record says whose fault the result is.

Evidence tests here: claude-code (``api_retry`` events) and codex (``unexpected status`` errors).
"""

from __future__ import annotations

import pytest

from pytest_maka.testing.model_faults import Fault
from pytest_maka.testing.model_server import Action, Script, model_server
from tests.conftest import Cohort, needs_bwrap

from .conftest import installed

pytestmark = [pytest.mark.sandbox, pytest.mark.agent, needs_bwrap]

WRITE = [Action.write("/app/done.txt", "ok\n")]


def _subject(kind: str, url: str, cache: str) -> dict[str, object]:
    key = "ANTHROPIC_API_KEY" if kind == "claude-code" else "OPENAI_API_KEY"
    return {"name": "agent", "kind": kind, "base_url": url, "env": [key], "cache_dir": cache}


def test_claude_code_with_every_request_rejected_is_infra_failure_and_stops_the_subject(
    cohort: Cohort, agent_cache, secret_env: str
) -> None:  # type: ignore[no-untyped-def]
    installed(agent_cache, "claude-code")
    with model_server(Script(actions=WRITE, fault=Fault("401"))) as server:
        cohort.task("a", agent_timeout=12)
        cohort.task("b", agent_timeout=12)
        subject = _subject("claude-code", server.url, str(agent_cache.root))
        cohort.write(subjects=[subject], retries={"infra": 2})
        result = cohort.run()
        seen = len(server.seen("anthropic"))
    attempts = cohort.attempts()
    assert [a["cell_id"] for a in attempts] == ["a[agent-r0]", "b[agent-r0]"], "no retry, one attempt per cell"
    first, second = attempts
    assert first["status"] == "infra_failure", (first["error"], result.outlines[-20:])
    agent = first["agent"]
    assert agent["provider_answered"] is False and agent["provider_errors"]["401"] >= 2, agent
    assert agent["provider_errors"]["401"] <= seen  # each one a request the server refused
    message = first["error"]["message"]
    assert message.startswith("provider refused every request: 401 x") and first["error"]["retryable"] is False
    assert second["status"] == "infra_failure" and second["error"]["retryable"] is False
    assert second["error"]["message"].startswith("not run: provider refused every request: 401 x")
    assert "in cell a[agent-r0], attempt 1" in second["error"]["message"]
    assert second["agent"]["not_started"] == second["error"]["message"]


def test_claude_code_through_an_intermittent_429_is_official_and_counted(
    cohort: Cohort, agent_cache, secret_env: str
) -> None:  # type: ignore[no-untyped-def]
    installed(agent_cache, "claude-code")
    with model_server(Script(actions=WRITE, final_text="Done.", fault=Fault("429", every=2))) as server:
        cohort.task("t", agent_timeout=120)
        cohort.write(subjects=[_subject("claude-code", server.url, str(agent_cache.root))], retries={"infra": 0})
        result = cohort.run()
    record = cohort.results()["t[agent-r0]"]
    assert record["status"] == "agent_success", (record["error"], result.outlines[-20:])
    agent = record["agent"]
    assert agent["provider_answered"] is True and agent["provider_errors"] == {"429": 1}, agent
    assert "provider_unusable" not in agent


def test_codex_with_every_request_rejected_is_infra_failure(cohort: Cohort, agent_cache, secret_env: str) -> None:  # type: ignore[no-untyped-def]
    installed(agent_cache, "codex")
    with model_server(Script(actions=WRITE, fault=Fault("401"))) as server:
        cohort.task("t", agent_timeout=120)
        cohort.write(subjects=[_subject("codex", server.url, str(agent_cache.root))], retries={"infra": 2})
        result = cohort.run()
        seen = len(server.seen("openai-responses"))
    attempts = cohort.attempts()
    assert len(attempts) == 1, "not retried"
    record = attempts[0]
    assert record["status"] == "infra_failure", (record["error"], result.outlines[-20:])
    assert record["agent"]["provider_errors"] == {"401": seen}, (record["agent"], seen)
    assert record["error"]["message"] == f"provider refused every request: 401 x{seen} (authentication rejected)"


def test_codex_when_the_provider_hangs_up_is_infra_failure(cohort: Cohort, agent_cache, secret_env: str) -> None:  # type: ignore[no-untyped-def]
    installed(agent_cache, "codex")
    with model_server(Script(actions=WRITE, fault=Fault("no-answer"))) as server:
        cohort.task("t", agent_timeout=120)
        cohort.write(subjects=[_subject("codex", server.url, str(agent_cache.root))], retries={"infra": 0})
        result = cohort.run()
    record = cohort.results()["t[agent-r0]"]
    assert record["status"] == "infra_failure", (record["error"], result.outlines[-20:])
    assert record["error"]["message"].startswith("provider never answered: no answer x"), record["error"]


def test_claude_code_when_the_provider_hangs_is_infra_failure(cohort: Cohort, agent_cache, secret_env: str) -> None:  # type: ignore[no-untyped-def]
    installed(agent_cache, "claude-code")
    with model_server(Script(actions=WRITE, fault=Fault("hang"))) as server:
        cohort.task("t", agent_timeout=10)
        cohort.write(subjects=[_subject("claude-code", server.url, str(agent_cache.root))], retries={"infra": 1})
        result = cohort.run()
    attempts = cohort.attempts()
    assert len(attempts) == 1, "not retried"
    record = attempts[0]
    assert record["status"] == "infra_failure", (record["error"], result.outlines[-20:])
    assert record["agent"]["timed_out"] is True and record["agent"]["provider_answered"] is False
    assert record["error"]["message"].startswith("provider never answered: no answer x"), record["error"]
    proxy = record["isolation"]["network"]["phases"]["agent"]["connections"]
    assert proxy["allowed"] >= 1, proxy  # the request went out through the egress proxy, nothing came back


@pytest.mark.parametrize(
    ("kind", "refused"),
    [("claude-code", "error: unknown option '--maka-no-such-flag'"), ("codex", "error: unexpected argument")],
)
def test_a_cli_that_rejects_its_flags_is_a_setup_error(
    cohort: Cohort, agent_cache, secret_env: str, kind: str, refused: str
) -> None:  # type: ignore[no-untyped-def]
    """As a CLI version without one of the preset's flags would: here ``args:`` adds one it does not take."""
    installed(agent_cache, kind)
    with model_server(Script(actions=WRITE)) as server:
        cohort.task("t", agent_timeout=60)
        subject = {**_subject(kind, server.url, str(agent_cache.root)), "args": ["--maka-no-such-flag"]}
        cohort.write(subjects=[subject], retries={"infra": 2})
        result = cohort.run()
        assert not server.tool_requests(), "it never reached the model"
    attempts = cohort.attempts()
    assert len(attempts) == 1, "not retried: it would fail the same way"
    record = attempts[0]
    assert record["status"] == "infra_failure", (record["error"], result.outlines[-20:])
    message = record["error"]["message"]
    assert message.startswith(f"the subject could not start: setup error: {kind} "), message
    assert refused in message and record["error"]["retryable"] is False
    assert record["agent"]["started"] is False
