"""Soak: a cohort run again and again into one output directory under random injected faults.

Each round runs ``pytest -n WORKERS`` on the cohort (resuming the previous rounds) while
faults are injected for real: workers SIGKILLed mid-attempt or right after recording,
one or two SIGINTs sent to the controller, the ledger's last line torn between rounds
(as a crash mid-write would) and, with ``--docker``, the Docker engine's containers
running on the default engine checked for leftovers. With ``--engine-restarts`` the cells run
on a Docker engine of the soak's own (a second ``dockerd`` with its own bridge, data root and
socket; needs root), which is restarted mid-round at random, cleanly (SIGTERM, as
``systemctl restart``) or by SIGKILL (its containerd shims outlive it). Rounds go on until every cell has an
official result (or ``--rounds`` is reached). Then it prints:

    cells lost          cells with no final record, or a recorded attempt that disappeared
    duplicates          cells executed again after a final result (more than one final attempt)
    phantoms            attempts recorded for an attempt that never started (no attempt dir)
    leftovers           processes of the soak still alive, containers of its runs
    retries used        attempts beyond each cell's first; wall time

    python bench/soak.py [--cells 80] [--workers 4] [--seed 1] [--kill-rate 0.02] [--keep]
    python bench/soak.py --engine-restarts 0.5 [--cells 40] [--workers 2]
    python bench/soak.py --engine-restarts 3 --cells 200 --workers 4   # three per round

Figures only: the exit code is 0 when cells lost, duplicates, phantoms and leftovers are 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

TASK_TOML = """\
version = "1.0"
[agent]
timeout_sec = 60
[verifier]
timeout_sec = 30
[environment]
workdir = "/app"
"""
IMAGE = "debian:bookworm-slim"
TEST_SH = "#!/bin/sh\nif [ -f /app/done.txt ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"

#: Injected into every worker: dies at random mid-attempt (the attempt dir exists) or right
#: after its ledger line (before the report reaches the controller).
FAULTS_CONFTEST = """
import os, random, signal

RATE = float(os.environ.get("SOAK_KILL_RATE", "0"))
ROLE = {}

def pytest_configure(config):
    ROLE["worker"] = hasattr(config, "workerinput")

def pytest_maka_acquire_lease(executor, request):
    if ROLE["worker"] and random.random() < RATE:
        os.kill(os.getpid(), signal.SIGKILL)
    return None

def pytest_runtest_logreport(report):
    if ROLE["worker"] and report.when == "call" and random.random() < RATE:
        os.kill(os.getpid(), signal.SIGKILL)
