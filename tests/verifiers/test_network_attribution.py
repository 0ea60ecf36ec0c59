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


def test_a_granted_network_whose_host_does_not_resolve_is_no_verdict_on_the_subject(cohort: Cohort) -> None:
    """With ``verifier_network: true`` the verifier had a network, but its download host does not
    resolve: the 0 it writes was the oracle's agent_failure and the task "broken: oracle fails".
    It is no verdict, with the evidence; a task that declares no verifier network keeps its 0."""
    cohort.task("downloads", test=DOWNLOADS)
    offline = cohort.task("offline", test=DOWNLOADS)
    toml = offline / "task.toml"
    toml.write_text(toml.read_text().replace("[verifier]\n", '[verifier]\nnetwork_mode = "no-network"\n'))
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}], policy={"verifier_network": True})
    cohort.run()
    results = cohort.results()
    record = results["downloads[oracle-r0]"]
    assert record["network"]["verifier"]["granted"] != "none", record["network"]
    assert record["status"] == "verifier_failure" and record["official"] is False, record["status"]
    message = record["error"]["message"]
    assert message.startswith("the verifier's network failed it (declared public, granted): "), message
    assert "Could not resolve host: astral.sh.invalid" in record["verifier"]["network_failure"]
    assert record["verifier"]["reward_written"] == 0.0
    assert results["offline[oracle-r0]"]["status"] == "agent_failure", "the task said its verifier needs no network"
    summary = (cohort.out / "summary.md").read_text()
    assert "downloads" not in summary.split("broken: oracle fails", 1)[-1].split("\n", 1)[0], summary
