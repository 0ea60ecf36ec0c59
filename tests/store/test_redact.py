"""The redactor: every form of a secret, in records, file names and streamed files of any size."""

from __future__ import annotations

import base64
import io
import json
import os
from pathlib import Path

import pytest

from pytest_maka.core.records import attempt_record
from pytest_maka.core.taxonomy import Status
from pytest_maka.store.ledger import Ledger
from pytest_maka.store.redact import MARK, Redactor

from ..report.builders import make_cell

SECRET = "sk-live-7Hq2+/x9ZpW4"


def forms_of(secret: str, prefix: bytes, suffix: bytes) -> list[bytes]:
    """How a program could write the secret next to other bytes."""
    raw = secret.encode()
    return [
        prefix + raw + suffix,
        base64.b64encode(prefix + raw + suffix),
        base64.urlsafe_b64encode(prefix + raw + suffix),
        (prefix + raw + suffix).hex().encode(),
        (prefix + raw + suffix).hex().upper().encode(),
        json.dumps({"k": secret}).encode(),
    ]


@pytest.mark.parametrize("prefix", [b"", b"a", b"ab", b"abc", b"Authorization: Bearer "])
@pytest.mark.parametrize("suffix", [b"", b"z", b"yz", b"\n"])
def test_every_encoding_at_every_alignment_is_scrubbed(prefix: bytes, suffix: bytes) -> None:
    redactor = Redactor([SECRET])
    for blob in forms_of(SECRET, prefix, suffix):
        out = io.BytesIO()
        assert redactor.stream(io.BytesIO(blob), out) >= 1, blob
        for needle in forms_of(SECRET, b"", b"")[:1]:
            assert needle not in out.getvalue()
        assert base64.b64encode(SECRET.encode())[:8] not in out.getvalue()


def test_values_split_across_chunk_boundaries_are_found() -> None:
    redactor = Redactor([SECRET])
    text = (b"x" * 13 + SECRET.encode()) * 50
    for chunk in (1, 2, 7, len(SECRET) - 1, len(SECRET), 64):
        out = io.BytesIO()
        assert redactor.stream(io.BytesIO(text), out, chunk=chunk) == 50
        assert out.getvalue() == (b"x" * 13 + MARK.encode()) * 50


def test_large_file_is_streamed_and_keeps_its_mode(tmp_path: Path) -> None:
    big = tmp_path / "big.log"
    with big.open("wb") as f:
        for i in range(40):  # 40 MiB with a secret straddling each MiB boundary
            f.write(b"." * (1024 * 1024 - 5) + SECRET.encode()[:5])
            f.write(SECRET.encode()[5:] if i < 39 else b"")
    big.chmod(0o640)
    assert Redactor([SECRET]).file(big)
    data = big.read_bytes()
    assert SECRET.encode() not in data and data.count(MARK.encode()) == 39
    assert (big.stat().st_mode & 0o777) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["big.log"], "no temporary file left behind"


def test_file_names_and_nested_directories_are_renamed(tmp_path: Path) -> None:
    d = tmp_path / f"dir-{SECRET.replace('/', '_')}"
    r = Redactor([SECRET.replace("/", "_")])
    d.mkdir()
    (d / f"{SECRET.replace('/', '_')}.txt").write_text(f"key={SECRET.replace('/', '_')}\n")
    (d / "other.txt").write_text("clean\n")
    assert r.tree(tmp_path) == 2  # the file (name and content) and the directory
    names = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert names == sorted([f"dir-{MARK}", f"dir-{MARK}/other.txt", f"dir-{MARK}/{MARK}.txt"])
    assert (tmp_path / f"dir-{MARK}" / f"{MARK}.txt").read_text() == f"key={MARK}\n"


def test_links_and_fifos_are_never_read_or_followed(tmp_path: Path) -> None:
    host = tmp_path / "host.txt"
    host.write_text(SECRET)
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "link").symlink_to(host)
    os.mkfifo(tree / "fifo")  # opening it for reading without O_NONBLOCK would hang
    assert Redactor([SECRET]).tree(tree) == 0
    assert host.read_text() == SECRET, "the redactor wrote through a link"


def test_record_is_scrubbed_in_every_field_before_it_is_written(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path, Redactor([SECRET, "12345678"]))
    cell = make_cell("t", "s")
    record = {
        **attempt_record(cell, cohort="c", attempt=1, status=Status.AGENT_FAILURE, started=0, finished=9).to_json(),
        "error": {"type": "x", "message": f"failed with {SECRET}"},
        "subject_claim": {SECRET: [base64.b64encode(SECRET.encode()).decode()]},
        "agent": {"stop_reason": SECRET.encode().hex(), "note": Path(f"/x/{SECRET}")},
        "usage": {"input_tokens": 12345678},
        "passed": True,
    }
    written = ledger.append(record)
    line = (tmp_path / "attempts.jsonl").read_text()
    assert SECRET not in line and "12345678" not in line and SECRET.encode().hex() not in line
    assert json.loads(line) == written.to_json()
    assert written.error is not None and written.error.message == f"failed with {MARK}" and written.passed is True
    assert written.usage is not None and written.usage.input_tokens is None, "a number holding a secret: null"
    assert record["error"]["message"] == f"failed with {SECRET}", "the caller's record is not mutated"


def test_short_values_are_not_secrets() -> None:
    redactor = Redactor(["abc", ""])
    assert not redactor
    assert redactor.text("abc") == "abc"
