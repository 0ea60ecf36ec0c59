"""Where a request through the local egress proxy spends its time, hop by hop, on the host.

    python bench/egress_hops.py [--requests 200]      # also: python bench/egress_overhead.py --hops

Median time of a GET made directly, through tinyproxy alone, through the relay's unix socket
in front of it, and through each forwarder (the python one, socat) in front of the relay; and
the start of each forwarder's program. Traffic stays on 127.0.0.1. Figures only.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_maka.core import hostpattern  # noqa: E402
from pytest_maka.testing.servers import http_server  # noqa: E402


def ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:7.1f} ms" if values else "      -"


def _get(connect: Callable[[], socket.socket], request: bytes) -> float:
    """One request on a fresh connection, read to the end; its duration."""
    t = time.perf_counter()
    with connect() as s:
        s.sendall(request)
        while s.recv(65536):
            pass
    return time.perf_counter() - t


@contextmanager
def _forwarder(argv: list[str], port: int) -> Iterator[None]:
    """A forwarder on the host's ``127.0.0.1:port`` (what the sandbox runs on its own loopback)."""
    from pytest_maka.egress.host import _listening

    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not _listening(port) and proc.poll() is None:
            time.sleep(0.001)
        yield
    finally:
        proc.terminate()
        proc.wait()


def _started(argv: list[str], n: int = 20) -> list[float]:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - t)
    return times


def hops(n: int) -> None:
    """Median time of a GET: direct, through tinyproxy alone, through the relay's unix socket in front of it,
    and through each forwarder in front of the relay; and the start of each forwarder's program."""
    from pytest_maka.egress import forwarder
    from pytest_maka.egress.host import PYTHON, HostProxy, _free_port

    imports = "import __future__, _socket, posix, select, sys, time"
    python, socat = ms(_started([PYTHON, "-I", "-S", "-c", imports])), ms(_started(["socat", "-V"]))
    print(f"hops   start: {PYTHON} -I -S with the forwarder's imports {python}, socat -V {socat}")
    with http_server() as server, tempfile.TemporaryDirectory(prefix="maka-egress-hops-") as tmp:
        proxy = HostProxy(Path(tmp), hostpattern.parse_all([f"allowed.test:{server.port}"]),
                          {"allowed.test": "127.0.0.1"}, "agent")  # fmt: skip
        proxy.start()
        try:
            url = f"http://allowed.test:{server.port}/"
            proxied = f"GET {url} HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n".encode()
            plain = b"GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n"
            assert proxy.port is not None
            port, sock = proxy.port, str(proxy.socket_path)

            def unix() -> socket.socket:
                s = socket.socket(socket.AF_UNIX)
                s.connect(sock)
                return s

            paths: list[tuple[str, Callable[[], socket.socket], bytes]] = [
                ("direct", lambda: socket.create_connection(("127.0.0.1", server.port)), plain),
                ("tinyproxy alone", lambda: socket.create_connection(("127.0.0.1", port)), proxied),
                ("relay + tinyproxy", unix, proxied),
            ]
            for label, connect, request in paths:
                print(f"hops   {label:32} {ms([_get(connect, request) for _ in range(n)])}")
            fwd_port = _free_port()
            forwarders = {
                "python forwarder + relay + tiny.": [PYTHON, "-I", "-S", forwarder.__file__, "--listen",
                                                     f"127.0.0.1:{fwd_port}", "--unix", sock],
                "socat (fork) + relay + tinyproxy": ["socat", f"TCP-LISTEN:{fwd_port},bind=127.0.0.1,fork,reuseaddr",
                                                     f"UNIX-CONNECT:{sock}"],
            }  # fmt: skip
            for label, argv in forwarders.items():
                with _forwarder(argv, fwd_port):
                    times = [_get(lambda: socket.create_connection(("127.0.0.1", fwd_port)), proxied) for _ in range(n)]
                print(f"hops   {label:32} {ms(times)}")
        finally:
            proxy.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200, help="GETs per path")
    hops(parser.parse_args().requests)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
