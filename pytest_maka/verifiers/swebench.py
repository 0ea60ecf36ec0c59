"""SWE-bench's grading, run after the subject stopped, in the subject's own container.

1. prepare (``/tests/prepare.sh``, git hooks off): take the subject's change in /testbed as
   a diff against ``base_commit`` (kept as ``verifier/agent.patch``), reset the tree to the
   base commit, re-apply that diff, reset the files the test patch touches, apply the test patch;
2. run the instance's ``eval_script`` or the adapter's test command; its exit code is measured
   by the executor, out of the tests' reach;
3. parse the log and grade as SWE-bench does: resolved iff every FAIL_TO_PASS test passes
   (PASSED/XFAIL) and every PASS_TO_PASS test still passes (PASSED/XFAIL/SKIPPED); a test
   missing from the log counts as failed.

A log that shows no failing test while the test command failed does not resolve (forged or
broken output); nor does a log with no test result at all (a change that stops pytest before
collection: the SWE-bench harness counts it unresolved, and the subject's change is what ran).
A test patch that does not apply to the base commit gives no verdict (the subject cannot
change the base commit).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any, ClassVar

from ..core.task import TESTS_DIR, Task
from ..executors.base import ExecResult, Sandbox
from . import parsers
from .base import Verdict, VerifierBase, VerifyContext
from .swebench_prepare import PREPARE_SH
from .testlog import read_log

#: Exit codes of prepare.sh.
EMPTY_PATCH, AGENT_PATCH_FAILED, TEST_PATCH_FAILED = 10, 11, 12
F2P_OK = frozenset({parsers.PASSED, parsers.XFAIL})
P2P_OK = frozenset({parsers.PASSED, parsers.XFAIL, parsers.SKIPPED})
PREPARE_STATE = "verifier-prepare.json"


def _split(tests: list[str], results: dict[str, str], ok: frozenset[str]) -> dict[str, list[str]]:
    success = [t for t in tests if results.get(t) in ok]
    return {"success": success, "failure": [t for t in tests if results.get(t) not in ok]}


class SweBenchVerifier(VerifierBase):
    """Grading ``swe-bench``; its options are filled by the SWE-bench adapter."""

    name: ClassVar[str] = "swe-bench"
    #: The repository's own tests import the repository from the workdir (docs/security.md).
    imports_workdir: ClassVar[bool] = True

    def tests_payload(self, task: Task, scratch: Path) -> Path | None:
        opts = task.grading_options
        dest = scratch / "swe-bench-tests"
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        (dest / "prepare.sh").write_text(PREPARE_SH, encoding="utf-8")
        (dest / "test.patch").write_text(opts["test_patch"], encoding="utf-8")
        (dest / "test_files.txt").write_text("".join(f"{f}\n" for f in opts["test_patch_files"]), encoding="utf-8")
        script = opts.get("eval_script") or f"cd {task.workdir}\n{opts['test_cmd']}\n"
        (dest / "run_tests.sh").write_text(script, encoding="utf-8")
        return dest

    def run(self, sandbox: Sandbox, task: Task, ctx: VerifyContext) -> ExecResult:
        started = time.monotonic()
        d = ctx.attempt_dir
        prep = ctx.run(
            sandbox,
            f"bash {TESTS_DIR}/prepare.sh {task.grading_options['base_commit']} {task.workdir}",
            cwd=task.workdir,
            stdout_path=d / "verifier-prepare.stdout.txt",
            stderr_path=d / "verifier-prepare.stderr.txt",
            network=False,
        )
        (d / PREPARE_STATE).write_text(json.dumps({"exit_code": prep.exit_code, "timed_out": prep.timed_out}))
        if prep.timed_out or prep.exit_code != 0:
            shutil.copyfile(d / "verifier-prepare.stdout.txt", ctx.stdout_path)
            shutil.copyfile(d / "verifier-prepare.stderr.txt", ctx.stderr_path)
            return prep
        left = None if ctx.timeout_sec is None else max(0.001, ctx.timeout_sec - (time.monotonic() - started))
        result = ctx.run(sandbox, f"bash {TESTS_DIR}/run_tests.sh", cwd=task.workdir, timeout_sec=left)
        return ExecResult(
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            duration_s=time.monotonic() - started,
            stdout_truncated=result.stdout_truncated,
            stderr_truncated=result.stderr_truncated,
        )

    def grade(self, task: Task, result: ExecResult, ctx: VerifyContext) -> Verdict:
        opts = task.grading_options
        state_file = ctx.attempt_dir / PREPARE_STATE
        prep = json.loads(state_file.read_text()) if state_file.is_file() else {"exit_code": None}
        code = prep["exit_code"]
        details: dict[str, Any] = {"patch_exists": code != EMPTY_PATCH, "patch_successfully_applied": False}
        if code == EMPTY_PATCH:
            details["reason"] = (
                f"empty patch: {task.workdir} has no change against the base commit "
                "(the subject made none, or its patch did not apply)"
            )
            return Verdict(passed=False, score=0.0, rewards={"resolved": 0.0}, source="swe-bench", details=details)
        if code == AGENT_PATCH_FAILED:
            details["reason"] = "the subject's change could not be taken as a patch on the base commit: " + _tail(
                ctx.attempt_dir / "verifier-prepare.stdout.txt"
            )
            return Verdict(passed=False, score=0.0, rewards={"resolved": 0.0}, source="swe-bench", details=details)
        if code == TEST_PATCH_FAILED:
            return Verdict(passed=None, error="the test patch does not apply to the base commit", details=details)
        if code != 0:
            why = "timed out" if prep.get("timed_out") else f"exited with code {code}"
            return Verdict(passed=None, error=f"the SWE-bench preparation step {why}", details=details)
        details["patch_successfully_applied"] = True
        name = opts.get("log_parser") or "pytest"
        parse = parsers.get(name)
        if parse is None:
            return Verdict(passed=None, error=f"no test-log parser named {name!r}", details=details)
        results = parse(read_log(ctx))
        details.update(parser=name, test_exit_code=result.exit_code)
        if not results:  # as SWE-bench grades it: every FAIL_TO_PASS test is missing, so unresolved
            details["resolved"] = False
            details["reason"] = (
                f"the {name!r} parser found no test result in the test log (exit code {result.exit_code}): "
                "the tests did not run (e.g. the change stops pytest before collection); unresolved, as in SWE-bench"
            )
            return Verdict(passed=False, score=0.0, rewards={"resolved": 0.0}, source="swe-bench", details=details)
        status = {
            "FAIL_TO_PASS": _split(opts["fail_to_pass"], results, F2P_OK),
            "PASS_TO_PASS": _split(opts["pass_to_pass"], results, P2P_OK),
        }
        details["tests_status"] = status
        failing = [t for t, s in results.items() if s in (parsers.FAILED, parsers.ERROR)]
        resolved = not status["FAIL_TO_PASS"]["failure"] and not status["PASS_TO_PASS"]["failure"]
        if result.exit_code not in (0, None) and not failing:
            resolved = False
            details["reason"] = (
                f"the log shows no failing test but the test command exited with code {result.exit_code} "
                "(forged or broken test output)"
            )
        elif not resolved:
            f2p, p2p = status["FAIL_TO_PASS"]["failure"], status["PASS_TO_PASS"]["failure"]
            details["reason"] = f"{len(f2p)} FAIL_TO_PASS and {len(p2p)} PASS_TO_PASS test(s) fail: " + ", ".join(
                (f2p + p2p)[:5]
            )
        details["resolved"] = resolved
        score = 1.0 if resolved else 0.0
        return Verdict(passed=resolved, score=score, rewards={"resolved": score}, source="swe-bench", details=details)


def _tail(path: Path, limit: int = 300) -> str:
    text = path.read_text(encoding="utf-8", errors="replace").strip() if path.is_file() else ""
    lines = [line for line in text.splitlines() if line.startswith("maka:")]
    return (lines[-1].removeprefix("maka: ") if lines else text[-limit:]) or "no output"
