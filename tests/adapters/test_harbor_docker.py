"""Harbor-layout sample tasks on the real Docker engine: rewards, .harborignore, per-phase network."""

from __future__ import annotations

import pytest

from tests.adapters.conftest import copy_sample, docker_executor
from tests.conftest import Cohort

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_engine")]


def test_samples_network_record_and_ignored_files(cohort: Cohort) -> None:
    root = copy_sample("harbor", cohort.root / "h")
    # The verifier of fix-script fails if anything .harborignore names reached /tests.
    test_sh = root / "fix-script" / "tests" / "test.sh"
    test_sh.write_text(test_sh.read_text().replace("echo $ok", "[ ! -e /tests/NOTES.md ] || ok=0\necho $ok"))
    # greetings declares no network mode: Harbor's default (public) for both phases.
    toml = root / "greetings" / "task.toml"
    toml.write_text(toml.read_text().replace('network_mode = "no-network"\n', ""))
    test = root / "greetings" / "tests" / "test.sh"
    test.write_text(test.read_text() + "echo routes=$(wc -l < /proc/net/route)\n")  # 1 = the header only
    cohort.write(
        tasks=[{"path": "h"}],
        executor=docker_executor(cohort.root),
        policy={"verifier_network": True},
    )
    result = cohort.run()
    assert result.ret == 0, result.stdout.str()
    results = cohort.results()
    assert {k: r["status"] for k, r in results.items()} == {
        "fix-script[oracle-r0]": "agent_success",
        "fix-script[nop-r0]": "agent_failure",
        "greetings[oracle-r0]": "agent_success",
        "greetings[nop-r0]": "agent_failure",
        "sum-csv[oracle-r0]": "agent_success",
        "sum-csv[nop-r0]": "agent_failure",
    }
    greet = results["greetings[oracle-r0]"]
    assert greet["verifier"]["rewards"] == {"reward": 1.0, "lines_right": 1.0}
    assert results["greetings[nop-r0]"]["verifier"]["rewards"] == {"reward": 0.0, "lines_right": 0.0}
    # The spec grants the verifier a network (and the agent none); the record says what each phase had.
    assert greet["network"]["agent"] == {"declared": "public", "granted": "none"}
    assert greet["network"]["verifier"] == {"declared": "public", "granted": "bridge"}
    out = (cohort.out / greet["artifacts"]["verifier_output"]).read_text()
    assert "routes=" in out and out.split("routes=")[1].strip() != "1", "the verifier had a network route"
    assert results["sum-csv[oracle-r0]"]["network"]["verifier"] == {"declared": "none", "granted": "bridge"}
