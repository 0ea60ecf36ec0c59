"""Before any cell runs, the session checks every host component the cohort needs (core.hostreqs):
one line naming what is missing, for what, and the package to install; exit 4; nothing runs.

Binaries are hidden for real: the run gets a PATH of links to everything on this host's PATH
but them (the harness looks commands up on PATH, as a user's shell does).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_maka.core.hostreqs import COMPONENTS, Need, install_line, missing_line
from pytest_maka.executors.docker import compose_cli as compose

from ..conftest import Cohort, needs_bwrap


def path_without(bin_dir: Path, *commands: str) -> str:
    """A PATH of one directory holding a link to every command on this PATH except ``commands``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for directory in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            link = bin_dir / entry.name
            if entry.name not in commands and not link.exists() and not link.is_symlink():
                link.symlink_to(entry.path)
    return str(bin_dir)


def usage_errors(result: pytest.RunResult) -> list[str]:
    return [line for line in result.stderr.lines if line.startswith("ERROR:")]


def assert_nothing_ran(cohort: Cohort) -> None:
    assert not (cohort.out / "attempts.jsonl").exists(), "no cell ran"


def test_a_missing_bwrap_stops_the_run_before_any_cell_and_names_the_package(
    cohort: Cohort, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cohort.task("t")
    cohort.write()
    monkeypatch.setenv("PATH", path_without(tmp_path / "bin", "bwrap"))
    result = cohort.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert usage_errors(result) == [
        f"ERROR: {cohort.spec}: this host lacks bubblewrap (bwrap) (for the local executor): apt-get install bubblewrap"
    ]
    assert_nothing_ran(cohort)


def test_egress_cells_need_tinyproxy_and_everything_missing_is_named_in_one_line(
    cohort: Cohort, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cohort.task("t")
    cohort.task("u")
    cohort.write(
        subjects=[{"name": "oracle", "kind": "oracle"}],
        repetitions=2,
        policy={"egress": ["example.test:443"]},
    )
    monkeypatch.setenv("PATH", path_without(tmp_path / "bin", "bwrap", "tinyproxy"))
    result = cohort.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert usage_errors(result) == [
        f"ERROR: {cohort.spec}: this host lacks bubblewrap (bwrap) (for the local executor); "
        "tinyproxy (for the egress proxy of 4 cells): apt-get install bubblewrap tinyproxy-bin"
    ]
    assert_nothing_ran(cohort)


@needs_bwrap
def test_tinyproxy_is_not_asked_of_a_cohort_without_egress(
    cohort: Cohort, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cohort.task("t")
    cohort.write()
    monkeypatch.setenv("PATH", path_without(tmp_path / "bin", "tinyproxy", "socat", "npm", "docker"))
    cohort.run().assert_outcomes(passed=1, failed=1)


@needs_bwrap
def test_a_skipped_cell_needs_nothing(cohort: Cohort, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The egress cells of a task the local executor skips (a compose task) do not ask for tinyproxy."""
    cohort.task("t")
    multi = cohort.task("multi")
    (multi / "environment" / "docker-compose.yaml").write_text("services:\n  main:\n    build: .\n")
    cohort.write(
        subjects=[{"name": "a", "kind": "command", "command": "true"}], policy={"egress": ["example.test:443"]}
    )
    monkeypatch.setenv("PATH", path_without(tmp_path / "bin", "tinyproxy"))
    result = cohort.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # t's cell still needs it
    assert usage_errors(result) == [
        f"ERROR: {cohort.spec}: this host lacks tinyproxy (for the egress proxy of 1 cell): "
        "apt-get install tinyproxy-bin"
    ]


@pytest.mark.needs("docker-engine")
def test_a_compose_task_on_the_docker_executor_asks_for_the_compose_extra(
    cohort: Cohort, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No plugin, no extra, no docker-compose on PATH: the run stops naming the extra (before the engine is asked)."""
    task = cohort.task("multi")
    (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (task / "environment" / "docker-compose.yaml").write_text("services:\n  main:\n    build: .\n")
    cohort.task("plain")
    cohort.write(executor={"kind": "docker"})
    monkeypatch.setenv("PATH", path_without(tmp_path / "bin", "docker", "docker-compose"))
    monkeypatch.setattr(compose, "PLUGIN_DIRS", (str(tmp_path / "no-plugins"),))
    monkeypatch.setattr(compose, "EXTRA_DISTRIBUTION", "pytest-maka-test-no-such-distribution")
    assert compose.compose_command() is None
    result = cohort.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert usage_errors(result) == [
        f"ERROR: {cohort.spec}: this host lacks Docker Compose v2 (for the multi-container task multi): "
        "pip install 'pytest-maka[compose]'"
    ]
    assert "not supported on the docker executor" not in result.stdout.str() + result.stderr.str()
    assert_nothing_ran(cohort)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="hiding the socket needs root")
def test_no_docker_engine_here_is_named_with_its_package(cohort: Cohort) -> None:
    """The engine's socket hidden (a mount namespace of the run's own): the run stops naming docker.io."""
    cohort.task("t")
    cohort.write(executor={"kind": "docker"})
    socket = os.path.realpath("/var/run/docker.sock")
    hide = f"mount --bind /dev/null {socket} && " if os.path.exists(socket) else ""
    run = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *cohort.args()]
    env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    argv = ["unshare", "--mount", "sh", "-c", f'{hide}exec "$@"', "sh", *run]
    done = subprocess.run(argv, cwd=cohort.root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout[-2000:] + done.stderr[-2000:]
    assert [line for line in done.stderr.splitlines() if line.startswith("ERROR:")] == [
        f"ERROR: {cohort.spec}: this host lacks a running Docker engine (for the docker executor): "
        "apt-get install docker.io"
    ]
    assert_nothing_ran(cohort)


def test_an_agent_not_installed_yet_needs_npm(cohort: Cohort, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cohort.task("t")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-a-key")
    cohort.write(
        subjects=[
            {"name": "claude", "kind": "claude-code", "env": ["ANTHROPIC_API_KEY"], "cache_dir": str(tmp_path / "c")}
        ]
    )
    monkeypatch.setenv("PATH", path_without(tmp_path / "bin", "npm"))
    result = cohort.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    (line,) = usage_errors(result)
    expected = (
        rf"ERROR: {re.escape(str(cohort.spec))}: this host lacks "
        r"npm \(for installing @anthropic-ai/claude-code@[0-9.]+ \(claude\)\): apt-get install npm"
    )
    assert re.fullmatch(expected, line), line
    assert_nothing_ran(cohort)


def test_the_table_names_a_package_for_every_component() -> None:
    for component in COMPONENTS.values():
        assert component.install.startswith(("apt-get install ", "pip install 'pytest-maka[")), component
    assert install_line([COMPONENTS["compose"], COMPONENTS["bwrap"], COMPONENTS["forwarder"], COMPONENTS["socat"]]) == (
        "apt-get install bubblewrap socat; pip install 'pytest-maka[compose]'"
    )
    line = missing_line([Need("tinyproxy", "a"), Need("tinyproxy", "b"), Need("tinyproxy", "a"), Need("npm", "c")])
    assert line == "this host lacks tinyproxy (for a and b); npm (for c): apt-get install tinyproxy-bin npm"
    with pytest.raises(ValueError, match="unknown host component 'bwarp'"):
        Need("bwarp", "x")


def test_a_test_that_needs_an_absent_tool_skips_naming_the_package(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The suite's own skips (tests/conftest.py), with real binaries missing from PATH."""
    pytester.makeconftest("from tests.conftest import pytest_configure, pytest_runtest_setup  # noqa: F401\n")
    pytester.makepyfile(
        test_needs="""
        import pytest

        @pytest.mark.needs("tinyproxy", "curl")
        def test_proxy():
            pass

        @pytest.mark.sandbox
        def test_sandbox():
            pass

        @pytest.mark.needs("forwarder")  # /usr/bin/python3 is not on PATH: not hidden
        def test_forwarder_is_here():
            pass
        """
    )
    monkeypatch.setenv("PATH", path_without(tmp_path / "bin", "tinyproxy", "curl", "bwrap"))
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    result = pytester.runpytest_subprocess("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines_random(
        [
            "SKIPPED*needs tinyproxy, curl, not on this host: apt-get install tinyproxy-bin curl",
            "SKIPPED*needs bubblewrap (bwrap), not on this host: apt-get install bubblewrap",
        ]
    )


@pytest.mark.needs("npm")
def test_a_pinned_agent_version_that_does_not_exist_stops_the_run_with_the_registry_answer(
    cohort: Cohort, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Asked of the real npm registry before any cell: not three infra_failure installs quoting npm's last line."""
    cohort.task("t")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-a-key")
    claude = {"name": "claude", "kind": "claude-code", "env": ["ANTHROPIC_API_KEY"], "cache_dir": str(tmp_path / "c")}
    cohort.write(subjects=[{**claude, "version": "0.0.999"}])
    result = cohort.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    (line,) = usage_errors(result)
    expected = (
        rf"ERROR: {re.escape(str(cohort.spec))}: subject claude: version: @anthropic-ai/claude-code has no "
        r"version 0.0.999 in the npm registry; its latest version is [0-9][0-9.]+"
    )
    assert re.fullmatch(expected, line), line
    assert_nothing_ran(cohort)
