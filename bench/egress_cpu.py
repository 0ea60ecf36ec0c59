"""CPU per request of each part of the local egress path: forwarder, relay, tinyproxy, upstream.

    python bench/egress_cpu.py [--requests 1000]

The path is the one a sandboxed command's request takes on the local executor, run on the
host: a client (this process's main thread) -> the forwarder (``egress/forwarder.py``, a
process of its own) -> the relay's unix socket (the relay's threads in this process, as in
the harness) -> tinyproxy (under bwrap, as the harness starts it) -> an upstream HTTP server
on 127.0.0.1 (a process of its own). A fresh connection per GET, one at a time. CPU is read
from /proc (user + system, per thread of this process and per process of the rest), so it
does not depend on the machine's load the way latency does. Figures only.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from egress_overhead import upstream  # noqa: E402

from pytest_maka.core import hostpattern  # noqa: E402
from pytest_maka.egress import forwarder, relay  # noqa: E402
from pytest_maka.egress.host import PYTHON, HostProxy, _free_port, _listening  # noqa: E402

HZ = os.sysconf("SC_CLK_TCK")


def _cpu(stat_path: str) -> float:
    fields = Path(stat_path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / HZ


def _tree(pid: int) -> float:
    """CPU of a process and its descendants still running."""
    kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return _cpu(f"/proc/{pid}/stat") + sum(_tree(int(k)) for k in kids)


def _threads(main: int, relay_loop: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        name = {main: "client", relay_loop: "relay's loop (DNS)"}.get(int(tid), "relay's connections + log copiers")
        out[name] = out.get(name, 0.0) + _cpu(f"/proc/self/task/{tid}/stat")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000, help="GETs, one after the other")
    n = parser.parse_args().requests
    with upstream() as port, tempfile.TemporaryDirectory(prefix="maka-egress-cpu-") as tmp:
        proxy = HostProxy(Path(tmp), hostpattern.parse_all([f"allowed.test:{port}"]), {"allowed.test": "127.0.0.1"},
                          "agent")  # fmt: skip
        proxy.start()

        async def native_id() -> int:
            return threading.get_native_id()

        loop_tid = relay.run(native_id())
        fport = _free_port()
        argv = [
            PYTHON,
            "-I",
            "-S",
            forwarder.__file__,
            "--listen",
            f"127.0.0.1:{fport}",
            "--unix",
            str(proxy.socket_path),
        ]
        fwd = subprocess.Popen(argv)
        try:
            while not _listening(fport):
                time.sleep(0.001)
            tiny = proxy._procs[0].pid
            up_pid = int(subprocess.run(["pgrep", "-f", "-n", "ThreadingHTTPServer"], capture_output=True,
                                        text=True).stdout.split()[0])  # fmt: skip
            request = f"GET http://allowed.test:{port}/ HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n"
            me = threading.get_native_id()
            before = (_threads(me, loop_tid), _cpu(f"/proc/{fwd.pid}/stat"), _tree(tiny), _cpu(f"/proc/{up_pid}/stat"))
            latency = []
            for _ in range(n):
                t = time.perf_counter()
                with socket.create_connection(("127.0.0.1", fport)) as s:
                    s.sendall(request.encode())
                    while s.recv(65536):
                        pass
                latency.append(time.perf_counter() - t)
            after = (_threads(me, loop_tid), _cpu(f"/proc/{fwd.pid}/stat"), _tree(tiny), _cpu(f"/proc/{up_pid}/stat"))
        finally:
            fwd.kill()
            fwd.wait()
            proxy.stop()
    per = {f"this process: {k}": after[0][k] - before[0].get(k, 0.0) for k in after[0]}
    per |= {"forwarder": after[1] - before[1], "tinyproxy": after[2] - before[2], "upstream": after[3] - before[3]}
    for name, seconds in per.items():
        print(f"cpu  {name:50} {seconds / n * 1000:6.3f} ms per request")
    label = f"latency (one client, median of {n})"
    print(f"cpu  {label:50} {statistics.median(latency) * 1000:6.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