"""


def write_cohort(root: Path, cells: int, docker: bool, engine_url: str | None = None) -> Path:
    tasks = min(10, cells)
    for i in range(tasks):
        task = root / "tasks" / f"soak-{i}"
        (task / "tests").mkdir(parents=True)
        (task / "environment" / "workspace").mkdir(parents=True)
        (task / "task.toml").write_text(TASK_TOML)
        (task / "instruction.md").write_text("Create /app/done.txt.")
        (task / "tests" / "test.sh").write_text(TEST_SH)
    spec = {
        "name": "soak",
        "tasks": [{"path": "tasks"}],
        "subjects": [{"name": "agent", "kind": "command", "command": "echo ok > /app/done.txt"}],
        "repetitions": max(1, cells // tasks),
        "executor": executor_spec(docker, engine_url),
        "retries": {"infra": 1, "backoff_sec": 0.1, "backoff_max_sec": 0.5},
    }
    (root / "cohort.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    (root / "conftest.py").write_text(FAULTS_CONFTEST)
    return root / "cohort.yaml"


def executor_spec(docker: bool, engine_url: str | None) -> dict[str, Any]:
    if not docker:
        return {"kind": "local"}
    spec: dict[str, Any] = {"kind": "docker", "default_image": IMAGE}
    if engine_url is not None:  # the soak's own engine: waited for while it restarts
        spec.update(engines=[engine_url], engine_retry_sec=1, engine_wait_sec=180)
    return spec


def ledger(out: Path) -> list[dict[str, Any]]:
    try:
        lines = (out / "attempts.jsonl").read_text().split("\n")
    except FileNotFoundError:
        return []
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


FINAL = {"agent_success", "agent_failure", "agent_incomplete", "budget_exhausted"}


def run_round(
    root: Path,
    spec: Path,
    out: Path,
    workers: int,
    rng: random.Random,
    kill_rate: float,
    engine: Any = None,
    restart_rate: float = 0.0,
    pending: int = 10,
) -> dict[str, Any]:
    """One pytest run into ``out``; with ``kill_rate`` > 0 it may also be interrupted, and with
    ``restart_rate`` > 0 the soak's own ``engine`` may be restarted while the round runs
    (``pending``: cells still without a final result, over which the restarts are spread)."""
    env = {**os.environ, "SOAK_KILL_RATE": str(kill_rate), "PYTHONHASHSEED": str(rng.randrange(1 << 30))}
    argv = [sys.executable, "-m", "pytest", f"--maka-spec={spec}", f"--maka-out={out}", "-n", str(workers)]
    argv += ["-p", "no:cacheprovider", "-p", "no:randomly", "-q", "--tb=no", f"--max-worker-restart={10 * workers}"]
    before = len(ledger(out))
    events: list[tuple[int, str]] = []  # (ledger lines of this round, what to do then)
    if kill_rate > 0 and rng.random() < 0.4:  # interrupt this round once some attempts of it are recorded
        events.append((before + rng.randint(1, 20), rng.choice(("sigint", "sigint2"))))
    if engine is not None and kill_rate > 0:
        # RATE below 1: the chance of one engine fault this round; N.f: N faults, plus one more
        # with chance f, spread over the attempts this round is expected to record
        faults = int(restart_rate) + (rng.random() < restart_rate % 1)
        spread = max(10, pending)
        for _ in range(faults):
            events.append((before + rng.randint(0, spread), rng.choice(("engine-restart", "engine-kill"))))
    events.sort()
    proc = subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    done = {"sigints": 0, "engine_restarts": 0, "engine_kills": 0}
    for target, action in events:
        while proc.poll() is None and len(ledger(out)) < target:
            time.sleep(0.05)
        if proc.poll() is not None:
            break
        if action.startswith("sigint"):
            done["sigints"] = 2 if action == "sigint2" else 1
            for _ in range(done["sigints"]):
                proc.send_signal(signal.SIGINT)
        elif action == "engine-restart":
            engine.restart()
            done["engine_restarts"] += 1
        else:
            engine.kill()
            engine.start()
            done["engine_kills"] += 1
    out_text, _ = proc.communicate(timeout=3600)
    return {**done, "rc": proc.returncode, "output": out_text.decode(errors="replace")}


def tear_last_line(out: Path, rng: random.Random) -> dict[str, Any] | None:
    """Cut the ledger's last line in two, as a crash in the middle of writing it would."""
    path = out / "attempts.jsonl"
    data = path.read_bytes() if path.exists() else b""
    if not data.endswith(b"\n") or data.count(b"\n") < 2:
        return None
    start = data.rstrip(b"\n").rfind(b"\n") + 1
    line = data[start:].rstrip(b"\n")
    path.write_bytes(data[:start] + line[: rng.randint(1, len(line) - 1)])
    return json.loads(line)


def soak_processes(root: Path) -> list[str]:
    """Processes (other than this one) whose command line or working directory is in the soak root."""
    found = []
    needle = str(root).encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if needle in cmdline or cwd.startswith(str(root)):
            command = cmdline.replace(b"\0", b" ").decode(errors="replace")[:120]
            found.append(f"{entry}: {command}")
    return found


def soak_containers(root: Path, url: str | None = None) -> list[str]:
    try:
        import docker
    except ImportError:
        return []
    api = docker.APIClient(base_url=url, version="auto") if url else docker.APIClient(version="auto")
    try:
        found = api.containers(all=True, filters={"label": "io.pytest-maka.managed=1"})
        return [c["Id"][:12] for c in found if url or str(root) in json.dumps(c.get("Labels") or {})]
    finally:
        api.close()


