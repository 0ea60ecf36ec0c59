"""An attempt's files as bytes: the cap, what is never packed, and a hostile tarball on the controller."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

from pytest_maka.cluster.transfer import MAX_LISTED, pack, unpack

from ..conftest import files_below


def _attempt_dir(root: Path) -> Path:
    d = root / "attempt-1"
    (d / "agent").mkdir(parents=True)
    (d / "verifier").mkdir()
    (d / "empty").mkdir()
    (d / "agent" / "big.log").write_bytes(b"x" * 5000)
    (d / "verifier" / "reward.txt").write_text("1\n")
    (d / "instruction.md").write_text("do it")
    return d


def test_round_trip_keeps_every_file_and_empty_directory(tmp_path: Path) -> None:
    src = _attempt_dir(tmp_path)
    data, facts = pack(src, cap=1 << 20)
    target = tmp_path / "controller" / "attempt-1"
    assert unpack(data, target) == []
    assert {p.relative_to(target): b for p, b in files_below(target).items()} == {
        p.relative_to(src): b for p, b in files_below(src).items()
    }
    assert (target / "empty").is_dir()
    assert facts["files"] == 3 and facts["bytes"] == 5000 + 2 + 5 and "dropped" not in facts


def test_files_past_the_cap_are_dropped_and_listed_the_rest_travels(tmp_path: Path) -> None:
    src = _attempt_dir(tmp_path)
    data, facts = pack(src, cap=1024)
    target = tmp_path / "out"
    unpack(data, target)
    assert not (target / "agent" / "big.log").exists()
    assert (target / "verifier" / "reward.txt").read_text() == "1\n", "small files after a big one still travel"
    assert (target / "instruction.md").read_text() == "do it"
    assert facts["dropped_count"] == 1 and facts["dropped"] == ["agent/big.log (5000 bytes)"]
    assert facts["bytes"] <= 1024


def test_links_and_fifos_are_never_packed(tmp_path: Path) -> None:
    src = _attempt_dir(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    (src / "agent" / "link").symlink_to(secret)
    (src / "agent" / "dirlink").symlink_to(tmp_path)
    os.mkfifo(src / "agent" / "pipe")  # packing must not block on it either
    data, facts = pack(src, cap=1 << 20)
    target = tmp_path / "out"
    unpack(data, target)
    assert sorted(facts["skipped"]) == ["agent/dirlink", "agent/link", "agent/pipe"]
    assert b"host secret" not in b"".join(files_below(target).values())
    assert not any(p.is_symlink() for p in target.rglob("*"))


def test_hostile_members_are_refused_one_by_one(tmp_path: Path) -> None:
    """A tarball with traversal, absolute, link and device members: only the plain files land, inside."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:

        def add(name: str, data: bytes = b"", **kw: object) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            for key, value in kw.items():
                setattr(info, key, value)
            tar.addfile(info, io.BytesIO(data) if data else None)

        add("ok.txt", b"fine")
        add("../escape.txt", b"out")
        add("/abs.txt", b"abs")
        add("up", type=tarfile.SYMTYPE, linkname="/etc/passwd")
        add("hard", type=tarfile.LNKTYPE, linkname="ok.txt")
        add("dev", type=tarfile.CHRTYPE, devmajor=1, devminor=3)
        add("sub/after.txt", b"still here")
    target = tmp_path / "a" / "attempt-1"
    refused = unpack(buffer.getvalue(), target)
    assert refused == ["../escape.txt", "up", "hard", "dev"]
    assert (target / "ok.txt").read_text() == "fine" and (target / "sub" / "after.txt").read_text() == "still here"
    assert not (tmp_path / "a" / "escape.txt").exists() and not Path("/abs.txt").exists()
    assert not any(p.is_symlink() or not (p.is_file() or p.is_dir()) for p in target.rglob("*"))
    landed = {p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()}
    assert landed == {"ok.txt", "sub/after.txt", "abs.txt"}, "an absolute name lands inside, as a relative one"


def test_listing_is_bounded_but_the_count_is_exact(tmp_path: Path) -> None:
    src = tmp_path / "many"
    src.mkdir()
    for i in range(MAX_LISTED + 20):
        (src / f"f{i:03}").write_bytes(b"y" * 2000)
    _, facts = pack(src, cap=1024)
    assert facts["dropped_count"] == MAX_LISTED + 20 and len(facts["dropped"]) == MAX_LISTED
