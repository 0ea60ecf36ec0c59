"""The taint rule (core/taint.py): what is code, when a pass is tainted or refused, and how it
shows in the record, the taxonomy, summary.md, report.html and ``maka compare``."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

from pytest_maka.core.record_model import AttemptRecord
from pytest_maka.core.records import attempt_record, cell_record, is_tainted
from pytest_maka.core.taint import TAINT_SCHEMA, Touched, code_like, judge
from pytest_maka.core.taxonomy import AttemptFacts, Status, SubjectOutcome, VerifierOutcome, classify
from pytest_maka.report import write_views
from pytest_maka.report.compare import compare_lines, compare_runs, render_compare_markdown

from ..report.builders import make_cell

REG, EXE, LINK = stat.S_IFREG | 0o644, stat.S_IFREG | 0o755, stat.S_IFLNK | 0o777


def test_code_like_separates_code_from_data() -> None:
    code = [
        ("/usr/local/lib/python3.11/dist-packages/zz.pth", REG),
        ("/usr/local/lib/python3.11/dist-packages/pkg/__init__.py", REG),
        ("/usr/lib/python3/dist-packages/pkg/__pycache__/m.cpython-311.pyc", REG),
        ("/usr/local/bin/tool", EXE),
        ("/usr/local/bin/python3", LINK),
        ("/etc/gitconfig", REG),
        ("/root/.bashrc", REG),
        ("/etc/profile.d/evil.sh", REG),
        ("/etc/apt/apt.conf.d/99hook", REG),
        ("/etc/ld.so.preload", REG),
        ("/srv/repo/.git/hooks/post-checkout", REG),
        ("/srv/repo/.git/config", REG),
        ("/usr/lib/x86_64-linux-gnu/libevil.so.1", REG),
    ]
    data = [("/etc/maka-app/app.conf", REG), ("/srv/www/index.html", REG), ("/etc/passwd", REG), ("/tmp/config", REG)]
    assert [p for p, m in code if not code_like(p, m)] == []
    assert [p for p, m in data if code_like(p, m)] == []


def test_a_pass_on_code_the_subject_changed_is_tainted_and_refused_only_under_the_switch() -> None:
    changed = ["/etc/app.conf", "/usr/local/bin/tool", "/tmp/unused"]
    accessed = [Touched("/etc/app.conf", REG), Touched("/usr/local/bin/tool", EXE)]
    t = judge(mechanism="m", changed=changed, accessed=accessed, passed=True, refuse=False)
    assert (t.tainted, t.refused, t.paths, t.accessed) == (
        True,
        False,
        ("/usr/local/bin/tool",),
        ("/etc/app.conf", "/usr/local/bin/tool"),
    )
    assert judge(mechanism="m", changed=changed, accessed=accessed, passed=True, refuse=True).refused
    data_only = judge(mechanism="m", changed=changed, accessed=accessed[:1], passed=True, refuse=True)
    assert not data_only.tainted and not data_only.refused
    failed = judge(mechanism="m", changed=changed, accessed=accessed, passed=False, refuse=True)
    assert not failed.tainted and failed.paths == ("/usr/local/bin/tool",), "a failure is not tainted"
    unchecked = judge(mechanism="m", changed=changed, accessed=None, passed=True, refuse=True)
    assert unchecked.tainted and unchecked.refused and not unchecked.checked, "unknown is not clean"
    nothing = judge(mechanism="m", changed=[], accessed=None, passed=True, refuse=True)
    assert not nothing.tainted, "nothing changed outside the workdir: nothing to taint"
    record = t.as_record()
    assert record["schema"] == TAINT_SCHEMA and record["paths"] == ["/usr/local/bin/tool"]


def test_classify_refuses_a_tainted_pass_only_when_told() -> None:
    base = {"subject": SubjectOutcome(exit_code=0), "verifier": VerifierOutcome(passed=True)}
    assert classify(AttemptFacts(**base)) is Status.AGENT_SUCCESS  # type: ignore[arg-type]
    refused = AttemptFacts(**base, tainted_refused="tainted: ...")  # type: ignore[arg-type]
    assert classify(refused) is Status.AGENT_FAILURE
    rejected = AttemptFacts(
        subject=SubjectOutcome(exit_code=0), verifier=VerifierOutcome(passed=False), tainted_refused="x"
    )
    assert classify(rejected) is Status.AGENT_FAILURE


def _record(task: str, subject: str, status: Status, taint: Any = None) -> AttemptRecord:
    attempt = attempt_record(
        make_cell(task, subject), cohort="demo", attempt=1, status=status, started=0.0, finished=1.0, taint=taint
    )
    return cell_record([attempt])


def test_tainted_passes_are_shown_apart_in_the_views_and_compare(tmp_path: Path) -> None:
    tainted = judge(
        mechanism="m",
        changed=["/usr/local/bin/tool"],
        accessed=[Touched("/usr/local/bin/tool", EXE)],
        passed=True,
        refuse=False,
    )
    clean = judge(mechanism="m", changed=[], accessed=[], passed=True, refuse=False)
    a = [_record("t1", "agent", Status.AGENT_SUCCESS, clean), _record("t2", "agent", Status.AGENT_SUCCESS, clean)]
    b = [_record("t1", "agent", Status.AGENT_SUCCESS, tainted), _record("t2", "agent", Status.AGENT_SUCCESS, clean)]
    assert [is_tainted(r) for r in b] == [True, False]
    out = tmp_path / "out"
    write_views(out, b, cohort="demo")
    summary = (out / "summary.md").read_text()
    assert "### Tainted passes (1)" in summary and "/usr/local/bin/tool" in summary
    html = (out / "report.html").read_text()
    assert 'id="tainted"' in html and "/usr/local/bin/tool" in html
    write_views(tmp_path / "clean", a, cohort="demo")
    assert "Tainted passes" not in (tmp_path / "clean" / "summary.md").read_text()
    result = compare_runs(a, b, labels=("A", "B"))
    lines = compare_lines(result)
    assert any("agent: tainted passes A 0, B 1" in line for line in lines), lines
    assert "**Tainted:**" in render_compare_markdown(result)


def test_changes_that_could_not_be_listed_make_a_pass_tainted() -> None:
    t = judge(mechanism="m", changed=[], accessed=None, passed=True, refuse=True, listed=False)
    assert t.tainted and t.refused and not t.checked