def engine_shims(engine: Any) -> list[str]:
    """containerd shims of the soak's engine still running (each holds a container)."""
    shims = engine._pids(lambda cmd: cmd.startswith(b"containerd-shim"))
    return [f"shim {pid}" for pid in shims]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=80)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kill-rate", type=float, default=0.02, help="chance per attempt of each worker kill")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--docker", action="store_true", help="run the cells on the default Docker engine")
    parser.add_argument("--keep", action="store_true", help="keep the soak directory")
    parser.add_argument(
        "--engine-restarts",
        type=float,
        default=0.0,
        metavar="RATE",
        help="run on a Docker engine of the soak's own and restart it in this share of the rounds "
        "(2.5: two restarts per round, and a third in half of them)",
    )
    args = parser.parse_args(argv)
    if args.engine_restarts:
        args.docker = True
        with own_engine() as engine:
            return soak(args, engine)
    return soak(args, None)


@contextlib.contextmanager
def own_engine() -> Iterator[Any]:
    """A second dockerd with its own bridge (tests/docker/second_engine.py), holding IMAGE."""
    import docker

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.docker.second_engine import started_engine

    source = docker.APIClient(version="auto")
    try:
        with started_engine(source, IMAGE) as engine:
            yield engine
    finally:
        source.close()


def soak(args: argparse.Namespace, engine: Any) -> int:
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="maka-soak-", dir="/var/tmp"))
    spec = write_cohort(root, args.cells, args.docker, engine.url if engine is not None else None)
    out = root / "out"
    cells = min(10, args.cells) * max(1, args.cells // min(10, args.cells))
    started = time.monotonic()
    seen: dict[tuple[str, int], str] = {}  # (cell key, attempt) -> status, for every line ever complete
    torn: set[tuple[str, int]] = set()
    sigints = rounds = restarts = kills = 0
    try:
        for rounds in range(1, args.rounds + 1):
            last = rounds == args.rounds
            rate = 0.0 if last else args.kill_rate
            pending = cells - len({r["cell_key"] for r in ledger(out) if r["status"] in FINAL})
            result = run_round(root, spec, out, args.workers, rng, rate, engine, args.engine_restarts, pending)
            sigints += result["sigints"]
            restarts += result["engine_restarts"]
            kills += result["engine_kills"]
            for r in ledger(out):
                seen.setdefault((r["cell_key"], r["attempt"]), r["status"])
            done = {r["cell_key"] for r in ledger(out) if r["status"] in FINAL}
            if len(done) == cells:
                break
            if not last and rng.random() < 0.5:
                record = tear_last_line(out, rng)
                if record is not None:
                    torn.add((record["cell_key"], record["attempt"]))
        wall = time.monotonic() - started
        final = ledger(out)
        keys = {(r["cell_key"], r["attempt"]) for r in final}
        finals: dict[str, int] = {}
        for r in final:
            finals[r["cell_key"]] = finals.get(r["cell_key"], 0) + (r["status"] in FINAL)
        disappeared = [k for k in seen if k not in keys and k not in torn]
        lost = (cells - len([k for k, n in finals.items() if n])) + len(disappeared)
        duplicates = sum(1 for n in finals.values() if n > 1)
        phantoms = [r for r in final if not (out / r["artifacts"].get("dir", "-")).is_dir()]
        results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line]
        leftovers = soak_processes(root) + (soak_containers(root) if args.docker and engine is None else [])
        if engine is not None:
            leftovers += soak_containers(root, engine.url) + engine_shims(engine)
        retries = sum(1 for r in final if r["attempt"] > 1)
        print(f"soak: {cells} cells, -n {args.workers}, seed {args.seed}, kill rate {args.kill_rate}")
        print(f"rounds              {rounds} ({sigints} SIGINTs sent, {len(torn)} ledger lines torn)")
        if engine is not None:
            print(f"engine restarts     {restarts + kills} ({restarts} clean, {kills} by SIGKILL)")
        infra = sum(1 for r in final if r["status"] == "infra_failure")
        aborted = sum(1 for r in final if r["status"] == "agent_aborted")
        print(f"attempts recorded   {len(final)} ({infra} infra_failure, {aborted} agent_aborted)")
        print(f"cells lost          {lost}")
        print(f"duplicates          {duplicates}")
        print(f"phantoms            {len(phantoms)}")
        print(f"leftovers           {len(leftovers)}" + "".join(f"\n  {x}" for x in leftovers))
        print(f"results.jsonl cells {len(results)}")
        print(f"retries used        {retries}")
        print(f"wall time           {wall:.1f} s")
        bad = lost or duplicates or phantoms or leftovers or len(results) != cells
        return 1 if bad else 0
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
