"""End to end: no host file, no secret, no live link in the output; limits end in classified results."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from pytest_maka.executors.local import disk, limits
from pytest_maka.store.redact import MARK

from ..conftest import Cohort, files_below, needs_bwrap

pytestmark = [pytest.mark.sandbox, needs_bwrap]

KEY = "given-key-9b2f71c4e0"
HOST = "host-file-secret-51aa"


def command(name: str, cmd: str, **extra: object) -> dict[str, object]:
    return {"name": name, "kind": "command", "command": cmd, **extra}


LEAKER = """
python3 - <<'EOF'
import base64, json, os
key = os.environ["MAKA_GIVEN_KEY"]
logs = os.environ["MAKA_LOGS_DIR"]
json.dump({"status": "complete", "message": "used " + key}, open(logs + "/claim.json", "w"))
json.dump({"input_tokens": 5, "stop_reason": key}, open(logs + "/usage.json", "w"))
open(logs + "/" + key + ".txt", "w").write("named after the key\\n")
with open(logs + "/encoded.log", "w") as f:
    for prefix in ("", "a", "ab"):
        f.write(base64.b64encode((prefix + key).encode()).decode() + "\\n")
        f.write((prefix + key).encode().hex() + "\\n")
with open(logs + "/big.log", "wb") as f:
    for i in range(20):
        f.write(b"." * (1024 * 1024 - 7) + key.encode())
print("stdout", key)
EOF
echo "stderr $MAKA_GIVEN_KEY" >&2
"""


def test_secrets_and_host_files_never_reach_the_output(
    cohort: Cohort, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MAKA_GIVEN_KEY", KEY)
    host = tmp_path / "host-dir"
    host.mkdir()
    (host / "id_rsa").write_text(HOST)
    linker = (
        f"rm -rf /logs/agent; ln -s {host} /logs/agent; ln -s {host}/id_rsa /app/key; ln -s /etc/shadow /app/shadow;"
        " ln -s ../../../../../../etc/passwd /app/passwd"
    )
    cohort.task("t")
    cohort.write(subjects=[command("leaker", LEAKER, env=["MAKA_GIVEN_KEY"]), command("linker", linker)])
    result = cohort.run_subprocess("-n", "2")
    result.assert_outcomes(failed=2)
    files = files_below(cohort.out)
    forbidden = [KEY.encode(), HOST.encode(), base64.b64encode(KEY.encode()), KEY.encode().hex().encode(), b"root:"]
    for path, data in files.items():
        assert KEY not in str(path), f"a file name holds the secret: {path}"
        for needle in forbidden:
            assert needle not in data, f"{path.relative_to(cohort.out)} holds {needle!r}"
    records = cohort.results()
    leaker, linker_record = records["t[leaker-r0]"], records["t[linker-r0]"]
    assert leaker["subject_claim"] == {"status": "complete", "message": f"used {MARK}"}
    assert leaker["agent"]["stop_reason"] == MARK
    logs = cohort.out / leaker["artifacts"]["agent_logs"]
    assert (logs / f"{MARK}.txt").read_text() == "named after the key\n"
    assert (logs / "big.log").read_bytes().count(MARK.encode()) == 20
    assert f"stdout {MARK}" in (cohort.out / leaker["artifacts"]["agent_log"]).read_text()
    assert (cohort.out / "report.html").is_file()
    # The linker's /logs/agent was a link: it is a plain file holding the link text, and noted.
    agent = cohort.out / linker_record["artifacts"]["dir"] / "agent"
    assert agent.is_file() and agent.read_text() == str(host)
    assert linker_record["agent"]["copied_out"]["agent_logs"]["links_as_files"] == [f"agent -> {host}"]
    diff = (cohort.out / linker_record["artifacts"]["diff"]).read_text()
    assert "symlink to /etc/shadow" in diff and "b/key" in diff


def test_copy_out_cap_is_flagged(cohort: Cohort) -> None:
    cohort.task("t")
    chatty = "for i in 1 2 3; do head -c 1048576 /dev/urandom > $MAKA_LOGS_DIR/f$i; done; head -c 2000000 /dev/zero > w"
    cohort.write(subjects=[command("chatty", chatty)], budgets={"max_artifact_bytes": 1048576})
    cohort.run().assert_outcomes(failed=1)
    record = cohort.results()["t[chatty-r0]"]
    assert record["agent"]["copy_truncated"] is True
    assert record["agent"]["copied_out"]["agent_logs"]["truncated"] is True
    logs = cohort.out / record["artifacts"]["agent_logs"]
    assert sum(p.stat().st_size for p in logs.iterdir()) <= 1048576


needs_cgroups = pytest.mark.skipif(limits.mechanism() == "rlimit", reason="no writable cgroup hierarchy here")


@needs_cgroups
def test_memory_pids_tmpfs_and_disk_hogs_end_in_classified_results(cohort: Cohort) -> None:
    storage = "storage_mb = 16\n" if disk.unavailable() is None else ""
    cohort.task("t", extra_toml=f"memory_mb = 64\n{storage}")
    subjects = [
        command("hog", "python3 -c 'x = bytearray(400 * 1024 * 1024)'"),
        command("forker", "i=0; while [ $i -lt 300 ]; do sleep 20 & i=$((i+1)); done; wait"),
        command("tmpfiller", "dd if=/dev/zero of=/tmp/fill bs=1M count=100"),
        command("diskfiller", "dd if=/dev/zero of=/app/fill bs=1M count=100 2> $MAKA_LOGS_DIR/dd.txt"),
        {"name": "oracle", "kind": "oracle"},
    ]
    cohort.write(subjects=subjects, executor={"kind": "local", "pids_limit": 64, "tmpfs_mb": 16})
    cohort.run("-n", "2").assert_outcomes(passed=1, failed=4)
    records = cohort.results()
    assert records["t[oracle-r0]"]["status"] == "agent_success", "other cells are unaffected"
    hog = records["t[hog-r0]"]
    assert hog["status"] == "agent_incomplete" and hog["agent"]["limits_hit"] == ["memory"]
    assert "memory limit" in hog["error"]["message"]
    assert hog["isolation"]["limits"]["memory_mb"] == 64
    assert "pids" in records["t[forker-r0]"]["agent"]["limits_hit"]
    assert records["t[forker-r0]"]["official"] is True
    assert records["t[tmpfiller-r0]"]["status"] == "agent_incomplete"
    filler = records["t[diskfiller-r0]"]
    assert filler["status"] == ("agent_incomplete" if storage else "agent_failure")
    if storage:
        assert filler["isolation"]["limits"]["storage"]["enforced"] is True
        dd = (cohort.out / filler["artifacts"]["agent_logs"] / "dd.txt").read_text()
        assert "No space left on device" in dd
    assert all(r["official"] for r in records.values()), {k: r["status"] for k, r in records.items()}
