"""The harness's own side of a verifier's network failure (run/network_check.py): real lookups
and real connections on 127.0.0.1, a real task directory."""

from __future__ import annotations

import socket
from pathlib import Path

from pytest_maka.core.hostpattern import parse_all
from pytest_maka.core.task import Task
from pytest_maka.egress.plan import PhasePlan
from pytest_maka.run.network_check import confirm, unreachable, verifier_text

LINE = "curl: (6) Could not resolve host: astral.sh.invalid"


def _task(tmp_path: Path, test: str) -> Task:
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text(test)
    return Task(id="t", path=tmp_path, instruction="", digest="", tests_dir=tests, network="public")


def test_the_verifier_text_is_the_task_s_own_files(tmp_path: Path) -> None:
    task = _task(tmp_path, "curl https://astral.sh.invalid/x | sh\n")
    (tmp_path / "tests" / "helper.py").write_text("URL = 'https://files.example.invalid/a'\n")
    text = verifier_text(task)
    assert "bash /tests/test.sh" in text and "astral.sh.invalid" in text and "files.example.invalid" in text


def test_a_named_host_that_does_not_resolve_is_confirmed(tmp_path: Path) -> None:
    task = _task(tmp_path, "curl -LsSf https://astral.sh.invalid/uv/install.sh | sh\n")
    why = confirm(LINE, task, PhasePlan(mode="all"))
    assert why is not None and why.startswith("astral.sh.invalid, named by the verifier's files, does not resolve")


def test_a_host_the_verifier_does_not_name_is_not(tmp_path: Path) -> None:
    task = _task(tmp_path, "echo 0 > /logs/verifier/reward.txt\n")
    assert confirm(LINE, task, PhasePlan(mode="all")) is None
    assert confirm(LINE, task, PhasePlan(mode="none")) is None, "no network, but nothing of the verifier's asked"
    assert confirm("Temporary failure in name resolution", task, PhasePlan(mode="none")) is None


def test_the_plan_confirms_what_it_did_not_grant(tmp_path: Path) -> None:
    task = _task(tmp_path, "curl https://astral.sh.invalid/x | sh\npip install pytest\n")
    assert confirm(LINE, task, PhasePlan(mode="none")) == (
        "the phase had no network and the verifier's files name astral.sh.invalid"
    )
    glibc = "socket.gaierror: [Errno -3] Temporary failure in name resolution"
    assert confirm(glibc, task, PhasePlan(mode="services")) == (
        "the phase had no network and the verifier's files name astral.sh.invalid, pypi.org"
    )
    outside = confirm(LINE, task, PhasePlan(mode="allowlist", allow=parse_all(["pypi.org"])))
    assert outside == "astral.sh.invalid, named by the verifier's files, is outside the phase's allowlist"


def test_a_host_that_answers_is_no_confirmation(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        assert unreachable("127.0.0.1", port) is None
    closed = unreachable("127.0.0.1", port)
    assert closed == f"resolves but accepts no connection on port {port} from the harness either"
    assert (unreachable("astral.sh.invalid") or "").startswith("does not resolve from the harness either")


def test_a_legacy_task_s_run_tests_sh_is_the_verifier_s_own(tmp_path: Path) -> None:
    """Terminal-Bench's boilerplate run-tests.sh downloads uv: its host is named by the task."""
    from pytest_maka.benchmarks import terminal_bench

    (tmp_path / "task.yaml").write_text("instruction: do it\n")
    (tmp_path / "Dockerfile").write_text("FROM python:3.11-slim\nWORKDIR /app\n")
    (tmp_path / "run-tests.sh").write_text("curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_outputs.py").write_text("def test_it():\n    assert True\n")
    task = terminal_bench.load_task(tmp_path)
    assert "astral.sh/uv/0.7.13" in verifier_text(task)
    line = "curl: (6) Could not resolve host: astral.sh"
    why = confirm(line, task, PhasePlan(mode="none"))
    assert why == "the phase had no network and the verifier's files name astral.sh"
