"""Authority rules and isolation: nothing the subject does can make a cell pass but the verifier."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pytest_maka.testing.servers import tcp_server

from ..conftest import Cohort, needs_bwrap

pytestmark = [pytest.mark.sandbox, needs_bwrap]

#: A verifier that fails unless /app/done.txt exists; the subjects below never create it.
STRICT = "mkdir -p /logs/verifier; if [ -f /app/done.txt ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"


def command(name: str, cmd: str, **extra: object) -> dict[str, object]:
    return {"name": name, "kind": "command", "command": cmd, **extra}


TAMPERERS = {
    "reward-file": (
        "mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt;"
        " echo '{\"reward\": 1}' > /logs/verifier/reward.json"
    ),
    "planted-tests": "mkdir -p /tests && printf 'echo 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh; echo planted",
    "daemon-rewriting-reward": (
        'setsid sh -c \'trap "" TERM; while true; do mkdir -p /logs/verifier; '
        "echo 1 > /logs/verifier/reward.txt; sleep 0.05; done' >/dev/null 2>&1 & sleep 0.3"
    ),
    "fake-output": "echo 'PASSED all tests'; echo 'reward=1'; echo '1 passed in 0.01s'",
    "reward-symlink": "mkdir -p /logs/verifier; ln -sf /proc/self/environ /logs/verifier/reward.txt",
}


@pytest.mark.parametrize("name", sorted(TAMPERERS))
def test_tampering_never_passes(cohort: Cohort, name: str) -> None:
    cohort.task("guarded", test=STRICT)
    cohort.write(subjects=[command(name, TAMPERERS[name])])
    cohort.run().assert_outcomes(failed=1)
    record = cohort.results()[f"guarded[{name}-r0]"]
    assert record["status"] == "agent_failure", record["error"]
    assert record["passed"] is False and record["score"] == 0.0


def test_tests_are_hidden_from_the_subject_and_fresh_for_the_verifier(cohort: Cohort) -> None:
    verifier = (
        "mkdir -p /logs/verifier; if grep -q ORIGINAL /tests/marker.txt; then echo 1; else echo 0; fi"
        " > /logs/verifier/reward.txt\n"
    )
    task = cohort.task("hidden", test=verifier)
    (task / "tests" / "marker.txt").write_text("ORIGINAL\n")
    probe = "ls /tests > $MAKA_LOGS_DIR/saw.txt 2>&1; ls /solution >> $MAKA_LOGS_DIR/saw.txt 2>&1; true"
    cohort.write(subjects=[command("probe", probe)])
    cohort.run().assert_outcomes(passed=1)
    record = cohort.results()["hidden[probe-r0]"]
    saw = (cohort.out / record["artifacts"]["agent_logs"] / "saw.txt").read_text()
    assert "marker.txt" not in saw and "test.sh" not in saw
    assert "No such file" in saw, "neither /tests nor /solution exists for a command subject"


def test_host_secret_is_invisible_and_passed_secrets_are_redacted(
    cohort: Cohort, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MAKA_HOST_SECRET", "host-secret-value-123")
    monkeypatch.setenv("MAKA_GIVEN_KEY", "given-key-value-456")
    cohort.task("t")
    dump = (
        "env > $MAKA_LOGS_DIR/env.txt; env; cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'; echo done > /app/done.txt"
    )
    cohort.write(subjects=[command("env-dumper", dump, env=["MAKA_GIVEN_KEY"])])
    cohort.run().assert_outcomes(passed=1)
    record = cohort.results()["t[env-dumper-r0]"]
    env_seen = (cohort.out / record["artifacts"]["agent_logs"] / "env.txt").read_text()
    stdout = (cohort.out / record["artifacts"]["agent_log"]).read_text()
    assert "MAKA_HOST_SECRET" not in env_seen + stdout, "host variables must not reach the subject"
    assert "MAKA_GIVEN_KEY=[REDACTED]" in env_seen, "a listed variable is passed, and its value never stored"
    everything = b"".join(p.read_bytes() for p in cohort.out.rglob("*") if p.is_file())
    assert b"given-key-value-456" not in everything and b"host-secret-value-123" not in everything
    assert record["agent"]["env_passed"] == ["MAKA_GIVEN_KEY"]


@pytest.fixture
def host_server() -> Iterator[tuple[int, list[bytes]]]:
    """A real TCP server on the host's 127.0.0.1 recording what every client sends."""
    with tcp_server() as server:
        yield server.port, server.received


