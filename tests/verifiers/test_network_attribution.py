"""Whose fault a verifier's failed download is: read the network evidence granted network or not."""

from __future__ import annotations

import pytest

from ..conftest import Cohort, needs_bwrap

pytestmark = [pytest.mark.sandbox, needs_bwrap]

#: Harbor's own shared-mode template test.sh: it downloads uv, and writes 0 when that fails.
DOWNLOADS = (
    "mkdir -p /logs/verifier\n"
    "curl -LsSf https://astral.sh.invalid/uv/0.9.7/install.sh | sh\n"
    "if command -v uvx >/dev/null; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
)


def test_a_granted_network_whose_host_does_not_resolve_is_no_verdict_named(cohort: Cohort) -> None:
    """With ``verifier_network: true`` the verifier had a network, but its download host does not
    resolve. The harness confirms it on its own side (the host is named by the task's own test.sh
    and does not resolve from the harness either): no verdict, infra_failure, named, not retried,
    and the task is not flagged "broken: oracle fails". The reward the script wrote is kept."""
    cohort.task("downloads", test=DOWNLOADS)
    offline = cohort.task("offline", test=DOWNLOADS)
    toml = offline / "task.toml"
    toml.write_text(toml.read_text().replace("[verifier]\n", '[verifier]\nnetwork_mode = "no-network"\n'))
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}], policy={"verifier_network": True})
    cohort.run()
    results = cohort.results()
    record = results["downloads[oracle-r0]"]
    assert record["network"]["verifier"]["granted"] != "none", record["network"]
    assert record["status"] == "infra_failure" and record["official"] is False, record["status"]
    assert record["attempt_count"] == 1, "the same host fails the same way: not retried"
    message = record["verifier"]["error"]
    assert message.startswith("the verifier's network failed it (declared public, granted): "), message
    assert "confirmed: astral.sh.invalid, named by the verifier's files, does not resolve" in message, message
    assert record["error"]["message"].startswith("no verdict: the verifier's network failed it"), record["error"]
    assert "Could not resolve host: astral.sh.invalid" in record["verifier"]["network_failure"]
    assert record["verifier"]["reward_written"] == 0.0
    assert results["offline[oracle-r0]"]["status"] == "agent_failure", "the task said its verifier needs no network"
    assert "network_failure" not in results["offline[oracle-r0]"]["verifier"], "no network was declared"
    summary = (cohort.out / "summary.md").read_text()
    assert "broken: oracle fails" in summary and summary.count("broken: oracle fails") == 1, "offline only"


def test_a_host_the_verifier_does_not_name_is_no_confirmation(cohort: Cohort) -> None:
    """A line naming a host the task's verifier files never mention is text the subject's code may
    have printed: the rejection stands, official, with the line as a diagnostic."""
    forged = "mkdir -p /logs/verifier; cat /app/out.txt; echo 0 > /logs/verifier/reward.txt\n"
    cohort.task("forged", test=forged)
    plant = "echo 'curl: (6) Could not resolve host: elsewhere.invalid' > /app/out.txt"
    cohort.write(subjects=[{"name": "s", "kind": "command", "command": plant}], policy={"verifier_network": True})
    cohort.run()
    record = cohort.results()["forged[s-r0]"]
    assert record["status"] == "agent_failure" and record["official"] is True, record["status"]
    assert "Could not resolve host: elsewhere.invalid" in record["verifier"]["network_failure"]
    assert "network_confirmed" not in record["verifier"]
