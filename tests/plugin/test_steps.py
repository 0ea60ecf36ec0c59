"""Multi-step tasks (Harbor ``steps/``) end to end in the bubblewrap sandbox: one cell, one
environment, one subject run per step, early stop, mean/final scores, per-step records."""

from __future__ import annotations

import json
import re

import pytest

from ..conftest import Cohort, needs_bwrap
from ..steps_helpers import copy_greeting, write_steps_task

pytestmark = [pytest.mark.sandbox, needs_bwrap]

NO_RETRY = {"infra": 0, "backoff_sec": 0}


def command(name: str, cmd: str) -> dict[str, object]:
    return {"name": name, "kind": "command", "command": cmd}


def by_name(record: dict) -> dict[str, dict]:
    return {s["name"]: s for s in record["steps"]}


def test_harbor_written_task_oracle_passes_each_step_and_nop_stops_at_min_reward(cohort: Cohort) -> None:
    copy_greeting(cohort.tasks / "two-step-greeting")
    cohort.write()
    result = cohort.run()
    result.assert_outcomes(passed=1, failed=1)
    oracle, nop = (cohort.results()[f"two-step-greeting[{s}-r0]"] for s in ("oracle", "nop"))

    # The oracle ran each step's own solution; step 2's workdir/ (template, setup.sh) arrived
    # before it, setup.sh ran in the workdir, and step 1's file was still there.
    assert (oracle["status"], oracle["passed"], oracle["score"]) == ("agent_success", True, 1.0)
    assert [(s["index"], s["name"], s["run"], s["status"], s["verdict"]) for s in oracle["steps"]] == [
        (1, "write-name", True, "agent_success", "passed"),
        (2, "greet", True, "agent_success", "passed"),
    ]
    assert oracle["verifier"]["strategy"] == "mean" and oracle["verifier"]["steps_run"] == 2
    for step in oracle["steps"]:
        assert step["subject"]["exit_code"] == 0 and step["subject"]["timed_out"] is False
        assert step["subject"]["timeout_sec"] == 600.0 and step["rewards"] == {"reward": 1.0}
        assert step["duration_s"] > 0 and {"agent", "verify"} <= set(step["timings"])
        instruction = (cohort.out / step["artifacts"]["instruction"]).read_text()
        assert instruction.startswith("Write the name" if step["index"] == 1 else "Read the name")
        assert (cohort.out / step["artifacts"]["verifier_output"]).exists()
    assert "/steps/greet" in by_name(oracle)["greet"]["artifacts"]["dir"]

    # nop: step 1 fails its min_reward gate, step 2 never runs and is recorded as such.
    assert (nop["status"], nop["passed"], nop["score"]) == ("agent_failure", False, 0.0)
    first, second = nop["steps"]
    assert (first["verdict"], first["min_reward"], first["rewards"]) == ("failed", 1.0, {"reward": 0.0})
    assert second == {
        "index": 2,
        "name": "greet",
        "run": False,
        "status": None,
        "not_run": "step 'write-name': reward = 0, below min_reward 1",
    }
    why = "the verifier rejected the result: step 1 of 2 ('write-name') failed; 1 step(s) not run"
    assert nop["error"]["message"] == why
    assert nop["verifier"]["stopped"] == second["not_run"]
    assert not (cohort.out / nop["artifacts"]["dir"] / "steps" / "greet").exists()

    # The report shows the steps inside each cell's drill-down, and summary.md lists them.
    html = (cohort.out / "report.html").read_text()
    details = json.loads(re.search(r'<script type="application/json" id="maka-details">(.*?)</script>', html, re.S)[1])
    rows = [r for d in details["cells"].values() for r in d["steps"]]
    not_run = "not run: step 'write-name': reward = 0, below min_reward 1"
    assert [2, "greet", "not run", "", None, None, "", not_run] in rows
    assert [2, "greet", "agent_success", "passed", 1.0] in [r[:5] for r in rows]
    summary = (cohort.out / "summary.md").read_text()
    assert "### Multi-step cells (2)" in summary
    assert "| 2 | greet | agent\\_success | passed | 1.0 |" in summary


