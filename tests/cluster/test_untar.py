"""untar.extract: the data filter's rules on every Python (Debian 12's 3.11.2 has no filters)."""

from __future__ import annotations

import io
import stat
import tarfile
from pathlib import Path

from pytest_maka.cluster import untar


def _tar(*members: tuple[str, dict[str, object], bytes]) -> tarfile.TarFile:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, fields, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            for key, value in fields.items():
                setattr(info, key, value)
            tar.addfile(info, io.BytesIO(data) if data else None)
    buffer.seek(0)
    return tarfile.open(fileobj=buffer, mode="r")


def test_links_inside_are_kept_and_a_chain_that_leaves_is_refused(tmp_path: Path) -> None:
    """A link judged by its name's directory would pass here: "deep/up" is the root itself."""
    root = tmp_path / "root"
    refused = untar.extract(
        _tar(
            ("deep", {"type": tarfile.DIRTYPE, "mode": 0o755}, b""),
            ("deep/up", {"type": tarfile.SYMTYPE, "linkname": ".."}, b""),
            ("deep/up/out", {"type": tarfile.SYMTYPE, "linkname": "../outside"}, b""),
            ("deep/up/deep/up/../../x.txt", {}, b"no"),
            ("deep/up/inside.txt", {}, b"yes"),
            ("same", {"type": tarfile.SYMTYPE, "linkname": "deep/up/inside.txt"}, b""),
        ),
        root,
        links=True,
    )
    assert [m.name for m in refused] == ["deep/up/out", "deep/up/deep/up/../../x.txt"]
    assert (root / "inside.txt").read_text() == "yes" and (root / "same").read_text() == "yes"
    assert not (tmp_path / "outside").exists() and not (tmp_path / "x.txt").exists()


def test_a_file_never_follows_a_link_and_modes_lose_setid_and_write_bits(tmp_path: Path) -> None:
    root = tmp_path / "root"
    secret = tmp_path / "secret"
    secret.write_text("host")
    refused = untar.extract(
        _tar(
            ("link", {"type": tarfile.SYMTYPE, "linkname": str(secret)}, b""),
            ("rel", {"type": tarfile.SYMTYPE, "linkname": "run"}, b""),
            ("rel", {}, b"overwrite through the link"),
            ("run", {"mode": 0o6777}, b"#!/bin/sh\n"),
            ("fifo", {"type": tarfile.FIFOTYPE}, b""),
        ),
        root,
        links=True,
    )
    assert [m.name for m in refused] == ["link", "rel", "fifo"]
    assert secret.read_text() == "host"
    mode = stat.S_IMODE((root / "run").stat().st_mode)
    assert mode == 0o755, oct(mode)
    assert (root / "rel").is_symlink() and (root / "run").read_text() == "#!/bin/sh\n"


def test_without_links_every_link_is_refused(tmp_path: Path) -> None:
    refused = untar.extract(_tar(("l", {"type": tarfile.SYMTYPE, "linkname": "x"}, b""), ("x", {}, b"1")), tmp_path)
    assert [m.name for m in refused] == ["l"] and not (tmp_path / "l").exists()
