"""report.html, summary.md and the terminal table, built from realistic records."""

from __future__ import annotations

import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from pytest_maka.core.records import attempt_record, cell_record
from pytest_maka.core.taxonomy import MEANING, Status
from pytest_maka.report import write_views
from pytest_maka.report.details import TEXT_BUDGET
from pytest_maka.report.html import read_tail, safe_rel_path
from pytest_maka.report.terminal import terminal_lines

from .builders import make_cell

S = Status
T0 = 1_700_000_000.0
EVIL = "<script>alert('pwned')</script>"


def make_record(
    out: Path | None,
    task: str,
    subject: str,
    status: Status,
    *,
    kind: str = "command",
    rep: int = 1,
    agent_log: str | None = None,
    verifier_log: str | None = None,
    **kw: Any,
) -> dict[str, Any]:
    """A cell record with its artifacts written under ``out/cells/<key>/attempt-1``."""
    cell = make_cell(task, subject, kind, rep)
    rel = f"cells/{cell.key}/attempt-1"
    artifacts: dict[str, str] = {"dir": rel}
    if out is not None:
        (out / rel).mkdir(parents=True, exist_ok=True)
        if agent_log is not None:
            (out / rel / "agent.log").write_text(agent_log, encoding="utf-8")
            artifacts["agent_log"] = f"{rel}/agent.log"
        if verifier_log is not None:
            (out / rel / "verifier.txt").write_text(verifier_log, encoding="utf-8")
            artifacts["verifier_output"] = f"{rel}/verifier.txt"
    artifacts.update(kw.pop("artifacts", {}))
    attempt = attempt_record(
        cell,
        cohort="demo",
        attempt=1,
        status=status,
        started=T0,
        finished=T0 + kw.pop("duration", 12.5),
        artifacts=artifacts,
        **kw,
    )
    return cell_record([attempt]).to_json()  # as results.jsonl holds it


