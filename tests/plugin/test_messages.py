"""Every failure says why where the user looks: the terminal, in-process, in a subprocess and under -n 2."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import Cohort, needs_bwrap

pytestmark = [pytest.mark.sandbox, needs_bwrap]

KEY = "tail-secret-7c1e94ab20"

BROKEN_VERIFIER = "python3 -c 'import maka_no_such_module_q'\necho never-reached-verifier-line\n"


def command(name: str, cmd: str, **extra: object) -> dict[str, object]:
    return {"name": name, "kind": "command", "command": cmd, **extra}


@pytest.mark.parametrize("how", ["inprocess", "subprocess", "xdist"])
def test_a_broken_verifier_shows_its_stderr_in_the_terminal(cohort: Cohort, how: str) -> None:
    cohort.task("broken", test=BROKEN_VERIFIER)
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}])
    workers = ["-n", "2"] if how == "xdist" else []
    result = cohort.run() if how == "inprocess" else cohort.run_subprocess(*workers)
    assert cohort.status() == {"broken[oracle-r0]": "verifier_failure"}
    out = result.stdout.str()
    assert "  verifier stderr (last " in out, out
    assert "    | ModuleNotFoundError: No module named 'maka_no_such_module_q'" in out
    assert "  verifier stdout (last 1 lines of out/cells/" in out or "verifier stdout (last 1 lines of" in out
    assert "    | never-reached-verifier-line" in out


def test_an_incomplete_cell_shows_the_agents_output_before_the_verifiers(cohort: Cohort) -> None:
    cohort.task("t", test="echo 0 > /logs/verifier/reward.txt; echo graded-zero\n")
    noisy = "for i in $(seq 1 30); do echo agent-line-$i >&2; done; echo agent-out; exit 3"
    cohort.write(subjects=[command("crasher", noisy)])
    result = cohort.run()
    assert cohort.status() == {"t[crasher-r0]": "agent_incomplete"}
    out = result.stdout.str()
    agent = out.index("  agent stderr (last 12 lines of ")
    assert out.index("  agent stdout (last 1 lines of ") > agent
    assert out.index("  verifier stdout (last 1 lines of ") > agent
    assert "    | agent-line-30" in out and "    | agent-line-19" in out
    assert "agent-line-18\n" not in out, "only the last lines are shown"
    assert "    | graded-zero" in out


def test_a_failed_cells_tails_are_redacted(cohort: Cohort, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAKA_TAIL_KEY", KEY)
    cohort.task("t", test="cat /app/leak.txt >&2; echo 0 > /logs/verifier/reward.txt\n")
    cohort.write(subjects=[command("leaker", 'echo "key is $MAKA_TAIL_KEY" > /app/leak.txt', env=["MAKA_TAIL_KEY"])])
    result = cohort.run_subprocess()
    assert cohort.status() == {"t[leaker-r0]": "agent_failure"}
    out = result.stdout.str()
    assert "    | key is [REDACTED]" in out, out
    assert KEY not in out + result.stderr.str()


def test_a_passing_cell_shows_no_tails(cohort: Cohort) -> None:
    cohort.task("t")
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}])
    result = cohort.run()
    assert "verifier stderr (last" not in result.stdout.str()


def test_a_dropped_task_is_exit_9_and_never_keeps_0(cohort: Cohort) -> None:
    cohort.task("good")
    typo = cohort.task("typo") / "task.toml"
    typo.write_text(typo.read_text().replace("[agent]\n", "[agnet]\n"))
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}])
    result = cohort.run()
    assert result.ret == 9
    assert "maka: exit code 9: the results do not cover every selected cell" in result.stdout.str()
    assert cohort.status() == {"good[oracle-r0]": "agent_success"}
    assert cohort.run("--maka-exit=never").ret == 0
    assert cohort.run("-k", "good").ret == 0, "a run whose selection left the invalid task out is complete"


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (
            "subjects: [{name: a, kind: clade-code}]\n",
            "cohort.yaml: subjects[0].kind: unknown subject kind 'clade-code'; did you mean 'claude-code'? "
            "expected one of: acp, ",
        ),
        (
            "subjects: [{name: a, kind: oracle}]\nexecutor: {kind: dokcer}\n",
            "cohort.yaml: executor.kind: unknown executor kind 'dokcer'; did you mean 'docker'? expected one of: ",
        ),
        (
            "subjects: [{name: a, kind: oracle}]\n",
            "cohort.yaml: tasks[0].format: unknown format 'harbour'; did you mean 'harbor'? expected one of: harbor",
        ),
    ],
)
def test_an_unknown_kind_or_format_gets_did_you_mean(cohort: Cohort, entry: str, expected: str) -> None:
    cohort.task("one")
    fmt = "format: harbour" if "format" in expected else ""
    cohort.spec.write_text(f"name: t\ntasks: [{{path: tasks{', ' + fmt if fmt else ''}}}]\n{entry}")
    result = cohort.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert len(errors) == 1 and expected in errors[0], errors


def test_a_spec_given_as_a_path_gets_a_hint(cohort: Cohort) -> None:
    cohort.task("one")
    cohort.write()
    for result in (cohort.pytester.runpytest("cohort.yaml"), cohort.pytester.runpytest_subprocess("cohort.yaml")):
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        assert (
            "ERROR: cohort.yaml looks like a pytest-maka cohort spec: run it with pytest --maka-spec=cohort.yaml"
            in result.stderr.str()
        )
    assert not cohort.out.exists()
    other = cohort.root / "other.yaml"
    other.write_text("name: not a cohort\nitems: [1]\n")
    assert "looks like a pytest-maka cohort spec" not in cohort.pytester.runpytest("other.yaml").stderr.str()


def _maka(*args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("maka")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "pytest_maka.cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=120)


def test_maka_help_says_how_to_run_a_cohort() -> None:
    helped = _maka("--help")
    assert helped.returncode == 0
    assert "to run a cohort (a spec YAML: tasks x subjects x repetitions), use pytest:" in helped.stdout
    assert "pytest --maka-spec=cohort.yaml " in helped.stdout and "--maka-rerun" in helped.stdout
    bare = _maka()
    assert bare.returncode == 2 and "pytest --maka-spec=cohort.yaml" in bare.stderr
    spec = _maka("cohort.yaml")
    assert spec.returncode == 2
    assert spec.stderr == "maka: error: maka does not run cohorts; run it with: pytest --maka-spec=cohort.yaml\n"


def _facts(html: str) -> list[tuple[str, str]]:
    """The report header's facts, but the time the page was generated."""
    return [(k, v) for k, v in re.findall(r"<dt>(.*?)</dt>\s*<dd[^>]*>(.*?)</dd>", html, re.S) if k != "generated"]