def test_mean_and_final_strategies_score_the_same_steps_differently(cohort: Cohort) -> None:
    steps = [{"name": "alpha"}, {"name": "beta"}]
    write_steps_task(cohort.tasks, "by-mean", steps)  # mean is the default
    write_steps_task(cohort.tasks, "by-final", steps, strategy="final")
    # Solves the second step only (the instruction says which step it is).
    second_only = 'case "$MAKA_INSTRUCTION" in *beta*) echo beta > /app/beta.txt;; esac'
    cohort.write(subjects=[command("second-only", second_only)])
    cohort.run().assert_outcomes(passed=1, failed=1)
    mean, final = (cohort.results()[f"{t}[second-only-r0]"] for t in ("by-mean", "by-final"))
    assert [s["verdict"] for s in mean["steps"]] == ["failed", "passed"]
    assert (mean["status"], mean["score"], mean["verifier"]["rewards"]) == ("agent_failure", 0.5, {"reward": 0.5})
    assert mean["error"]["message"].endswith("step 1 of 2 ('alpha') failed")
    assert (final["status"], final["score"], final["verifier"]["strategy"]) == ("agent_success", 1.0, "final")


def test_a_later_step_never_sees_earlier_hidden_tests_and_planted_rewards_do_not_pass(cohort: Cohort) -> None:
    write_steps_task(cohort.tasks, "hidden", [{"name": "first"}, {"name": "second"}])
    probe = (
        "if [ -e /tests ]; then echo tests:present; else echo tests:absent; fi; "
        "if [ -e /logs/verifier/reward.txt ]; then echo reward:present; else echo reward:absent; fi; "
        "mkdir -p /logs/verifier /tests; echo 1 > /logs/verifier/reward.txt; "
        "printf '#!/bin/sh\\necho 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh; "
        "echo 1 > /app/reward.txt"
    )
    cohort.write(subjects=[command("forger", probe)])
    cohort.run().assert_outcomes(failed=1)
    record = cohort.results()["hidden[forger-r0]"]
    assert record["status"] == "agent_failure" and record["passed"] is False
    assert [s["verdict"] for s in record["steps"]] == ["failed", "failed"], "a planted reward or test.sh never counts"
    second = by_name(record)["second"]
    out = (cohort.out / second["artifacts"]["agent_log"]).read_text()
    assert "tests:absent" in out and "reward:absent" in out, out


def test_setup_failure_before_any_subject_run_is_infra_after_one_it_is_the_subject_s(cohort: Cohort) -> None:
    write_steps_task(cohort.tasks, "broken-setup", [{"name": "a", "setup": "echo no >&2; exit 3\n"}, {"name": "b"}])
    # Step b's setup refuses what a subject may leave behind in step a.
    write_steps_task(cohort.tasks, "guarded", [{"name": "a"}, {"name": "b", "setup": "test ! -e /app/poison\n"}])
    poisoner = 'case "$MAKA_INSTRUCTION" in *a.txt*) echo a > /app/a.txt; touch /app/poison;; esac'
    cohort.write(retries=NO_RETRY, subjects=[{"name": "oracle", "kind": "oracle"}, command("poisoner", poisoner)])
    cohort.run()
    results = cohort.results()
    broken = results["broken-setup[oracle-r0]"]
    assert broken["status"] == "infra_failure"
    assert broken["error"]["message"] == "step 'a': setup.sh exited with code 3"
    assert [s["run"] for s in broken["steps"]] == [True, False]
    setup_err = cohort.out / broken["steps"][0]["artifacts"]["setup_stderr"]
    assert setup_err.read_text().strip() == "no"
    assert "agent_log" not in broken["steps"][0]["artifacts"], "the subject never started"

    assert results["guarded[oracle-r0]"]["status"] == "agent_success"
    poisoned = results["guarded[poisoner-r0]"]
    assert poisoned["status"] == "agent_failure" and poisoned["official"] is True
    assert poisoned["error"]["message"] == (
        "not verified: step 'b': setup.sh exited with code 1 (after the subject's earlier steps)"
    )
    assert [(s["verdict"], s["score"]) for s in poisoned["steps"]] == [("passed", 1.0), ("failed", 0.0)]
    assert poisoned["score"] == 0.5


def test_oracle_uses_the_task_solution_for_a_step_without_one_and_is_skipped_without_any(cohort: Cohort) -> None:
    write_steps_task(
        cohort.tasks,
        "fallback",
        [{"name": "a"}, {"name": "b", "no_solution": True}],
        top_solution="echo b > /app/b.txt\n",
    )
    write_steps_task(cohort.tasks, "unsolvable", [{"name": "a"}, {"name": "b", "no_solution": True}])
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}])
    result = cohort.run("-rs")
    result.assert_outcomes(passed=1, skipped=1)
    assert cohort.status() == {"fallback[oracle-r0]": "agent_success"}
    result.stdout.fnmatch_lines(["SKIPPED*the task has no reference solution*"])


