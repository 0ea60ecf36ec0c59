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


def test_a_granted_network_whose_host_does_not_resolve_is_named_in_the_record(cohort: Cohort) -> None:
    """With ``verifier_network: true`` the verifier had a network, but its download host does not
    resolve. The evidence is read granted network or not and recorded with the reward the script
    wrote; the attempt stays official (a verifier in a shared environment runs code the subject
    left, which can print the same words: issue 22, DESIGN.md section 3), and its error says why."""
    cohort.task("downloads", test=DOWNLOADS)
    offline = cohort.task("offline", test=DOWNLOADS)
    toml = offline / "task.toml"
    toml.write_text(toml.read_text().replace("[verifier]\n", '[verifier]\nnetwork_mode = "no-network"\n'))
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}], policy={"verifier_network": True})
    cohort.run()
    results = cohort.results()
    record = results["downloads[oracle-r0]"]
    assert record["network"]["verifier"]["granted"] != "none", record["network"]
    assert record["status"] == "agent_failure" and record["official"] is True, record["status"]
    message = record["verifier"]["error"]
    assert message.startswith("the verifier's network failed it (declared public, granted): "), message
    assert "Could not resolve host: astral.sh.invalid" in record["verifier"]["network_failure"]
    assert record["verifier"]["reward_written"] == 0.0
    assert results["offline[oracle-r0]"]["status"] == "agent_failure", "the task said its verifier needs no network"
    assert "network_failure" not in results["offline[oracle-r0]"]["verifier"], "no network was declared"
