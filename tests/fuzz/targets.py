"""Fuzz targets: every input file type, its valid seed, and the real loader that reads it.

A target writes a valid case (a task dir, a cohort, an output dir) with one file replaced
by the fuzzed bytes and runs the loader pytest-maka itself runs on it. ``outcome`` sorts a
result: ``ok`` (loaded), ``refused`` (one-line error naming a file of the case) or
``crash`` (anything else: the bug the fuzzing looks for). Shared by tests/fuzz and bench/fuzz.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_maka import cli
from pytest_maka.benchmarks import harbor, swebench, terminal_bench
from pytest_maka.benchmarks.swebench.patch import PatchOptions
from pytest_maka.core.errors import MakaUserError
from pytest_maka.core.records import SCHEMA
from pytest_maka.core.spec import load_spec
from pytest_maka.executors.docker.options import DockerOptions
from pytest_maka.executors.local import LocalOptions
from pytest_maka.subjects.command import CommandOptions
from pytest_maka.subjects.reference import NoOptions

ROOT = Path(__file__).resolve().parents[2]
INSTANCE = json.loads((ROOT / "datasets" / "swe-bench" / "instances.jsonl").read_text().splitlines()[0])
SUBJECT_KINDS = {"oracle": NoOptions, "nop": NoOptions, "command": CommandOptions, "patch": PatchOptions}
EXECUTOR_KINDS = {"local": LocalOptions, "docker": DockerOptions}

TASK_TOML = b"""version = "1.0"
[metadata]
difficulty = "easy"
tags = ["a", "b"]
[agent]
timeout_sec = 30
network_mode = "no-network"
[verifier]
timeout_sec = 30.5
env = { A = "1" }
[environment]
workdir = "/app"
cpus = 1
memory_mb = 512
network_mode = "allowlist"
allowed_hosts = ["example.org"]
"""
TASK_YAML = b"""instruction: |
  Count the lines.
parser_name: pytest
max_agent_timeout_sec: 120
max_test_timeout_sec: 60.0
tags: [text, &t shell, *t]
difficulty: easy
"""
COMPOSE = b"""services:
  client:
    build:
      context: .
      dockerfile: Dockerfile
    environment:
      - TEST_DIR=${T_BENCH_TEST_DIR}
      - LEVEL=3
    working_dir: /app
x-common: &common {image: debian}
"""
SPEC = b"""name: fuzz
description: a cohort
tasks: [{path: tasks, include: ['*'], limit: 3}]
subjects:
  - {name: o, kind: oracle}
  - {name: c, kind: command, command: 'echo hi', set_env: {A: '1'}}
repetitions: 2
executor: {kind: local, kill_grace_sec: 0.5}
budgets: {agent_timeout_sec: 60, max_cost_usd: 1.5}
retries: {infra: 1}
"""
SUBJECT = b"name: agent\nkind: command\ncommand: ./run.sh\nenv: [HOME]\nset_env: {MODE: fast}\n"
IGNORE = b"# comment\n*.log\n!keep.log\nbuild/\n/tests/fixtures/**\n[ab]?.tmp\n"
INSTRUCTION = "Fix the script in /app so that it prints 'héllo'.\n".encode()
PREDICTIONS = json.dumps({"instance_id": INSTANCE["instance_id"], "model_patch": "", "model_name_or_path": "m"})


def _record(i: int) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "cohort": "fuzz",
        "cell_id": f"t{i % 2}[s-r0]",
        "cell_key": f"key-{i % 2}",
        "task": f"t{i % 2}",
        "subject": "s",
        "repetition": 0,
        "attempt": 1 + i // 2,
        "status": ["infra_failure", "agent_success", "agent_failure"][i % 3],
        "passed": i % 3 == 1,
        "official": i % 3 != 0,
        "score": 1.0,
        "duration_s": 1.5,
        "started_at": "2026-01-01T00:00:00.000+00:00",
        "finished_at": f"2026-01-01T00:00:0{i}.000+00:00",
        "usage": {"input_tokens": 10, "output_tokens": 5, "cost_usd": 0.01},
        "error": None,
        "artifacts": {"dir": f"cells/k{i}/attempt-1"},
    }


LEDGER = "".join(json.dumps(_record(i)) + "\n" for i in range(4)).encode()


TASKS_SPEC = b"name: fuzz\ntasks: [{path: tasks}]\nsubjects: [{name: o, kind: oracle}]\n"


def _instances_spec(name: str) -> bytes:
    return f"name: fuzz\ntasks: [{{path: {name}, image: img}}]\nsubjects: [{{name: o, kind: oracle}}]\n".encode()


def _harbor_task(root: Path) -> Path:
    task = root / "tasks" / "one"
    (task / "tests").mkdir(parents=True)
    (task / "environment" / "workspace").mkdir(parents=True)
    (task / "task.toml").write_bytes(TASK_TOML)
    (task / "instruction.md").write_bytes(INSTRUCTION)
    (task / "tests" / "test.sh").write_text("#!/bin/sh\ntrue\n")
    (task / "environment" / "workspace" / "keep.log").write_text("x\n")
    return task


def _legacy_task(root: Path) -> Path:
    task = root / "tasks" / "legacy"
    (task / "tests").mkdir(parents=True)
    (task / "task.yaml").write_bytes(TASK_YAML)
    (task / "run-tests.sh").write_text("#!/bin/sh\ntrue\n")
    (task / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    return task


@dataclass(frozen=True)
class Target:
    """One input file type: where its bytes go in a case, and the loader to run on the case."""

    name: str
    seed: bytes
    syntax: str  # yaml, toml, json, jsonl, text, parquet
    write: Callable[[Path, bytes], Any]  # writes a case into an empty dir; returns what load takes
    load: Callable[[Any], Any]
    #: The cohort spec that makes pytest read the case (None: the case is, or writes, its spec).
    spec: bytes | None = None


def _spec_case(root: Path, data: bytes, subject: bytes | None = None, predictions: bytes | None = None) -> Path:
    (root / "tasks").mkdir()
    if subject is not None:
        (root / "subject.yaml").write_bytes(subject)
        data = b"name: fuzz\ntasks: [{path: tasks}]\nsubjects: [subject.yaml]\n"
    if predictions is not None:
        (root / "preds.jsonl").write_bytes(predictions)
        data = b"name: fuzz\ntasks: [{path: tasks}]\nsubjects: [{name: p, kind: patch, predictions: preds.jsonl}]\n"
    (root / "cohort.yaml").write_bytes(data)
    return root / "cohort.yaml"


def _load_spec(path: Path) -> Any:
    return load_spec(path, SUBJECT_KINDS, EXECUTOR_KINDS)


def _file_in_task(make: Callable[[Path], Path], rel: str) -> Callable[[Path, bytes], Path]:
    def write(root: Path, data: bytes) -> Path:
        task = make(root)
        (task / rel).write_bytes(data)
        return task

    return write


def _instances(name: str) -> Callable[[Path, bytes], Path]:
    def write(root: Path, data: bytes) -> Path:
        (root / name).write_bytes(data)
        return root / name

    return write


def _load_instances(path: Path) -> Any:
    return swebench.load_instances(path, swebench.SweBenchOptions(image="img:{swebench_id}"), path.parent / "c.yaml")


def _ledger_case(root: Path, data: bytes) -> Path:
    (root / "attempts.jsonl").write_bytes(data)
    return root


def _report(out_dir: Path) -> Any:
    """``maka report DIR`` in this process; a CliError's one line is raised as a MakaUserError."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = cli.main(["report", str(out_dir)])
    if code != 0:
        raise MakaUserError(None, None, err.getvalue().rstrip("\n"))
    return code


