"""The regression corpus: every input that once crashed, replayed as a user would meet it.

In-process through the loader, and through ``pytest --maka-spec`` (``maka report`` for a
ledger): each is refused with exit 4 (2 for ``maka``), one ``ERROR:`` line naming a file
of the case, no traceback, and no cell run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .targets import TARGETS, fresh, outcome

CORPUS = Path(__file__).resolve().parents[1] / "fuzz_corpus"
CASES = sorted(p for p in CORPUS.glob("*/*") if p.is_file())


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def test_corpus_covers_every_target() -> None:
    assert {p.parent.name for p in CASES} == set(TARGETS)


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_corpus_case_is_refused_by_the_loader(case: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAKA_CACHE_DIR", str(tmp_path / "cache"))
    assert outcome(TARGETS[case.parent.name], fresh(tmp_path / "case"), case.read_bytes()) == "refused"


@pytest.mark.parametrize("case", [c for c in CASES if c.parent.name != "attempts.jsonl"], ids=_id)
def test_corpus_case_is_one_line_from_pytest(case: Path, pytester: pytest.Pytester) -> None:
    target = TARGETS[case.parent.name]
    root = pytester.path / "case"
    written = target.write(fresh(root), case.read_bytes())
    spec = root / "cohort.yaml"
    if target.spec is not None:
        spec.write_bytes(target.spec)
    assert spec.is_file(), written
    # --maka-strict: an invalid task dir is a usage error (by default it is skipped with its one line)
    args = (f"--maka-spec={spec}", f"--maka-out={root / 'out'}", "--collect-only", "-q", "--maka-strict")
    result = pytester.runpytest(*args)
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, out
    assert "Traceback" not in out and "INTERNALERROR" not in out, out
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert len(errors) == 1 and str(root) in errors[0], out
    assert not (root / "out" / "attempts.jsonl").exists()
