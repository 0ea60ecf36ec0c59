"""The access probe changes its root to the sandbox's and then runs as root on the engine's host
(the Docker sandbox's removal and the taint watch): once inside, nothing is imported from the
sandbox's files, whatever the subject planted where the interpreter looks for modules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from pytest_maka.executors.docker import watch_probe

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="changing the root needs root")

#: After entering the root, import a module the subject planted on the interpreter's own path.
AFTER = """
import sys
probe = {"__name__": "watch_probe"}
exec(compile(open(sys.argv[1]).read(), "watch_probe", "exec"), probe)
probe["enter_root"](sys.argv[2])
try:
    import maka_planted
except ImportError:
    print("refused")
else:
    print("imported")
"""


def test_nothing_is_imported_from_the_sandbox_once_inside(tmp_path: Path) -> None:
    root = tmp_path / "root"
    stdlib = root / sysconfig.get_paths()["stdlib"].lstrip("/")
    stdlib.mkdir(parents=True)
    (stdlib / "maka_planted.py").write_text("open('/planted-ran', 'w').write('x')\n")
    (root / "victim").write_text("stale")
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", AFTER, watch_probe.__file__, str(root)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.strip() == "refused", out.stdout + out.stderr
    assert not (root / "planted-ran").exists(), "a planted module ran as root on the host"


def test_the_probe_still_answers_inside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "victim").write_text("stale")
    source = Path(watch_probe.__file__).read_text()
    (root / "a").write_text("added")
    (root / "full").mkdir()
    (root / "full" / "x").write_text("x")
    requests = [
        {"op": "unlink", "path": "/victim"},
        {"op": "unlink", "path": "/victim"},
        {"op": "nope"},
        {"op": "unlink", "paths": ["/a", "/gone", "/full"]},
    ]
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", source, str(root)],
        input="".join(json.dumps(r) + "\n" for r in requests) + "not json\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    answers = [json.loads(line) for line in out.stdout.splitlines()]
    assert answers[:3] == [{"removed": True}, {"removed": False}, {"error": "unknown request 'nope'"}], out.stderr
    assert answers[3] == {"removed": 1, "failed": ["cannot remove /full: [Errno 39] Directory not empty: '/full'"]}
    assert "error" in answers[4] and not (root / "victim").exists() and not (root / "a").exists()
