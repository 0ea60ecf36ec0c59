"""The one place where secret values are scrubbed: records, file names and file contents.

A ``Redactor`` knows the values a subject was given (``env:``) and every form in which
they commonly reappear: as written, JSON- and URL-escaped, base64 (standard and URL-safe,
at each of the three byte alignments, so a secret inside a longer encoded blob is found
too) and hex (either case). It is applied where records are written (the ledger), where
an attempt's artifacts land in the output directory, and to the derived HTML/markdown.

Files are streamed in chunks with an overlap of one needle, so a value split across a
chunk boundary is still found and a file of any size needs constant memory. Symlinks are
never followed and only regular files are read.
"""

from __future__ import annotations

import base64
import json
import os
import re
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..core.record_model import AttemptRecord
from .tree import walk_bottom_up

MARK = "[REDACTED]"
#: Values shorter than this are not treated as secrets (they would scrub ordinary text).
MIN_SECRET_CHARS = 4
#: Encoded forms shorter than this are left out (too likely to occur by chance).
MIN_ENCODED_CHARS = 8
CHUNK = 1024 * 1024


def encoded_forms(value: str) -> set[str]:
    """``value`` and the strings it becomes when escaped or encoded."""
    raw = value.encode("utf-8")
    forms = {value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1], quote(value, safe="")}
    encoded = {raw.hex(), raw.hex().upper()}
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        for align in (0, 1, 2):
            text = encode(b"\0" * align + raw).decode("ascii")
            # Keep the characters determined by the value's bytes alone (not by its neighbours).
            skip, end = (0, 2, 3)[align], (8 * (align + len(raw))) // 6
            encoded.add(text[skip:end])
            if align == 0:
                encoded.add(text)
    return {f for f in forms if f} | {f for f in encoded if len(f) >= MIN_ENCODED_CHARS}


class Redactor:
    """Replaces every known form of the given secret values with ``[REDACTED]``."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        values = sorted({s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET_CHARS})
        forms: set[str] = set()
        for value in values:
            forms |= encoded_forms(value)
        self.needles = sorted(forms, key=lambda f: (-len(f), f))
        self._text = re.compile("|".join(map(re.escape, self.needles))) if self.needles else None
        raw = sorted({f.encode("utf-8") for f in forms}, key=lambda b: (-len(b), b))
        self._raw = raw  # found with bytes.find, at memory speed (a regex alternation is 40x slower)
        self._overlap = max((len(b) for b in raw), default=1) - 1

    def __bool__(self) -> bool:
        return self._text is not None

    # -- values -------------------------------------------------------------------------

    def text(self, value: str) -> str:
        return self._text.sub(MARK, value) if self._text is not None else value

    def record(self, record: AttemptRecord) -> AttemptRecord:
        """``record`` with every string (keys included) scrubbed; a number holding a secret
        becomes null (a record's numbers stay numbers)."""
        if self._text is None:
            return record
        return AttemptRecord.model_validate(self.value(record.to_json(), number_mark=None))

    def value(self, value: Any, number_mark: str | None = MARK) -> Any:
        """A copy of a JSON-like value with every string (keys included) scrubbed; a number
        holding a secret becomes ``number_mark``."""
        if self._text is None:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.value(k) if isinstance(k, str) else k: self.value(v, number_mark) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.value(v, number_mark) for v in value]
        if isinstance(value, (int, float)) and not isinstance(value, bool) and self._text.search(str(value)):
            return number_mark
        if value is not None and not isinstance(value, (bool, int, float)) and self._text.search(str(value)):
            return self.text(str(value))  # anything else is written with str() (json default)
        return value

    # -- files --------------------------------------------------------------------------

    def tree(self, root: Path) -> int:
        """Scrub the names and contents of everything below ``root``; returns entries changed."""
        if self._text is None or not os.path.lexists(root):
            return 0
        changed = 0
        if os.path.isdir(root) and not os.path.islink(root):
            for dirpath, dirnames, filenames in walk_bottom_up(root):
                for name in filenames:
                    changed += self._entry(Path(dirpath), name, is_dir=False)
                for name in dirnames:
                    changed += self._entry(Path(dirpath), name, is_dir=True)
        elif self.file(root):
            changed += 1
        return changed

    def top_files(self, out_dir: Path) -> int:
        """Scrub the regular files directly in ``out_dir`` (the derived views); returns files changed."""
        if self._text is None or not out_dir.is_dir():
            return 0
        with os.scandir(out_dir) as entries:
            return sum(self.file(Path(e.path)) for e in entries if e.is_file(follow_symlinks=False))

    def _entry(self, parent: Path, name: str, *, is_dir: bool) -> int:
        try:
            return self._scrub_entry(parent, name, is_dir=is_dir)
        except OSError:  # unreadable or vanished: nothing of it can reach a report either
            return 0

    def _scrub_entry(self, parent: Path, name: str, *, is_dir: bool) -> int:
        changed = 0
        path = parent / name
        if not is_dir and self.file(path):
            changed = 1
        clean = self.text(os.fsdecode(name))
        if clean != os.fsdecode(name):
            target = parent / clean
            n = 1
            while os.path.lexists(target):
                target, n = parent / f"{clean}.{n}", n + 1
            os.rename(path, target)
            changed = 1
        return changed

    def file(self, path: Path) -> bool:
        """Scrub one regular file in place (streamed; links and special files untouched)."""
        if not self._raw:
            return False
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return False
        with os.fdopen(fd, "rb") as src:
            st = os.fstat(src.fileno())
            if not stat.S_ISREG(st.st_mode):
                return False
            tmp = tempfile.NamedTemporaryFile(dir=path.parent, prefix=".redact-", delete=False)  # noqa: SIM115
            try:
                with tmp:
                    found = self.stream(src, tmp)
                if found:
                    os.chmod(tmp.name, stat.S_IMODE(st.st_mode))
                    os.replace(tmp.name, path)
                    return True
            finally:
                if os.path.lexists(tmp.name):
                    os.unlink(tmp.name)
        return False

    def _spans(self, buf: bytes) -> list[tuple[int, int]]:
        """Non-overlapping matches in ``buf``, leftmost first, the longest where two start together."""
        spans = []
        for needle in self._raw:
            i = buf.find(needle)
            while i != -1:
                spans.append((i, i + len(needle)))
                i = buf.find(needle, i + 1)
        spans.sort(key=lambda s: (s[0], -s[1]))
        out: list[tuple[int, int]] = []
        for start, end in spans:
            if not out or start >= out[-1][1]:
                out.append((start, end))
        return out

    def stream(self, src: Any, dst: Any, chunk: int = CHUNK) -> int:
        """Copy ``src`` to ``dst`` scrubbed; returns the number of replacements."""
        found = 0
        carry = b""
        while True:
            data = src.read(chunk)
            buf = carry + data
            safe = max(len(buf) - self._overlap, 0) if data else len(buf)
            out, pos = [], 0
            for start, end in self._spans(buf):
                if start >= safe:
                    break
                out += [buf[pos:start], MARK.encode()]
                pos = end
                found += 1
            cut = max(pos, safe)
            out.append(buf[pos:cut])
            dst.write(b"".join(out))
            carry = buf[cut:]
            if not data:
                return found
