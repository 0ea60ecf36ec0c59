"""Fuzz every input file type for longer than CI does, and count the outcomes.

For each target of tests/fuzz/targets.py (cohort spec, subject file, task.toml,
instruction.md, .harborignore, task.yaml, docker-compose.yaml, SWE-bench instances in
.jsonl/.json/.parquet, predictions, the attempts ledger read by ``maka report``) it runs
N hypothesis-generated cases through the real loader in this process and prints, per
target: cases, loaded, refused (one line naming the file), tracebacks, hangs (a case that
took longer than --hang-sec) and the slowest case. Exit 1 if any traceback or hang.

    python bench/fuzz.py [--cases 3000] [--target task.toml ...] [--hang-sec 10] [--save DIR]

--save writes each crashing input to DIR/<target>/<n>.bin, ready for tests/fuzz_corpus/.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hypothesis import HealthCheck, given, settings

from tests.fuzz.strategies import cases
from tests.fuzz.targets import TARGETS, Target, fresh, outcome


class Hang(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise Hang()


def fuzz(target: Target, n: int, hang_sec: float, work: Path, save: Path | None) -> dict[str, object]:
    counts = {"ok": 0, "refused": 0, "traceback": 0, "hang": 0}
    slowest = [0.0]
    first_crash: list[str] = []

    @settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(cases(target))
    def run(data: bytes) -> None:
        signal.setitimer(signal.ITIMER_REAL, hang_sec)
        start = time.perf_counter()
        try:
            result = outcome(target, fresh(work / "case"), data)
        except Hang:
            result = "hang"
        except Exception as e:  # a crash is what we count
            result = "traceback"
            if not first_crash:
                first_crash.append("".join(traceback.format_exception(e)[-3:]))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        slowest[0] = max(slowest[0], time.perf_counter() - start)
        counts[result] += 1
        if result in ("traceback", "hang") and save is not None:
            folder = save / target.name
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{counts[result]:04d}-{result}.bin").write_bytes(data)

    started = time.perf_counter()
    run()
    return {**counts, "seconds": time.perf_counter() - started, "slowest": slowest[0], "crash": first_crash}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=3000, help="cases per target (default 3000)")
    parser.add_argument("--target", action="append", choices=sorted(TARGETS), help="only these targets")
    parser.add_argument("--hang-sec", type=float, default=10.0, help="a case slower than this is a hang")
    parser.add_argument("--save", type=Path, help="write crashing inputs under this directory")
    args = parser.parse_args()
    signal.signal(signal.SIGALRM, _alarm)
    bad = 0
    with tempfile.TemporaryDirectory(prefix="maka-fuzz-") as tmp:
        os.environ["MAKA_CACHE_DIR"] = str(Path(tmp) / "cache")
        print(f"{'input type':22} {'cases':>6} {'loaded':>7} {'refused':>8} {'tracebacks':>10} {'hangs':>6} "
              f"{'seconds':>8} {'slowest':>8}")  # fmt: skip
        for name in args.target or sorted(TARGETS):
            r = fuzz(TARGETS[name], args.cases, args.hang_sec, Path(tmp), args.save)
            total = r["ok"] + r["refused"] + r["traceback"] + r["hang"]  # type: ignore[operator]
            print(
                f"{name:22} {total:>6} {r['ok']:>7} {r['refused']:>8} {r['traceback']:>10} {r['hang']:>6} "
                f"{r['seconds']:>8.1f} {r['slowest']:>7.2f}s"
            )
            bad += r["traceback"] + r["hang"]  # type: ignore[operator]
            for crash in r["crash"]:  # type: ignore[attr-defined]
                print("  first traceback:", crash.replace("\n", "\n    "))
    print(f"\n{'0 tracebacks, 0 hangs' if not bad else f'{bad} tracebacks or hangs'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