def test_network_attempt_from_sandbox_is_blocked(cohort: Cohort, host_server: tuple[int, list[bytes]]) -> None:
    port, seen = host_server
    cohort.task("t")
    probe = (
        f"python3 -c \"import socket; s=socket.create_connection(('127.0.0.1', {port}), timeout=2); s.send(b'leak')\""
        " > $MAKA_LOGS_DIR/net.txt 2>&1; echo exit=$? >> $MAKA_LOGS_DIR/net.txt"
    )
    cohort.write(subjects=[command("caller", probe)])
    cohort.run().assert_outcomes(failed=1)
    record = cohort.results()["t[caller-r0]"]
    net = (cohort.out / record["artifacts"]["agent_logs"] / "net.txt").read_text()
    assert "exit=1" in net and "refused" in net.lower()
    assert seen == [], "nothing may reach the host from a sandbox without network"
    assert record["isolation"]["network"]["agent"] == "none"


def test_agent_network_policy_lets_the_subject_reach_the_host(
    cohort: Cohort, host_server: tuple[int, list[bytes]]
) -> None:
    port, seen = host_server
    cohort.task("t")
    probe = (
        f"python3 -c \"import socket; s=socket.create_connection(('127.0.0.1', {port}), timeout=2); s.send(b'hello')\""
    )
    cohort.write(subjects=[command("caller", probe)], policy={"agent_network": True})
    cohort.run().assert_outcomes(failed=1)
    assert seen == [b"hello"]
    assert cohort.results()["t[caller-r0]"]["isolation"]["network"]["agent"] == "host"


def test_workspace_is_fresh_per_cell_and_diff_recorded(cohort: Cohort) -> None:
    cohort.task("t", workspace={"notes.txt": "one\n"})
    cmd = "cat notes.txt >> $MAKA_LOGS_DIR/seen.txt; echo two >> notes.txt; echo x > new.txt"
    cohort.write(subjects=[command("editor", cmd)], repetitions=2)
    cohort.run().assert_outcomes(failed=2)
    for rep in (0, 1):
        record = cohort.results()[f"t[editor-r{rep}]"]
        assert (cohort.out / record["artifacts"]["agent_logs"] / "seen.txt").read_text() == "one\n"
        diff = (cohort.out / record["artifacts"]["diff"]).read_text()
        assert "+two" in diff and "b/new.txt" in diff
        assert record["agent"]["workspace_changes"] == {"added": 1, "modified": 1, "deleted": 0}


def test_output_is_capped(cohort: Cohort) -> None:
    cohort.task("t")
    cohort.write(subjects=[command("chatty", "yes 0123456789 | head -c 5000000")], budgets={"max_output_bytes": 4096})
    cohort.run().assert_outcomes(failed=1)
    record = cohort.results()["t[chatty-r0]"]
    assert record["agent"]["output_truncated"] is True
    assert (cohort.out / record["artifacts"]["agent_log"]).stat().st_size <= 4096


def test_claim_is_recorded_beside_the_verdict_and_never_changes_it(cohort: Cohort) -> None:
    cohort.task("t")
    claim = 'echo \'{"status": "complete", "message": "all tests pass"}\' > $MAKA_LOGS_DIR/claim.json'
    cohort.write(subjects=[command("boaster", claim)])
    cohort.run().assert_outcomes(failed=1)
    record = cohort.results()["t[boaster-r0]"]
    assert record["subject_claim"] == {"status": "complete", "message": "all tests pass"}
    assert record["status"] == "agent_failure"


def test_task_without_network_keeps_it_off_even_when_policy_allows(
    cohort: Cohort, host_server: tuple[int, list[bytes]]
) -> None:
    port, seen = host_server
    cohort.task("offline", extra_toml='network_mode = "no-network"\n')
    probe = f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)\""
    cohort.write(subjects=[command("caller", probe)], policy={"agent_network": True})
    cohort.run().assert_outcomes(failed=1)
    assert seen == []
    assert cohort.results()["offline[caller-r0]"]["isolation"]["network"]["agent"] == "none"
