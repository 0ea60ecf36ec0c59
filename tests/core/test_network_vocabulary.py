"""One network vocabulary (core.network): a task declares, the plan grants, and the verifier's
declared network has one source (``Task.verifier_network``, read as ``Task.verifier_declared``)."""

from __future__ import annotations

from pathlib import Path
from typing import get_args, get_type_hints

import pytest

from pytest_maka.core.errors import TaskError
from pytest_maka.core.network import DECLARED_NETWORKS, NETWORK_MODES, NETWORK_PHASES, NetworkMode, declared_problem
from pytest_maka.core.progress import PROGRESS_PHASES
from pytest_maka.core.spec import Policy
from pytest_maka.core.task import Task
from pytest_maka.egress.plan import NetworkPlan, PhasePlan, build_plan
from pytest_maka.verifiers.base import Verdict, VerifyContext, network_starved


def _task(tmp_path: Path, **kw: object) -> Task:
    return Task(id="t", path=tmp_path, instruction="", digest="", **kw)  # type: ignore[arg-type]


def test_the_vocabulary_names_each_fact_once() -> None:
    assert NETWORK_PHASES == ("setup", "agent", "verifier")
    assert DECLARED_NETWORKS == ("none", "allowlist", "public")
    assert NETWORK_MODES == ("none", "services", "allowlist", "all")
    hints = get_type_hints(PhasePlan)
    assert hints["mode"] is NetworkMode and get_args(NetworkMode) == NETWORK_MODES, "typed, not a bare str"
    assert "verifier" not in PROGRESS_PHASES and "verify" in PROGRESS_PHASES, "progress phases are another list"
    with pytest.raises(ValueError, match="expected one of setup, agent, verifier"):
        NetworkPlan().phase("verify")


def test_the_verifier_declares_the_environment_s_network_unless_it_declares_its_own(tmp_path: Path) -> None:
    public = _task(tmp_path, network="public")
    assert public.verifier_network is None and public.verifier_declared == "public"
    split = _task(tmp_path, network="public", verifier_network="none")
    assert split.verifier_declared == "none"
    plan = build_plan(public, Policy(verifier_network=True))
    assert (plan.verifier.declared, plan.setup.declared, plan.verifier.mode) == ("public", "public", "all")
    assert build_plan(split, Policy(verifier_network=True)).verifier.declared == "none"


def test_the_network_evidence_rule_reads_the_same_declared_network_as_the_plan(tmp_path: Path) -> None:
    """A task declaring public (and nothing apart for its verifier) is judged as the plan records it:
    a failure that shows the network failing it is no verdict, not the subject's failure."""
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    out.write_text("curl: (6) Could not resolve host: pypi.org\n")
    err.write_text("")
    ctx = VerifyContext(
        env={},
        timeout_sec=10,
        stdout_path=out,
        stderr_path=err,
        network=False,
        max_output_bytes=1024,
        attempt_dir=tmp_path,
        scratch_dir=tmp_path,
    )
    failed = Verdict(passed=False, score=0.0)
    starved = network_starved(failed, _task(tmp_path, network="public"), ctx)
    assert starved.passed is None and "declared public, granted none" in (starved.error or "")
    kept = network_starved(failed, _task(tmp_path, network="public", verifier_network="none"), ctx)
    assert kept == failed


@pytest.mark.parametrize(
    ("kw", "key", "message"),
    [
        ({"network": "no-network"}, "network", "expected one of none, allowlist, public (got 'no-network')"),
        ({"verifier_network": "all"}, "verifier_network", "expected one of none, allowlist, public (got 'all')"),
        ({"grading_options": {"network": "public"}}, "grading_options.network", "Task.verifier_network"),
        (
            {"grading_options": {"allowed_hosts": ["pypi.org"]}},
            "grading_options.allowed_hosts",
            "Task.agent_allowed_hosts and Task.verifier_allowed_hosts",
        ),
    ],
)
def test_a_task_with_a_network_outside_the_vocabulary_is_one_line(
    tmp_path: Path, kw: dict[str, object], key: str, message: str
) -> None:
    with pytest.raises(TaskError) as e:
        _task(tmp_path, **kw)
    assert e.value.key == key and message in str(e.value) and "\n" not in str(e.value)


def test_harbor_s_spelling_gets_a_hint() -> None:
    assert declared_problem("public") is None
    assert declared_problem("no-network") == (
        "expected one of none, allowlist, public (got 'no-network') (Harbor's no-network is none)"
    )
