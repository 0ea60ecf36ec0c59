"""SWE-bench instances on the real Docker engine: the harness's grading rules, and ours where it is sloppy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_maka.benchmarks.swebench import adapter as swebench
from tests.adapters.conftest import DATASETS, docker_executor
from tests.conftest import Cohort

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_engine")]

INSTANCE: dict[str, Any] = json.loads((DATASETS / "swe-bench" / "instances.jsonl").read_text())
IID = INSTANCE["instance_id"]
F2P, P2P = json.loads(INSTANCE["FAIL_TO_PASS"]), json.loads(INSTANCE["PASS_TO_PASS"])
BREAK_ADD = """\
diff --git a/calc/ops.py b/calc/ops.py
--- a/calc/ops.py
+++ b/calc/ops.py
@@ -2,7 +2,7 @@


 def add(a, b):
-    return a + b
+    return a - b


 def clamp(value, low, high):
"""


def write_preds(path: Path, model_patch: str | None, instance_id: str = IID) -> str:
    row: dict[str, Any] = {"instance_id": instance_id, "model_name_or_path": path.stem}
    if model_patch is not None:
        row["model_patch"] = model_patch
    path.write_text(json.dumps(row) + "\n")
    return path.name


def run(
    cohort: Cohort, subjects: list[dict[str, Any]], instance: dict[str, Any] | None = None, **source: Any
) -> dict[str, dict[str, Any]]:
    swe = DATASETS / "swe-bench"
    path = cohort.root / "instances.jsonl"
    path.write_text(json.dumps(instance or INSTANCE) + "\n")
    if not {"image"} & source.keys() and not (instance or {}).get("image"):
        source["dockerfile"] = str(swe / "env" / "Dockerfile")
    cohort.write(tasks=[{"path": path.name, **source}], subjects=subjects, executor=docker_executor(cohort.root))
    result = cohort.run()
    assert result.ret in (0, 1, 7), result.stdout.str()
    return {r["subject"]: r for r in cohort.results().values()}


def test_reference_subjects_and_predictions(cohort: Cohort) -> None:
    """oracle applies the gold patch; a predictions file is graded as the harness would grade it."""
    root = cohort.root
    subjects = [
        {"name": "oracle", "kind": "oracle"},
        {"name": "nop", "kind": "nop"},
        {"name": "gold", "kind": "patch", "predictions": write_preds(root / "gold.jsonl", INSTANCE["patch"])},
        {"name": "empty", "kind": "patch", "predictions": write_preds(root / "empty.jsonl", "")},
        {"name": "missing", "kind": "patch", "predictions": write_preds(root / "missing.jsonl", "x", "other__y-1")},
        {
            "name": "no-apply",
            "kind": "patch",
            "predictions": write_preds(
                root / "no-apply.jsonl", INSTANCE["patch"].replace("calc/ops.py", "calc/nothere.py")
            ),
        },
        {
            "name": "breaks-add",
            "kind": "patch",
            "predictions": write_preds(root / "breaks.jsonl", INSTANCE["patch"] + BREAK_ADD),
        },
    ]
    by = run(cohort, subjects)
    assert {s: r["status"] for s, r in by.items()} == {
        "oracle": "agent_success",
        "gold": "agent_success",
        "nop": "agent_failure",
        "empty": "agent_failure",
        "missing": "agent_failure",
        "no-apply": "agent_failure",
        "breaks-add": "agent_failure",
    }
    gold = by["gold"]["verifier"]
    assert gold["tests_status"] == {
        "FAIL_TO_PASS": {"success": F2P, "failure": []},
        "PASS_TO_PASS": {"success": P2P, "failure": []},
    }
    assert gold["resolved"] is True and gold["patch_successfully_applied"] is True
    agent_patch = cohort.out / by["gold"]["artifacts"]["verifier_logs"] / "agent.patch"
    assert "+    if value > high:" in agent_patch.read_text()
    for name, claim in (("empty", "empty"), ("missing", "missing"), ("no-apply", "did not apply")):
        record = by[name]
        assert record["subject_claim"]["prediction"] == claim
        assert record["verifier"]["patch_exists"] is False
        assert "empty patch: /testbed has no change" in record["error"]["message"]
    breaks = by["breaks-add"]["verifier"]
    assert breaks["tests_status"]["FAIL_TO_PASS"]["failure"] == []
    assert breaks["tests_status"]["PASS_TO_PASS"]["failure"] == ["tests/test_ops.py::test_add"]
    assert breaks["resolved"] is False
    assert "0 FAIL_TO_PASS and 1 PASS_TO_PASS test(s) fail" in by["breaks-add"]["error"]["message"]


def test_forged_passed_lines_do_not_resolve(cohort: Cohort) -> None:
    """A change that prints a fake pytest summary after the real one: the exit code gives it away."""
    lines = "\\n".join(["=== short test summary info ==="] + [f"PASSED {t}" for t in F2P + P2P])
    forge = (
        f"cat > /testbed/conftest.py <<'PY'\nimport atexit\natexit.register(lambda: print('{lines}', flush=True))\nPY\n"
    )
    by = run(cohort, [{"name": "forger", "kind": "command", "command": forge}])
    record = by["forger"]
    assert record["status"] == "agent_failure" and record["passed"] is False
    verifier = record["verifier"]
    assert verifier["test_exit_code"] == 1
    # The forged section is what a naive reader of the log would believe...
    assert verifier["tests_status"]["FAIL_TO_PASS"]["success"] == F2P
    # ...but a log with no failure and a failing test command does not resolve.
    assert "forged or broken test output" in record["error"]["message"]


def test_agent_edits_to_test_files_are_reset(cohort: Cohort) -> None:
    """Editing the tests the test patch touches (here: deleting the failing one) changes nothing."""
    cheat = "printf 'def test_clamp_upper():\\n    pass\\n' > /testbed/tests/test_ops.py"
    record = run(cohort, [{"name": "cheat", "kind": "command", "command": cheat}])["cheat"]
    assert record["status"] == "agent_failure"
    assert record["verifier"]["tests_status"]["FAIL_TO_PASS"]["failure"] == F2P


def test_test_patch_that_does_not_apply_is_a_verifier_failure(cohort: Cohort) -> None:
    broken = {**INSTANCE, "test_patch": INSTANCE["test_patch"].replace(" def test_clamp_lower():", " def nope():")}
    record = run(cohort, [{"name": "oracle", "kind": "oracle"}], broken)["oracle"]
    assert record["status"] == "verifier_failure"
    assert record["error"]["message"] == "the test patch does not apply to the base commit"


def test_a_log_without_test_results_is_unresolved(cohort: Cohort) -> None:
    """As the SWE-bench harness grades it (every FAIL_TO_PASS test missing): no verdict would let a
    change that stops pytest before collection leave the official denominator."""
    record = run(cohort, [{"name": "oracle", "kind": "oracle"}], test_cmd="echo nothing to parse")["oracle"]
    assert record["status"] == "agent_failure" and record["official"] is True
    assert "found no test result in the test log" in record["verifier"]["reason"]


def test_a_prediction_that_stops_pytest_before_collection_is_unresolved(cohort: Cohort) -> None:
    stop = (
        "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n+++ b/conftest.py\n"
        "@@ -0,0 +1,2 @@\n+import os\n+os._exit(0)\n"
    )
    predictions = write_preds(cohort.root / "stop.jsonl", stop)
    record = run(cohort, [{"name": "stop", "kind": "patch", "predictions": predictions}])["stop"]
    assert record["status"] == "agent_failure" and record["official"] is True and record["attempt_count"] == 1
    assert record["verifier"]["resolved"] is False


def test_instance_image_and_eval_script(cohort: Cohort, docker_api_client: Any) -> None:
    """SWE-bench 5 style: the image named by the instance, graded by its eval_script's delimited output."""
    context = swebench._recipe(DATASETS / "swe-bench" / "env" / "Dockerfile", swebench._fields(INSTANCE))
    tag = "pytest-maka-test/swe-calc:1"
    for chunk in docker_api_client.build(path=str(context), tag=tag, pull=False, decode=True, rm=True):
        assert "error" not in chunk, chunk
    eval_script = (
        "#!/bin/bash\ncd /testbed\n"
        "echo 'PASSED tests/test_ops.py::test_nonexistent'\n"  # outside the markers: ignored
        "echo '>>>>> Start Test Output'\n"
        "python -m pytest -rA tests/test_ops.py tests/test_clamp_range.py\n"
        "echo '>>>>> End Test Output'\n"
    )
    instance = {**INSTANCE, "image": tag, "eval_script": eval_script}
    by = run(cohort, [{"name": "oracle", "kind": "oracle"}, {"name": "nop", "kind": "nop"}], instance)
    assert by["oracle"]["status"] == "agent_success" and by["nop"]["status"] == "agent_failure"
    assert by["oracle"]["isolation"]["image"] == docker_api_client.inspect_image(tag)["Id"]
    out = (cohort.out / by["oracle"]["artifacts"]["verifier_output"]).read_text()
    assert ">>>>> Start Test Output" in out


@pytest.fixture
def docker_api_client() -> Any:
    import docker

    client = docker.APIClient(version="auto")
    yield client
    client.close()
