"""bench/structure.py on a tiny tree with a known cycle, a known largest function and an arrow up."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "structure.py"


def _write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def _tree(root: Path) -> None:
    """core/a -> run/b (relative, up) -> run/c -> core/a: a cycle of three files over two packages."""
    _write(root, "pytest_maka/__init__.py", '__version__ = "0"\n')
    _write(root, "pytest_maka/core/__init__.py", "")
    _write(root, "pytest_maka/run/__init__.py", "")
    _write(
        root,
        "pytest_maka/core/a.py",
        """
        def small():
            from ..run import b  # deferred, relative: resolved to pytest_maka.run.b
            return b
        """,
    )
    _write(root, "pytest_maka/run/b.py", "from . import c\n")
    body = "".join(f"    x{i} = {i}\n" for i in range(30))
    _write(root, "pytest_maka/run/c.py", f"from pytest_maka.core.a import small\n\n\ndef huge():\n{body}")
    _write(root, "pytest_maka/run/facts.py", "class VerifierRun:\n    exit_code: int\n")
    _write(root, "pytest_maka/store/__init__.py", "")
    _write(root, "pytest_maka/store/big.py", "x = 1\n" * 401)
    _write(
        root,
        "pytest_maka/store/d.py",
        """
        from pytest_maka.core import a

        def write(work, record):
            work.agent_info["version"] = 1
            work.facts_update(exit=0, timed_out=False)
            return record["status"], record.get("cell"), VerifierRun(exit_code=0)
        """,
    )


def _run(repo: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--repo", str(repo)], capture_output=True, text=True, check=False
    )


def test_finds_the_cycle_the_largest_function_and_the_arrow_up(tmp_path: Path) -> None:
    _tree(tmp_path)
    done = _run(tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    largest = out.split("largest functions")[1].splitlines()[1].split()
    assert largest == ["31", "run.c:4", "huge"]
    assert "files over 400 lines: 1\n    401  pytest_maka/store/big.py\n" in out
    assert "import cycles, all imports: 1 between files, 1 between packages" in out
    assert "  files (3): core.a run.b run.c" in out
    assert "  packages (2): core run" in out
    # the only edge closing the cycle is deferred (inside a function): at import time there is none
    assert "import cycles, module-level imports only: 0 between files, 0 between packages" in out
    assert "arrows that point up: 1 imports (1 deferred) in 1 package pairs" in out
    assert "     1  core -> run" in out
    assert "fact writes by literal key" in out and ": 3 places, 3 keys, 1 files" in out
    assert "record reads by literal key (r, rec, record, row): 2 places, 2 keys, 1 files" in out
    assert "over 3 keys (FACT_KEYS and those written by literal key): median 1, max 1" in out
    assert "  version 1, timed_out 1, exit 1\n" in out
    assert "  VerifierRun: 2 + 0  (run.facts, store.d)\n" in out, "defined in one file, constructed in another"


def test_a_directory_without_the_package_is_one_clear_line(tmp_path: Path) -> None:
    done = _run(tmp_path)
    assert done.returncode == 2
    expected = f"{tmp_path}: no pytest_maka/__init__.py here (--repo expects a checkout of pytest-maka)"
    assert done.stderr.strip() == expected
    assert not done.stdout
