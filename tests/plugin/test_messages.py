"""Every failure says why where the user looks: the terminal, in-process, in a subprocess and under -n 2."""

from __future__ import annotations

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
    if how == "inprocess":
        result = cohort.run()
    else:
        result = cohort.run_subprocess(*(["-n", "2"] if how == "xdist" else []))
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
