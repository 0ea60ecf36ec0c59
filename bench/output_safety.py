"""Costs of the output-safety machinery: redaction throughput, the limits gate, cgroups, capped disks.

    python bench/output_safety.py [--mb 64]

Figures only: nothing here asserts on timing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pytest_maka.executors.local import disk, limits
from pytest_maka.store.redact import Redactor

SECRET = "sk-bench-4f1c9e2a77b0d3"


def median_ms(fn: Callable[[], object], n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def redaction(mb: int, tmp: Path) -> None:
    redactor = Redactor([SECRET])
    print(f"redactor: {len(redactor.needles)} distinct forms of one secret (as written, escaped, base64, hex)")
    for label, every in (("no secret", 0), ("a secret per MiB", 1024 * 1024)):
        path = tmp / "big.log"
        with path.open("wb") as f:
            for _ in range(mb):
                block = bytearray(b"x" * (1024 * 1024))
                if every:
                    block[100 : 100 + len(SECRET)] = SECRET.encode()
                f.write(block)
        t0 = time.perf_counter()
        redactor.file(path)
        dt = time.perf_counter() - t0
        print(f"  streaming {mb} MiB, {label:18s} {mb / dt:8.1f} MiB/s")
    record = {"error": {"message": f"x {SECRET}"}, "agent": {f"k{i}": "v" * 50 for i in range(200)}}
    print(f"  one record with 200 fields       {median_ms(lambda: redactor.value(record), 200):8.3f} ms")


def gate() -> None:
    def plain() -> None:
        subprocess.Popen(["/bin/true"], start_new_session=True, env={}).wait()

    def gated() -> None:
        r, w = os.pipe()
        p = subprocess.Popen(["/bin/sh", "-c", 'read _; exec "$@"', "g", "/bin/true"], stdin=r, env={})
        os.close(r)
        os.close(w)
        p.wait()

    fd = os.open("/dev/null", os.O_WRONLY)

    def preexec() -> None:
        subprocess.Popen(["/bin/true"], preexec_fn=lambda: os.write(fd, b"0"), env={}).wait()

    print("spawning a command (median of 200)")
    for label, fn in (("plain", plain), ("through the limits gate", gated), ("with a preexec_fn", preexec)):
        print(f"  {label:30s} {median_ms(fn, 200):8.2f} ms")


def sandbox_setup(tmp: Path) -> None:
    print(f"limits mechanism here: {limits.mechanism()}")
    spec = limits.LimitSpec(memory_mb=512, pids=4096)
    print(f"  cgroup create + remove          {median_ms(lambda: limits.open_limits(spec).close(), 50):8.2f} ms")
    why = disk.unavailable()
    if why is not None:
        print(f"  capped disk: not available ({why})")
        return
    n = iter(range(10**6))

    def capped() -> None:
        d = tmp / f"d{next(n)}"
        d.mkdir()
        disk.CappedDisk(d, 1024).close()

    print(f"  capped disk (1 GiB) make + drop {median_ms(capped, 10):8.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="maka-bench-") as t:
        redaction(args.mb, Path(t))
        gate()
        sandbox_setup(Path(t))
    print(f"load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