def parquet_seed() -> bytes:
    """A small valid instances file in Parquet (needs pyarrow, a test dependency)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist([INSTANCE, {**INSTANCE, "instance_id": "maka__calc-2"}]), sink)
    return sink.getvalue()


TARGETS = {
    t.name: t
    for t in (
        Target("cohort.yaml", SPEC, "yaml", _spec_case, _load_spec),
        Target("subject.yaml", SUBJECT, "yaml", lambda r, d: _spec_case(r, b"", subject=d), _load_spec),
        Target("task.toml", TASK_TOML, "toml", _file_in_task(_harbor_task, "task.toml"), harbor.load_task, TASKS_SPEC),
        Target(
            "instruction.md",
            INSTRUCTION,
            "text",
            _file_in_task(_harbor_task, "instruction.md"),
            harbor.load_task,
            TASKS_SPEC,
        ),
        Target(
            ".harborignore", IGNORE, "text", _file_in_task(_harbor_task, ".harborignore"), harbor.load_task, TASKS_SPEC
        ),
        Target(
            "task.yaml",
            TASK_YAML,
            "yaml",
            _file_in_task(_legacy_task, "task.yaml"),
            terminal_bench.load_task,
            TASKS_SPEC,
        ),
        Target(
            "docker-compose.yaml",
            COMPOSE,
            "yaml",
            _file_in_task(_legacy_task, "docker-compose.yaml"),
            terminal_bench.load_task,
            TASKS_SPEC,
        ),
        Target(
            "instances.jsonl",
            json.dumps(INSTANCE).encode() + b"\n",
            "jsonl",
            _instances("i.jsonl"),
            _load_instances,
            _instances_spec("i.jsonl"),
        ),
        Target(
            "instances.json",
            json.dumps([INSTANCE]).encode(),
            "json",
            _instances("i.json"),
            _load_instances,
            _instances_spec("i.json"),
        ),
        Target(
            "instances.parquet",
            parquet_seed(),
            "parquet",
            _instances("i.parquet"),
            _load_instances,
            _instances_spec("i.parquet"),
        ),
        Target(
            "predictions.jsonl",
            PREDICTIONS.encode() + b"\n",
            "jsonl",
            lambda r, d: _spec_case(r, b"", predictions=d),
            _load_spec,
        ),
        Target("attempts.jsonl", LEDGER, "jsonl", _ledger_case, _report),
    )
}


def outcome(target: Target, root: Path, data: bytes) -> str:
    """Run one case in the empty dir ``root``: ``ok`` or ``refused``; anything else raises.

    A refusal must be one line, and (but for the CLI's own prefix) name a file of the case.
    """
    case = target.write(root, data)
    try:
        target.load(case)
    except MakaUserError as e:
        text = str(e)
        assert "\n" not in text and text.strip(), f"not one line: {text!r}"
        assert str(root) in text, f"the message names no file of the case: {text!r}"
        return "refused"
    return "ok"


def fresh(root: Path) -> Path:
    """An empty case dir (removed first, whatever depth a previous case left)."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    return root