def test_per_step_timeouts_and_verifier_env_apply_to_their_step_only(cohort: Cohort) -> None:
    check_env = '#!/bin/bash\n. /tests/common.sh\nreward "$STEP_KEY" "second"\n'
    write_steps_task(
        cohort.tasks,
        "timed",
        [
            {"name": "first", "agent_timeout": 1.0},
            {"name": "second", "test": check_env, "verifier_env": {"STEP_KEY": "second"}},
        ],
    )
    slow_first = 'case "$MAKA_INSTRUCTION" in *first*) echo first > /app/first.txt; sleep 30;; esac'
    cohort.write(subjects=[command("slow-first", slow_first)])
    cohort.run().assert_outcomes(passed=1)
    record = cohort.results()["timed[slow-first-r0]"]
    first, second = record["steps"]
    # The step timed out yet its verifier ran and passed: its verdict stands (as for one step).
    assert (first["subject"]["timed_out"], first["subject"]["timeout_sec"], first["verdict"]) == (True, 1.0, "passed")
    assert (second["subject"]["timed_out"], second["subject"]["timeout_sec"]) == (False, 30.0)
    assert second["verdict"] == "passed", "the step's verifier env reached its test.sh"
    assert record["budget"]["steps"][0]["agent_timeout_sec"] == 1.0


def test_steps_under_xdist_keep_every_step(cohort: Cohort) -> None:
    copy_greeting(cohort.tasks / "two-step-greeting")
    write_steps_task(cohort.tasks, "pair", [{"name": "a", "min_reward": 1.0}, {"name": "b"}])
    cohort.write()
    result = cohort.run_subprocess("-n", "2")
    result.assert_outcomes(passed=2, failed=2)
    for cell_id, record in cohort.results().items():
        assert len(record["steps"]) == 2, cell_id
        ran = [s["run"] for s in record["steps"]]
        assert ran == ([True, True] if "oracle" in cell_id else [True, False]), cell_id


def test_token_budget_covers_all_steps_together(cohort: Cohort) -> None:
    write_steps_task(cohort.tasks, "thrifty", [{"name": "a"}, {"name": "b"}, {"name": "c"}])
    # Each step solves its part and reports 60 tokens: under the cell's 100 alone, over it by step 2.
    solve = (
        'n=$(echo "$MAKA_INSTRUCTION" | sed -n "s/^Write \\([a-z]*\\) to.*/\\1/p"); echo $n > /app/$n.txt; '
        'echo \'{"input_tokens": 50, "output_tokens": 10}\' > /logs/agent/usage.json'
    )
    cohort.write(subjects=[command("spender", solve)], budgets={"max_tokens": 100})
    cohort.run().assert_outcomes(failed=1)
    record = cohort.results()["thrifty[spender-r0]"]
    # the tokens are the subject's own report: the steps it did not get to are its failure (issue 22)
    assert record["status"] == "agent_failure" and record["official"] is True
    assert record["error"]["message"].endswith("over max_tokens by its own report")
    assert (record["usage"]["input_tokens"], record["usage"]["output_tokens"]) == (100, 20)
    ran = [(s["run"], s.get("verdict")) for s in record["steps"]]
    assert ran == [(True, "passed"), (True, "passed"), (False, None)]
    assert record["steps"][2]["not_run"] == "the cell's max_tokens budget was spent by step 'b'"
    assert record["steps"][0]["subject"]["usage"]["input_tokens"] == 50


#: A step's test: reward 1 iff the collect hook, run just before it, named this step's file.
COLLECTED_TEST = (
    "#!/bin/bash\nmkdir -p /logs/verifier\n"
    'if [ "$(cat /app/collected.txt)" = {name} ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n'
)
#: The newest step file (``<step>.txt``) by name, written where the step's test reads it.
COLLECT_HOOK = (
    "[[verifier.collect]]\n"
    'command = "ls /app | grep -v collected | sort | tail -1 | xargs basename -s .txt > /app/collected.txt"\n'
)


def test_collect_hooks_run_before_each_step_s_shared_verifier(cohort: Cohort) -> None:
    # The one step body: a step verified in the subject's environment gets the task's
    # [[verifier.collect]] hooks first, as a single-step task does; each step's test passes
    # only when the hook ran after that step's subject.
    steps = [{"name": n, "test": COLLECTED_TEST.replace("{name}", n)} for n in ("a-one", "b-two")]
    write_steps_task(cohort.tasks, "hooked-steps", steps, extra_toml=COLLECT_HOOK)
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}])
    cohort.run().assert_outcomes(passed=1)
    record = cohort.results()["hooked-steps[oracle-r0]"]
    assert [(s["name"], s["verdict"]) for s in record["steps"]] == [("a-one", "passed"), ("b-two", "passed")]
