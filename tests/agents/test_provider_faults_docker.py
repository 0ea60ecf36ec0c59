"""A provider that rejects every request, on the Docker executor: the agent's stderr (captured from
its container) carries the evidence, and the record says whose fault the result is."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_maka.testing.model_faults import Fault
from pytest_maka.testing.model_server import Action, Script
from tests.conftest import Cohort

from .conftest import docker_model_server, installed

pytestmark = [pytest.mark.docker, pytest.mark.agent]


def test_mini_swe_agent_in_docker_with_every_request_rejected_is_infra_failure(
    cohort: Cohort, agent_cache: Any, secret_env: str, docker_api: Any, tmp_path: Any
) -> None:
    """mini-swe-agent reports the status only in the traceback on its stderr (docs/agents.md)."""
    installed(agent_cache, "mini-swe-agent")
    script = Script(actions=[Action.write("/app/done.txt", "ok\n")], fault=Fault("401"))
    with docker_model_server(docker_api, script, tmp_path) as model:
        cohort.task("a", agent_timeout=120)
        cohort.task("b", agent_timeout=120)
        subject = {
            "name": "mini",
            "kind": "mini-swe-agent",
            "base_url": model.url,
            "env": ["OPENAI_API_KEY"],
            "cache_dir": str(agent_cache.root),
        }
        executor = model.executor(agent_install="mount")
        cohort.write(subjects=[subject], executor=executor, retries={"infra": 2})
        result = cohort.run()
        refused = [r for r in model.requests() if r.get("method") == "POST" and r.get("wire")]
    attempts = cohort.attempts()
    assert [a["cell_id"] for a in attempts] == ["a[mini-r0]", "b[mini-r0]"], "no retry, one attempt per cell"
    first, second = attempts
    assert first["status"] == "infra_failure", (first["error"], first["agent"], result.outlines[-20:])
    assert first["agent"]["provider_errors"] == {"401": 1} and len(refused) >= 1, (first["agent"], refused)
    assert first["error"]["message"] == "provider refused every request: 401 x1 (authentication rejected)"
    assert second["error"]["message"].startswith("not run: provider refused every request: 401 x1")
