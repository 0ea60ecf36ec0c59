"""A subject that cannot start is infra_failure naming what is missing; if none of its cells start, the run stops."""

from __future__ import annotations

import pytest

from tests.conftest import Cohort, needs_bwrap

pytestmark = [pytest.mark.sandbox, needs_bwrap]


def _command(name: str, command: str) -> dict[str, object]:
    return {"name": name, "kind": "command", "command": command}


def test_missing_binary_is_infra_failure_naming_it(cohort: Cohort) -> None:
    cohort.task("t")
    cohort.write(subjects=[_command("ghost", "no-such-agent-cli --go")], retries={"infra": 0})
    cohort.run().assert_outcomes(errors=1)
    record = cohort.results()["t[ghost-r0]"]
    assert record["status"] == "infra_failure" and record["official"] is False
    assert "no-such-agent-cli was not found in the sandbox" in record["error"]["message"]


def test_not_executable_is_infra_failure(cohort: Cohort) -> None:
    cohort.task("t", workspace={"agent.sh": "#!/bin/sh\necho hi\n"})
    cohort.write(subjects=[_command("noexec", "./agent.sh")], retries={"infra": 0})
    cohort.run().assert_outcomes(errors=1)
    assert "./agent.sh is not executable" in cohort.results()["t[noexec-r0]"]["error"]["message"]


def test_an_agent_that_exits_127_itself_is_the_agents_failure(cohort: Cohort) -> None:
    """Only the program named first counts: a missing tool inside the agent's script is the agent's problem."""
    cohort.task("t")
    cohort.write(subjects=[_command("broken", "sh -c 'missing-tool; exit 127'")])
    cohort.run().assert_outcomes(failed=1)
    assert cohort.results()["t[broken-r0]"]["status"] == "agent_incomplete"


def test_a_subject_that_never_starts_stops_the_run_with_one_line(cohort: Cohort) -> None:
    for name in ("a", "b", "c", "d"):
        cohort.task(name)
    cohort.write(subjects=[_command("ghost", "no-such-agent-cli")], retries={"infra": 0})
    result = cohort.run()
    stopped = [line for line in result.outlines if "could not start in any of its first" in line]
    assert len(stopped) == 1, result.outlines
    assert "'ghost'" in stopped[0] and "no-such-agent-cli was not found" in stopped[0]
    assert len(cohort.attempts()) == 2, "the run stopped after the first two cells"


def test_a_claim_that_disagrees_with_the_verdict_is_flagged_not_believed(cohort: Cohort) -> None:
    cohort.task("t")
    boast = 'echo \'{"status": "complete"}\' > $MAKA_LOGS_DIR/claim.json'
    honest = 'echo \'{"status": "failed"}\' > $MAKA_LOGS_DIR/claim.json'
    cohort.write(subjects=[_command("boaster", boast), _command("honest", honest)])
    cohort.run().assert_outcomes(failed=2)
    results = cohort.results()
    assert results["t[boaster-r0]"]["status"] == "agent_failure"
    assert results["t[boaster-r0]"]["agent"]["claim_agrees_with_verdict"] is False
    assert results["t[honest-r0]"]["agent"]["claim_agrees_with_verdict"] is True
    assert '"claim_disagrees_with_verdict":true' in (cohort.out / "report.html").read_text().replace(" ", "")


@pytest.mark.needs("npm")
def test_installing_a_version_the_registry_lacks_is_not_retried_and_quotes_the_registry(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Past the load-time check (a cache shared by a run that pinned it later): the install's error is
    the registry's answer, marked not retryable (another attempt would fail the same way)."""
    from pytest_maka.subjects.install.cache import AgentCache, InstallError
    from pytest_maka.subjects.presets import PRESETS

    claude = next(p for p in PRESETS if p.kind == "claude-code")
    cache = AgentCache(tmp_path / "cache")
    with pytest.raises(InstallError) as info:
        cache.ensure(claude.install_spec("0.0.999"))
    assert info.value.retryable is False
    assert "installing @anthropic-ai/claude-code@0.0.999: " in str(info.value)
    assert "No match" in str(info.value) or "No matching version" in str(info.value)
    assert not cache.installed(claude.install_spec("0.0.999"))