@pytest.fixture
def cohort(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    out = tmp_path / "out"
    out.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET-do-not-leak\n")
    (out / "leak.log").symlink_to(secret)
    records = [
        make_record(
            out,
            "fix-perms",
            "claude",
            S.AGENT_SUCCESS,
            score=1.0,
            agent_log="done\n",
            verifier_log="1 passed\n",
            usage={"cost_usd": 0.5, "input_tokens": 1000},
        ),
        make_record(
            out, "fix-perms", "claude", S.AGENT_SUCCESS, rep=2, score=1.0, agent_log="ok\n", usage={"cost_usd": 0.25}
        ),
        make_record(out, "parse-log", "claude", S.AGENT_SUCCESS, score=1.0, agent_log="ok\n"),
        make_record(
            out,
            "parse-log",
            "claude",
            S.AGENT_FAILURE,
            rep=2,
            score=0.0,
            agent_log="\x1b[31mred\x1b[0m line\nprogress 10%\rprogress 100%\n" + EVIL + "\n",
            verifier_log="FAILED test_parse - assert 1 == 2\n" + EVIL,
            error={"type": "VerifierRejected", "message": "tests failed " + EVIL},
        ),
        make_record(
            out,
            "parse-log",
            "claude",
            S.INFRA_FAILURE,
            rep=3,
            error={"type": "DockerError", "message": "engine went away"},
            artifacts={"agent_log": "leak.log", "diff": "../secret.txt", "trajectory": "/etc/passwd"},
        ),
        make_record(out, "fix-perms", "nop", S.AGENT_SUCCESS, kind="nop"),
        make_record(out, "parse-log", "nop", S.AGENT_FAILURE, kind="nop"),
        make_record(out, "parse-log", "oracle", S.AGENT_FAILURE, kind="oracle"),
        make_record(out, "fix-perms", "oracle", S.AGENT_SUCCESS, kind="oracle"),
    ]
    return out, records


def page_json(html: str, block: str = "maka-data") -> dict[str, Any]:
    """The JSON the page's script reads (``maka-data`` rows or ``maka-details`` drill-downs)."""
    m = re.search(rf'<script type="application/json" id="{block}">(.*?)</script>', html, re.S)
    assert m, block
    return json.loads(m.group(1))


def rows(html: str) -> list[dict[str, Any]]:
    """The cell rows of the page as dicts keyed by field name, with names resolved."""
    data = page_json(html)
    out = []
    for r in data["cells"]:
        row = dict(zip(data["fields"], r, strict=True))
        row["task"], row["subject"] = data["tasks"][row["task"]], data["subjects"][row["subject"]]
        row["cls"] = data["classes"][row["cls"]]
        out.append(row)
    return out


class _Checker(HTMLParser):
    """Collects what the checks below need and catches unbalanced tables."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts = 0
        self.resource_attrs: list[str] = []
        self.hrefs: list[str] = []
        self.depth = {"table": 0, "tbody": 0}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "script":
            self.scripts += 1
        for name, value in attrs:
            if name in {"src", "srcset", "data", "poster", "action"}:
                self.resource_attrs.append(f"{tag}.{name}={value}")
            if name == "href" and value is not None:
                self.hrefs.append(value)
        if tag == "link":
            self.resource_attrs.append("link")
        if tag in self.depth:
            self.depth[tag] += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in self.depth:
            self.depth[tag] -= 1


def test_html_report(cohort: tuple[Path, list[dict[str, Any]]]) -> None:
    out, records = cohort
    paths = write_views(out, records, cohort="demo-cohort", meta={"executor": "docker"})
    assert paths == {"html": out / "report.html", "markdown": out / "summary.md"}
    html = paths["html"].read_text(encoding="utf-8")

    # header
    assert "demo-cohort" in html and "docker" in html and str(out) in html
    assert "9 cells" in html and "2023-11-14T22:13:20" in html  # run window from the records
    assert "2023-11-14T22:13:20+00:00 → 2023-11-14T22:13:32+00:00 (wall 12.5s)" in html
    # per-subject rates with denominators; claude has repetitions: a cluster-robust interval
    # (tasks [pass, pass] and [pass, fail]: mean .75, CR1 SE .25, effective n .1875 / .0625 = 3, score
    # interval, continuity-corrected, with t(1) = 12.706 -> [0.6%, 100.0%]: two tasks say almost nothing)
    assert "3/4 = 75.0%" in html and "[0.6%, 100.0%]" in html and "cluster-robust over 2 tasks" in html
    assert "3/5 = 60.0%" in html
    assert "$0.75 (2/5 cells)" in html
    # the rows behind the grid and the cell table: one per cell, ordered by task, subject, repetition
    cells = rows(html)
    assert len(cells) == len(records)
    assert [(c["task"], c["subject"], c["rep"]) for c in cells] == sorted(
        (r["task"], r["subject"], r["repetition"]) for r in records
    )
    assert sum(1 for c in cells if c["cls"] == "agent_success") == 5
    infra = next(c for c in cells if c["cls"] == "infra_failure")
    assert infra["err"] == "DockerError: engine went away" and infra["subject"] == "claude"
    # health flags beside the tasks
    assert "broken: passes with nop" in html and "broken: oracle fails" in html
    assert page_json(html)["health"]
    # pairwise matrix and charts
    assert 'id="comparisons"' in html and ("McNemar exact" in html or "paired bootstrap" in html)
    assert html.count("<svg") >= 3
    # legend: every class and its meaning
    for status in Status:
        assert MEANING[status] in html
    assert "VerifierRejected" in html and "engine went away" in html


def test_meta_in_header(cohort: tuple[Path, list[dict[str, Any]]]) -> None:
    out, records = cohort
    meta = {
        "cohort": "demo",
        "started_at": "2024-01-01T00:00:00Z",
        "finished_at": "2024-01-01T00:10:00Z",
        "versions": {"pytest": "9.2.0", "python": "3.11.9"},
        "argv": ["--maka-spec", "cohort.yaml", "<b>"],
    }
    html = write_views(out, records, cohort="demo", meta=meta)["html"].read_text(encoding="utf-8")
    assert "(wall 10m00s)" in html  # the run window comes from meta when it has one
    assert "pytest 9.2.0 · python 3.11.9" in html
    assert "--maka-spec cohort.yaml &lt;b&gt;" in html


def test_html_is_self_contained_and_escapes_subject_output(cohort: tuple[Path, list[dict[str, Any]]]) -> None:
    out, records = cohort
    html = write_views(out, records, cohort="demo")["html"].read_text(encoding="utf-8")
    checker = _Checker()
    checker.feed(html)
    assert checker.depth == {"table": 0, "tbody": 0}
    # only our own scripts (two JSON blocks and the code); the subject's text lands escaped in JSON
    assert checker.scripts == 3
    assert EVIL not in html and "</script>alert" not in html
    assert "\\u003cscript\\u003ealert('pwned')\\u003c/script\\u003e" in html
    details = page_json(html, "maka-details")
    assert any(EVIL in t for d in details["cells"].values() for _, t in d.get("out", []))
    # no network: no external resources of any kind
    assert "http://" not in html and "https://" not in html
    assert checker.resource_attrs == []
    assert "@import" not in html and "url(" not in html
    for href in checker.hrefs:
        assert href.startswith("#") or safe_rel_path(href.replace("%2F", "/")) is not None, href
    # artifacts: paths relative to each cell's dir; tails of output and verifier output inlined
    data = page_json(html)
    assert ["agent_log", "agent.log"] in [p for lay in data["layouts"] for p in lay]
    assert all(c[data["fields"].index("dir")].startswith("cells/") for c in data["cells"])
    assert "FAILED test_parse - assert 1 == 2" in html
    # terminal escapes stripped, carriage-return overwrites applied
    assert "\x1b" not in html and "red line" in html
    assert "progress 100%" in html and "progress 10%" not in html


def test_unsafe_artifact_paths_are_neither_linked_nor_read(cohort: tuple[Path, list[dict[str, Any]]]) -> None:
    out, records = cohort
    html = write_views(out, records, cohort="demo")["html"].read_text(encoding="utf-8")
    assert "TOPSECRET" not in html  # symlink refused
    assert "../secret.txt" not in html and "/etc/passwd" not in html  # neither linked nor read
    assert read_tail(out, "leak.log") is None
    assert read_tail(out, "../secret.txt") is None
    assert read_tail(out, "cells") is None  # a directory is not a file
    assert read_tail(out, "no/such/file") is None


def test_drill_down_shows_only_a_tail(tmp_path: Path) -> None:
    big = "".join(f"line {i:06d}\n" for i in range(20_000))  # ~240 KB
    rec = make_record(tmp_path, "t", "a", S.AGENT_FAILURE, agent_log=big)
    html = write_views(tmp_path, [rec], cohort="demo")["html"].read_text(encoding="utf-8")
    assert "line 019999" in html and "line 000000" not in html
    assert "earlier bytes not shown" in html
    assert len(html) < 120_000


@pytest.mark.parametrize(
    "value", ["../x", "/abs", "a/../../b", "http://evil/x", "javascript:alert(1)", "a\\b", "", None, 3]
)
def test_safe_rel_path_rejects(value: object) -> None:
    assert safe_rel_path(value) is None


def test_markdown_summary(cohort: tuple[Path, list[dict[str, Any]]]) -> None:
    out, records = cohort
    md = write_views(out, records, cohort="demo")["markdown"].read_text(encoding="utf-8")
    assert md.startswith("## pytest-maka: demo")
    table = [line for line in md.splitlines() if line.startswith("| **claude**")]
    assert len(table) == 1
    assert "3/4 = 75.0%" in table[0] and "[0.6%, 100.0%]" in table[0] and "3/5 = 60.0%" in table[0]
    header = next(line for line in md.splitlines() if line.startswith("| subject"))
    assert header.count("|") == table[0].count("|")
    assert "`infra_failure`" in header and "`policy_denied`" not in header  # only classes present
    assert "broken: passes with nop" in md and "broken: oracle fails" in md
    assert "<script" not in md


def test_terminal_lines_are_fixed_width(cohort: tuple[Path, list[dict[str, Any]]]) -> None:
    _, records = cohort
    lines = terminal_lines(records)
    header, rule, *rest = lines
    rows = rest[:3]
    assert [r.split()[0] for r in rows] == ["claude", "nop", "oracle"]
    assert "3/4 = 75.0%" in rows[0] and "3/5 = 60.0%" in rows[0]
    # columns line up: every column starts where the header's does
    for name in ("cells", "official pass rate", "95% CI", "strict pass rate"):
        col = header.index(name)
        assert all(r[col - 1] == " " for r in rows)
    assert len(rule) >= len(header.rstrip())
    assert any("task health" in line for line in lines)
    assert terminal_lines([]) == []


def test_views_are_written_atomically(cohort: tuple[Path, list[dict[str, Any]]]) -> None:
    out, records = cohort
    (out / "report.html").write_text("old")
    write_views(out, records, cohort="demo")
    write_views(out, records, cohort="demo")
    assert not [p for p in os.listdir(out) if p.endswith(".tmp")]
    assert (out / "report.html").read_text().startswith("<!DOCTYPE html>")


def test_empty_cohort_renders(tmp_path: Path) -> None:
    paths = write_views(tmp_path, [], cohort="empty")
    assert "no cells" in paths["html"].read_text() and page_json(paths["html"].read_text())["cells"] == []
    assert "**0** cells" in paths["markdown"].read_text()


def test_ten_thousand_cells_stay_bounded(tmp_path: Path) -> None:
    """Every row is there and the page stays small (its speed is bench/report_scale.py's)."""
    statuses = list(Status)
    records = []
    for i in range(10_000):
        rec = make_record(
            None,
            f"task-{i // 20:04d}",
            f"subject-{i % 4}",
            statuses[i % len(statuses)],
            rep=(i // 4) % 5 + 1,
            score=float(i % 2),
            error={"type": "X", "message": "m" * 50},
        )
        rec["artifacts"]["agent_log"] = "missing.log"
        records.append(rec)
    html = write_views(tmp_path, records, cohort="big")["html"].read_text(encoding="utf-8")
    assert len(rows(html)) == 10_000
    assert len(html.encode()) < 15 * 1024 * 1024


def test_drill_down_has_trajectory_diff_claim_and_instruction(tmp_path: Path) -> None:
    rec = make_record(
        tmp_path,
        "t",
        "a",
        S.AGENT_FAILURE,
        agent_log="ran\n",
        verifier_log="1 failed\n",
        subject_claim={"status": "complete"},
    )
    base = tmp_path / rec["artifacts"]["dir"]
    steps = [
        {
            "step_id": i,
            "source": "agent",
            "message": f"step {i}",
            "tool_calls": [{"function_name": "bash", "arguments": {"command": f"echo {i}"}}],
            "observation": {"results": [{"content": f"out {i}"}]},
        }
        for i in range(1, 41)
    ]
    (base / "trajectory.json").write_text(json.dumps({"steps": steps}))
    (base / "workspace.diff").write_text("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n+new\n")
    (base / "instruction.md").write_text("Fix the <thing>.\n")
    rel = rec["artifacts"]["dir"]
    rec["artifacts"].update(
        trajectory=f"{rel}/trajectory.json", diff=f"{rel}/workspace.diff", instruction=f"{rel}/instruction.md"
    )
    html = write_views(tmp_path, [rec], cohort="demo")["html"].read_text(encoding="utf-8")
    details = page_json(html, "maka-details")
    d = details["cells"]["0"]
    assert d["verdict"]["status"] == "agent_failure" and d["verdict"]["passed"] is False
    assert json.loads(d["claim"]) == {"status": "complete"}
    assert d["diff"].endswith("+new\n") and d["ver"] == [["verifier output", "1 failed\n"]]
    traj = d["traj"]
    assert traj["total"] == 40 and traj["omitted"] == 15 and len(traj["steps"]) == 25
    assert traj["steps"][0] == {
        "id": 1,
        "src": "agent",
        "msg": "step 1",
        "calls": [["bash", '{"command": "echo 1"}']],
        "obs": ["out 1"],
    }
    assert traj["steps"][-1]["id"] == 40
    assert details["instructions"] == {"0": "Fix the <thing>.\n"}
    assert "<thing>" not in html  # escaped inside the JSON block


def test_text_budget_spends_on_failures_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("pytest_maka.report.details.TEXT_BUDGET", 3000)
    assert TEXT_BUDGET > 3000
    records = [
        make_record(tmp_path, f"t{i}", "a", S.AGENT_SUCCESS if i % 2 else S.AGENT_FAILURE, agent_log="x" * 1000 + "\n")
        for i in range(8)
    ]
    html = write_views(tmp_path, records, cohort="demo")["html"].read_text(encoding="utf-8")
    by_cls = {}
    for row in rows(html):
        by_cls.setdefault(row["cls"], []).append(row["detail"])
    assert by_cls["agent_failure"][:3] == [1, 1, 1]  # failures got their text
    assert set(by_cls["agent_success"]) == {2}  # passes were withheld (links only)