def test_maka_report_keeps_the_run_details_of_the_original_report(cohort: Cohort) -> None:
    cohort.task("t")
    cohort.write()
    cohort.run()
    original = (cohort.out / "report.html").read_text(encoding="utf-8")
    (cohort.out / "report.html").unlink()
    proc = _maka("report", str(cohort.out))
    assert proc.returncode == 0, proc.stderr
    rebuilt = (cohort.out / "report.html").read_text(encoding="utf-8")
    facts = dict(_facts(original))
    assert {"spec", "executor", "argv", "versions"} <= set(facts), facts
    assert _facts(rebuilt) == _facts(original)
    (cohort.out / "lock.json").unlink()
    proc = _maka("report", str(cohort.out))
    assert proc.returncode == 0
    assert proc.stderr == f"maka: note: no lock.json in {cohort.out}: the report has no run details\n"


@pytest.fixture
def silent_registry() -> Iterator[str]:
    """An npm registry that accepts connections and never answers (npm gives up after its fetch timeout)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    yield f"http://127.0.0.1:{server.getsockname()[1]}/"
    server.close()


@pytest.mark.parametrize("how", ["inprocess", "xdist"])
def test_an_agent_being_installed_gets_a_line(
    cohort: Cohort, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, silent_registry: str, how: str
) -> None:
    monkeypatch.setenv("npm_config_registry", silent_registry)
    monkeypatch.setenv("npm_config_fetch_retries", "0")
    monkeypatch.setenv("npm_config_fetch_timeout", "4000")
    cache = tmp_path / "agents"
    cohort.task("t")
    agent = {"name": "claude", "kind": "claude-code", "cache_dir": str(cache), "set_env": {"ANTHROPIC_API_KEY": "x"}}
    cohort.write(subjects=[agent], retries={"infra": 0})
    live = ("--maka-live", "plain")
    result = cohort.run(*live) if how == "inprocess" else cohort.run_subprocess("-n", "2", *live)
    lines = [line for line in result.outlines if line.startswith("maka: installing agent ")]
    assert len(lines) == 1, result.stdout.str()
    assert re.fullmatch(
        rf"maka: installing agent @anthropic-ai/claude-code@\S+ into {re.escape(str(cache))} "
        rf"\(first use only; log: {re.escape(str(cache))}/claude-code-\S+\.log\)",
        lines[0],
    ), lines[0]
    assert cohort.status() == {"t[claude-r0]": "infra_failure"}, "no registry: the install failed"


@pytest.mark.parametrize("mode", ["plain", "tty"])
def test_the_progress_line_under_xdist_ticks_while_no_report_comes_and_fits_the_width(
    cohort: Cohort, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    for name in ("first", "second"):
        cohort.task(name)
    sleeper = {"name": "a-subject-with-a-long-name", "kind": "command", "command": "sleep 6; echo > /app/done.txt"}
    cohort.write(subjects=[sleeper])
    result = cohort.run_subprocess("-n", "2", "--maka-live", mode, "--maka-live-interval", "1")
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    waiting = re.findall(r"maka: 0/2 done, 2 running, 0 queued[^\n\x1b]*", out)
    assert len(waiting) >= 2, f"the view must tick while both cells run and no report came:\n{out}"
    if mode == "tty":  # drawn in place: every line fits the terminal (a wrapped one breaks the cursor moves)
        status = re.findall(r"maka: \d/2 done[^\n\x1b]*|  (?:first|second)\[[^\n\x1b]*", out)
        assert status and all(len(line) <= 59 for line in status), status
        assert any(line.endswith("…") for line in status), "the head line is cut to the width, not wrapped"
