"""Task sources without an engine: format detection, selection, options, skips, parsers, .harborignore."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from pytest_maka.benchmarks import harbor, swebench, terminal_bench
from pytest_maka.core.errors import TaskError
from pytest_maka.verifiers import parsers
from tests.adapters.conftest import DATASETS, copy_sample
from tests.conftest import Cohort

INSTANCE = json.loads((DATASETS / "swe-bench" / "instances.jsonl").read_text().splitlines()[0])
DOCKER = {"kind": "local"}  # collection only: no cell runs in these tests


def instances(path: Path, n: int, **changes: object) -> Path:
    """``n`` copies of the sample instance (ids ``maka__calc-<i>``) in a .jsonl file."""
    rows = [{**INSTANCE, "instance_id": f"maka__calc-{i}", **changes} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def collected(result: pytest.RunResult) -> list[str]:
    return sorted(line.split("::", 1)[1] for line in result.outlines if "::" in line and "[" in line)


def test_format_detection_for_each_sample(cohort: Cohort) -> None:
    """No `format:` given: task.toml dirs are harbor, task.yaml dirs terminal-bench, .jsonl swe-bench."""
    copy_sample("harbor", cohort.root / "h")
    copy_sample("terminal-bench", cohort.root / "tb")
    copy_sample("swe-bench", cohort.root / "swe")
    cohort.write(
        tasks=[
            {"path": "h"},
            {"path": "tb"},
            {"path": "swe/instances.jsonl", "dockerfile": "swe/env/Dockerfile"},
        ],
        subjects=[{"name": "nop", "kind": "nop"}],
    )
    result = cohort.run("--collect-only", "-q")
    assert result.ret == 0, result.stdout.str()
    ids = collected(result)
    assert ids == sorted(
        [
            "sum-csv[nop-r0]",
            "greetings[nop-r0]",
            "fix-script[nop-r0]",
            "count-log-lines[nop-r0]",
            "json-config[nop-r0]",
            "maka__calc-1[nop-r0]",
        ]
    )


def test_single_legacy_task_dir_and_explicit_format(cohort: Cohort) -> None:
    copy_sample("terminal-bench", cohort.root / "tb")
    cohort.write(
        tasks=[{"path": "tb/json-config", "format": "terminal-bench"}], subjects=[{"name": "nop", "kind": "nop"}]
    )
    result = cohort.run("--collect-only", "-q")
    assert collected(result) == ["json-config[nop-r0]"]


def test_explicit_format_that_does_not_fit_is_a_usage_error(cohort: Cohort) -> None:
    copy_sample("harbor", cohort.root / "h")
    cohort.write(tasks=[{"path": "h", "format": "terminal-bench"}])
    result = cohort.run("--collect-only")
    assert result.ret == 4
    result.stderr.fnmatch_lines(
        ["*fix-script: not a task directory: expected task.yaml (terminal-bench layout)*harbor task*"]
    )


def test_mixed_directory_is_a_usage_error_naming_both(cohort: Cohort) -> None:
    copy_sample("harbor", cohort.root / "mixed")
    shutil.copytree(DATASETS / "terminal-bench" / "json-config", cohort.root / "mixed" / "json-config")
    cohort.write(tasks=[{"path": "mixed"}])
    result = cohort.run("--collect-only")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*mixed: mixes task formats (*(harbor), json-config (terminal-bench))*"])


def test_unknown_file_is_not_a_source(cohort: Cohort) -> None:
    (cohort.root / "notes.txt").write_text("hello")
    cohort.write(tasks=[{"path": "notes.txt"}])
    result = cohort.run("--collect-only")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*tasks[[]0[]].path: *notes.txt is not a task source any adapter recognises*"])


def test_include_exclude_limit_on_instances(cohort: Cohort) -> None:
    instances(cohort.root / "inst.jsonl", 6)
    cohort.write(
        tasks=[
            {
                "path": "inst.jsonl",
                "image": "calc:{instance_id}",
                "include": ["maka__calc-[1-5]"],
                "exclude": ["*-3"],
                "limit": 3,
            }
        ],
        subjects=[{"name": "nop", "kind": "nop"}],
    )
    result = cohort.run("--collect-only", "-q")
    assert collected(result) == ["maka__calc-1[nop-r0]", "maka__calc-2[nop-r0]", "maka__calc-4[nop-r0]"]


def test_include_exclude_limit_on_legacy_dirs(cohort: Cohort) -> None:
    copy_sample("terminal-bench", cohort.root / "tb")
    cohort.write(tasks=[{"path": "tb", "exclude": ["count-*"]}], subjects=[{"name": "nop", "kind": "nop"}])
    assert collected(cohort.run("--collect-only", "-q")) == ["json-config[nop-r0]"]
    cohort.write(tasks=[{"path": "tb", "limit": 1}], subjects=[{"name": "nop", "kind": "nop"}])
    assert collected(cohort.run("--collect-only", "-q")) == ["count-log-lines[nop-r0]"]


def test_unknown_adapter_option_names_the_key(cohort: Cohort) -> None:
    instances(cohort.root / "inst.jsonl", 1)
    cohort.write(tasks=[{"path": "inst.jsonl", "image": "x", "test_comand": "pytest"}])
    result = cohort.run("--collect-only")
    assert result.ret == 4
    result.stderr.fnmatch_lines(
        ["*cohort.yaml: tasks[[]0[]].test_comand: unknown key for the swe-bench format*test_cmd*"]
    )
    copy_sample("terminal-bench", cohort.root / "tb")
    cohort.write(tasks=[{"path": "tb", "hints": True}])
    result = cohort.run("--collect-only")
    result.stderr.fnmatch_lines(["*tasks[[]0[]].hints: unknown key for the terminal-bench format*"])


def test_instance_without_environment_is_a_usage_error(cohort: Cohort) -> None:
    instances(cohort.root / "inst.jsonl", 1)
    cohort.write(tasks=[{"path": "inst.jsonl"}])
    result = cohort.run("--collect-only")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*inst.jsonl: maka__calc-0: the instance has no 'image' field*dockerfile*"])


def test_instances_json_list_and_lists_or_strings(tmp_path: Path) -> None:
    """F2P/P2P as JSON strings (published data) or real lists give the same task."""
    as_lists = {
        **INSTANCE,
        "FAIL_TO_PASS": json.loads(INSTANCE["FAIL_TO_PASS"]),
        "PASS_TO_PASS": json.loads(INSTANCE["PASS_TO_PASS"]),
    }
    path = tmp_path / "inst.json"
    path.write_text(json.dumps([INSTANCE, {**as_lists, "instance_id": "other__x-2"}]))
    opts = swebench.SweBenchOptions(image="img:{swebench_id}", hints=True)
    a, b = swebench.load_instances(path, opts, tmp_path / "spec.yaml")
    assert (
        a.grading_options["fail_to_pass"]
        == b.grading_options["fail_to_pass"]
        == ["tests/test_ops.py::test_clamp_upper", "tests/test_clamp_range.py::test_clamp_range[99]"]
    )
    assert a.docker_image == "img:maka_1776_calc-1" and a.workdir == "/testbed"
    assert (
        a.instruction.startswith("`calc.clamp(value, low, high)`") and "Hints:\nOnly the upper bound" in a.instruction
    )
    assert a.grading_options["test_cmd"].endswith("tests/test_ops.py tests/test_clamp_range.py")
    assert a.grading_options["test_patch_files"] == ["tests/test_clamp_range.py", "tests/test_ops.py"]
    assert (a.solution_dir / "gold.patch").read_text() == INSTANCE["patch"]
    no_hints = swebench.load_instances(path, swebench.SweBenchOptions(image="x"), tmp_path / "s.yaml")[0]
    assert "Hints" not in no_hints.instruction and no_hints.digest != a.digest


def test_bad_test_lists_are_errors(tmp_path: Path) -> None:
    path = instances(tmp_path / "i.jsonl", 1, FAIL_TO_PASS="[not json")
    with pytest.raises(Exception, match=r"FAIL_TO_PASS: expected a list of test ids"):
        swebench.load_instances(path, swebench.SweBenchOptions(image="x"), tmp_path / "s.yaml")


def test_parquet_instances(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "inst.parquet"
    pq.write_table(pa.Table.from_pylist([INSTANCE]), path)
    (task,) = swebench.load_instances(path, swebench.SweBenchOptions(image="x"), tmp_path / "s.yaml")
    assert task.id == "maka__calc-1" and len(task.grading_options["pass_to_pass"]) == 6


def test_parquet_without_pyarrow_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now raises ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    path = tmp_path / "inst.parquet"
    path.write_bytes(b"PAR1")
    with pytest.raises(Exception, match=r"reading \.parquet files needs pyarrow: pip install pyarrow"):
        swebench.read_instances(path)


def test_legacy_task_fields(tmp_path: Path) -> None:
    task = terminal_bench.load_task(copy_sample("terminal-bench", tmp_path / "tb") / "count-log-lines")
    assert task.grading == "terminal-bench" and task.grading_options["parser"] == "pytest"
    assert (task.agent_timeout_sec, task.verifier_timeout_sec) == (120, 60)
    assert task.dockerfile == task.path / "Dockerfile" and task.environment_dir == task.path
    assert task.verifier_env == {"TEST_DIR": "/tests"} and task.workdir == "/app"
    assert task.metadata["difficulty"] == "easy" and task.metadata["tags"] == ["shell", "files"]
    assert (task.solution_dir / "solve.sh").read_text() == (task.path / "solution.sh").read_text()
    assert task.unsupported is None


def test_legacy_swebench_parser_task_loads_and_runs_with_that_parser(tmp_path: Path) -> None:
    """``parser_name: swebench`` (Terminal-Bench's SWE-bench tasks) loads as runnable with its parser."""
    tb = copy_sample("terminal-bench", tmp_path / "tb")
    task_yaml = tb / "json-config" / "task.yaml"
    task_yaml.write_text(task_yaml.read_text() + "parser_name: swebench\n")
    task = terminal_bench.load_task(tb / "json-config")
    assert task.grading_options["parser"] == "swebench" and task.unsupported is None
    assert parsers.get("swebench") is parsers.parse_swebench


def test_legacy_skips_with_reasons(cohort: Cohort) -> None:
    """solution.yaml skips the oracle only; a multi-service compose file or an unknown parser skips the task."""
    tb = copy_sample("terminal-bench", cohort.root / "tb")
    (tb / "json-config" / "solution.sh").unlink()
    (tb / "json-config" / "solution.yaml").write_text("- command: echo hi\n  block: true\n")
    compose = tb / "count-log-lines" / "docker-compose.yaml"
    compose.write_text(compose.read_text() + "  db:\n    image: postgres\n")
    shutil.copytree(tb / "json-config", tb / "odd-parser")
    task_yaml = tb / "odd-parser" / "task.yaml"
    task_yaml.write_text(task_yaml.read_text() + "parser_name: cargo\n")
    cohort.write(tasks=[{"path": "tb"}], subjects=[{"name": "oracle", "kind": "oracle"}], executor=DOCKER)
    result = cohort.run("-rs")
    assert result.ret == 9 and "3 skipped" in result.stdout.str()
    result.stdout.fnmatch_lines_random(
        [
            "SKIPPED*count-log-lines: multi-container environments*not supported on the local executor*",
            "SKIPPED*solution.yaml (tmux keystroke solutions) is not supported; the oracle needs solution.sh",
            "SKIPPED*odd-parser: no test-log parser named 'cargo'*",
        ]
    )


def test_harbor_fields_and_unsupported(tmp_path: Path) -> None:
    root = copy_sample("harbor", tmp_path / "h")
    task = harbor.load_task(root / "sum-csv")
    assert (task.docker_image, task.cpus, task.memory_mb, task.network) == ("python:3.11-slim", 1, 512, "none")
    assert harbor.load_task(root / "fix-script").network == "none"  # legacy allow_internet = false
    toml = root / "greetings" / "task.toml"
    toml.write_text(toml.read_text().replace('network_mode = "no-network"', "gpus = 1"))
    task = harbor.load_task(root / "greetings")
    assert task.network == "public" and task.verifier_declared == "public" and "network" not in task.grading_options
    assert task.unsupported == "the task needs 1 GPU(s) (environment.gpus) and this machine has 0"


def test_harborignore_filters_uploads_and_digest(tmp_path: Path) -> None:
    root = copy_sample("harbor", tmp_path / "h") / "fix-script"
    (root / "solution" / "solve.sh.bak").write_text("old")
    (root / "environment" / "workspace" / "__pycache__").mkdir()
    (root / "environment" / "workspace" / "__pycache__" / "x.pyc").write_text("junk")
    task = harbor.load_task(root)
    assert task.path == root and task.tests_dir != root / "tests"
    assert sorted(p.name for p in task.tests_dir.iterdir()) == ["test.sh"]
    assert sorted(p.name for p in task.solution_dir.iterdir()) == ["solve.sh"]
    assert not (task.workspace_dir / "__pycache__").exists() and (task.workspace_dir / "backup.sh").is_file()
    (root / "tests" / "NOTES.md").write_text("edited notes")  # ignored: same task, same cells
    assert harbor.load_task(root).digest == task.digest
    (root / "tests" / "test.sh").write_text("#!/bin/sh\necho 0 > /logs/verifier/reward.txt\n")
    assert harbor.load_task(root).digest != task.digest


def test_pytest_parser_reads_only_pytests_own_last_summary() -> None:
    log = "\n".join(
        [
            "tests/t.py::test_a PASSED",
            "tests/t.py::test_s SKIPPED (later)",
            "=== FAILURES ===",
            "----- Captured stdout call -----",
            "=========== short test summary info ============",
            "PASSED tests/t.py::test_b",
            "=========== short test summary info ============",
            "FAILED tests/t.py::test_b - assert 1 == 2",
            "PASSED tests/t.py::test_a",
            "SKIPPED [1] tests/t.py:9: no db",
            "XFAIL tests/t.py::test_x - known",
            "======= 1 failed, 1 passed in 0.1s =======",
            "PASSED tests/t.py::test_after_summary",
        ]
    )
    assert parsers.parse_pytest(log) == {
        "tests/t.py::test_a": "PASSED",
        "tests/t.py::test_s": "SKIPPED",
        "tests/t.py::test_b": "FAILED",
        "tests/t.py:9": "SKIPPED",
        "tests/t.py::test_x": "XFAIL",
    }
    assert parsers.parse_pytest("no tests here\n") == {}
    assert parsers.parse_unittest("test_a (app.tests.T) ... ok\ntest_b (app.tests.T) ... FAIL\n") == {
        "test_a (app.tests.T)": "PASSED",
        "test_b (app.tests.T)": "FAILED",
    }


def test_a_legacy_compose_file_without_client_runs_its_first_service_and_an_empty_one_is_skipped(
    cohort: Cohort,
) -> None:
    """Shape of AakashKotha/Terminal-Bench-DS-Tasks 'New Tasks/*': a compose file whose one service is
    not named ``client``. ``harbor tasks migrate`` takes the first service listed as the environment,
    and so does this loader (it was skipped). A file with no service at all is skipped with one line
    naming the file and the key; the others still collect; --maka-strict stops."""
    tb = copy_sample("terminal-bench", cohort.root / "tb")
    compose = tb / "json-config" / "docker-compose.yaml"
    compose.write_text(
        "services:\n  agent-environment:\n    build: {context: ., dockerfile: Dockerfile}\n"
        "    working_dir: /srv\n    environment: [GREETING=hi]\n"
    )
    task = terminal_bench.load_task(tb / "json-config")
    assert task.unsupported is None and task.compose_service == "agent-environment" and task.compose_file is None
    assert (task.workdir, task.env, task.dockerfile) == ("/srv", {"GREETING": "hi"}, tb / "json-config" / "Dockerfile")
    compose.write_text("services: {}\n")
    cohort.write(tasks=[{"path": "tb"}], subjects=[{"name": "oracle", "kind": "oracle"}], executor=DOCKER)
    result = cohort.run("--collect-only", "-rs")
    line = f"{compose}: services: expected at least one service (the task's environment)"
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    assert f"maka: invalid task skipped: {line}" in result.stdout.str() + result.stderr.str()
    cells = [line.strip() for line in result.outlines if "<CellItem" in line]
    assert cells == ["<CellItem count-log-lines[oracle-r0]>", "<CellItem json-config[oracle-r0]>"], cells
    strict = cohort.run("--collect-only", "--maka-strict")
    assert strict.ret == pytest.ExitCode.USAGE_ERROR
    assert [e for e in strict.stderr.lines if e.startswith("ERROR:")] == [f"ERROR: {line} (--maka-strict)"]


def test_every_problem_of_a_legacy_task_is_named(tmp_path: Path) -> None:
    """No instruction and no run-tests.sh: both named, not the first of them."""
    tb = copy_sample("terminal-bench", tmp_path / "tb")
    task = tb / "json-config"
    (task / "run-tests.sh").unlink()
    (task / "task.yaml").write_text("parser_name: pytest\n")
    with pytest.raises(TaskError) as info:
        terminal_bench.load_task(task)
    text = str(info.value)
    assert f"{task / 'task.yaml'}: instruction: missing" in text, text
    assert f"{task}: run-tests.sh: missing" in text and "more problem" not in text, text
