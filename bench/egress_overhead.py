"""What the egress proxy adds: per attempt start (an allowlist phase's proxy up and down) and per request.

    python bench/egress_overhead.py                  # local (bubblewrap) executor, concurrency 1 and 4
    python bench/egress_overhead.py --docker         # also the Docker executor
    python bench/egress_overhead.py --hops           # where a request's time goes, hop by hop
    python bench/egress_overhead.py --past-proxy ab  # local, without and with the TUN device per command, alternated
    python bench/egress_overhead.py --pairs 40       # the same as pairs of phases in one lease (finer A/B)

Per attempt start: the time to enter and leave an allowlist phase with no request (local:
tinyproxy + the relay on its unix socket on the host; Docker: the first phase creates the
internal network and the proxy container, later phases only restart tinyproxy in it).
Per request: inside the sandbox, a fresh connection per GET through the proxy, compared
with the same GET without the proxy, by the same client program at the same concurrency
(local: a process on the host, run by each lease after its proxied GETs; Docker: a command
joined to the upstream's network directly). The local upstream is a process of its own on
127.0.0.1, as a model server is (in the bench's process it would share the interpreter
lock with the harness's relay). Concurrency 1 and 4 run that many leases in threads at once,
like ``--maka-concurrency 1`` and ``4``. Targets: <= 100 ms per attempt start, <= 5 ms per request on
loopback. Traffic stays on 127.0.0.1 and on networks this script creates. Figures only.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_maka.core import hostpattern  # noqa: E402
from pytest_maka.egress.log import EgressLog  # noqa: E402
from pytest_maka.egress.plan import PhasePlan  # noqa: E402
from pytest_maka.executors.base import LeaseRequest  # noqa: E402
from pytest_maka.testing.conformance import make_cell, make_task  # noqa: E402
from pytest_maka.testing.servers import EGRESS_SERVER, http_server  # noqa: E402

ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
#: Times N GETs (a fresh connection each) inside the sandbox; prints one duration (s) per line.
TIMER = """
import sys, time, urllib.request
url, n = sys.argv[1], int(sys.argv[2])
opener = urllib.request.build_opener()
for _ in range(n):
    t = time.perf_counter(); opener.open(url, timeout=10).read(); print(time.perf_counter() - t)
"""


#: An HTTP server on 127.0.0.1 in a process of its own; prints its port, serves until killed.
UPSTREAM = """
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"ok " + self.path.encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@contextmanager
def upstream() -> Iterator[int]:
    """The local upstream's port, while it runs."""
    proc = subprocess.Popen(["python3", "-c", UPSTREAM], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield int(proc.stdout.readline())
    finally:
        proc.kill()
        proc.wait()


def on_host(url: str, n: int) -> list[float]:
    """N GETs of ``url`` by the sandbox's client program run on the host, without the proxy."""
    text = subprocess.run(["python3", "-c", TIMER, url, str(n)], capture_output=True, text=True, check=True).stdout
    return [float(x) for x in text.split()]


def ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:7.1f} ms" if values else "      -"


def _run(sandbox: Any, root: Path, command: str, env: dict[str, str], network: bool) -> str:
    n = uuid.uuid4().hex[:8]
    out, err = root / f"o-{n}", root / f"e-{n}"
    sandbox.exec(command, env=env, timeout_sec=120, stdout_path=out, stderr_path=err, network=network)
    return out.read_text()


def one_lease(
    executor: Any, root: Path, target: tuple[str, int], requests: int, phases: int, direct_url: str | None,
    with_command: bool = False, direct_on_host: bool = False, unproxied: bool = False,
) -> dict[str, list[float]]:  # fmt: skip
    """One attempt: ``phases`` allowlist phases timed empty, then ``requests`` GETs via the proxy.

    ``with_command``: the first phase runs one networked ``true`` (what a real first phase waits
    for: the proxy, the packet logger and the resolver), timed as ``first_with_command``.
    ``unproxied``: the baseline for that, an attempt without egress whose first command is a
    networked ``true`` (the executor's network, unfiltered), timed as ``first_unproxied``."""
    task = make_task(root / "task", docker_image="python:3.11-slim")
    hint = {"egress": not unproxied} if "egress" in LeaseRequest.__dataclass_fields__ else {}
    req = LeaseRequest(cell=make_cell(task, root), attempt=1, attempt_dir=root / "a", scratch_dir=root / "s", **hint)
    (root / "a").mkdir(parents=True, exist_ok=True)
    name, port = target
    plan = PhasePlan("allowlist", hostpattern.parse_all([f"{name}:{port}"]))
    log = EgressLog(root / "a" / "egress.log")
    keys = ("first_phase", "first_with_command", "first_unproxied", "phase", "proxied", "direct", "cmd", "cmd_proxied")
    out: dict[str, list[float]] = {k: [] for k in keys}
    env = {**ENV, "T": TIMER}
    if unproxied:
        with executor.lease(req) as sandbox:
            t = time.perf_counter()
            _run(sandbox, root, "true", env, True)
            out["first_unproxied"].append(time.perf_counter() - t)
        return out
    with executor.lease(req) as sandbox:
        for i in range(phases):
            t = time.perf_counter()
            with sandbox.egress_phase("agent", plan, log):
                if i == 0 and with_command:
                    _run(sandbox, root, "true", env, True)
            key = "phase" if i else "first_with_command" if with_command else "first_phase"
            out[key].append(time.perf_counter() - t)
        with sandbox.egress_phase("agent", plan, log):
            for _ in range(phases):  # a command's start, without and behind the forwarder
                for key, network in (("cmd", False), ("cmd_proxied", True)):
                    t = time.perf_counter()
                    _run(sandbox, root, "true", env, network)
                    out[key].append(time.perf_counter() - t)
            text = _run(sandbox, root, f'python3 -c "$T" http://{name}:{port}/ {requests}', env, True)
        out["proxied"] = [float(x) for x in text.split()]
        if direct_url is not None and direct_on_host:
            out["direct"] = on_host(direct_url, requests)
        elif direct_url is not None:
            text = _run(sandbox, root, f'python3 -c "$T" {direct_url} {requests}', env, True)
            out["direct"] = [float(x) for x in text.split()]
    return out


def past_proxy_pairs(executor: Any, root: Path, target: tuple[str, int], rounds: int) -> None:
    """A/B under the same load: phases without and with the TUN device per command, alternated in one lease;
    per phase its start and end, and three networked ``true`` commands; and the time the command waits
    while the harness makes its device (entering the namespace, the device, its address and route)."""
    from pytest_maka.egress import tunguard
    from pytest_maka.executors.local import egress as local_egress

    made: list[float] = []
    make = tunguard.TunGuard._enter_and_make

    def timed(guard: Any, pid: int, netns: int) -> int:
        t = time.perf_counter()
        try:
            return make(guard, pid, netns)
        finally:
            made.append(time.perf_counter() - t)

    tunguard.TunGuard._enter_and_make = timed  # type: ignore[method-assign]

    task = make_task(root / "task")
    req = LeaseRequest(cell=make_cell(task, root), attempt=1, attempt_dir=root / "a", scratch_dir=root / "s")
    (root / "a").mkdir(parents=True, exist_ok=True)
    plan = PhasePlan("allowlist", hostpattern.parse_all([f"{target[0]}:{target[1]}"]))
    log = EgressLog(root / "a" / "egress.log")
    times: dict[bool, dict[str, list[float]]] = {g: {"phase": [], "cmd": []} for g in (False, True)}
    with executor.lease(req) as sandbox:
        for _ in range(rounds):
            for guard in (False, True):
                local_egress.GUARD_PAST_PROXY = guard
                t = time.perf_counter()
                with sandbox.egress_phase("agent", plan, log):
                    entered = time.perf_counter()
                    for _ in range(3):
                        c = time.perf_counter()
                        _run(sandbox, root, "true", ENV, True)
                        times[guard]["cmd"].append(time.perf_counter() - c)
                    left = time.perf_counter()
                times[guard]["phase"].append(entered - t + time.perf_counter() - left)
    local_egress.GUARD_PAST_PROXY = True
    tunguard.TunGuard._enter_and_make = make  # type: ignore[method-assign]
    print(f"pairs  the device made in {ms(made)} (median of {len(made)}; 90th percentile "
          f"{sorted(made)[int(len(made) * 0.9)] * 1000:.1f} ms)")  # fmt: skip
    off, on = times[False], times[True]
    for key, label in (("phase", "phase start + end"), ("cmd", "networked command")):
        diff = statistics.median(on[key]) - statistics.median(off[key])
        print(f"pairs  {label:18} without the device {ms(off[key])}, with {ms(on[key])}: {diff * 1000:+.1f} ms"
              f" ({len(on[key])} each)")  # fmt: skip


def host_direct(url: str, n: int) -> list[float]:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        urllib.request.urlopen(url, timeout=10).read()
        times.append(time.perf_counter() - t)
    return times


def measure(label: str, make: Callable[[], Any], target: tuple[str, int], direct: Callable[[], list[float]] | None,
            direct_url: str | None, args: argparse.Namespace, direct_on_host: bool = False) -> None:  # fmt: skip
    """``direct``: the GETs without the proxy by one client alone (printed beside the same-concurrency ones)."""
    executor = make()
    with tempfile.TemporaryDirectory(prefix="maka-egress-bench-") as tmp:  # nothing made ahead yet
        cold = one_lease(executor, Path(tmp) / "cold", target, 1, 2, direct_url, direct_on_host=direct_on_host)
    print(f"{label:6} the process's first lease (nothing made ahead): first phase {ms(cold['first_phase'])}")
    for workers in (1, 4):
        with tempfile.TemporaryDirectory(prefix="maka-egress-bench-") as tmp:
            roots = [Path(tmp) / f"lease-{i}" for i in range(workers * args.leases)]
            started = time.perf_counter()
            jobs = [(r, i % 2 == 1) for i, r in enumerate(roots)]  # every other lease: a command in its first phase
            bases = [Path(tmp) / f"unproxied-{i}" for i in range(len(roots) // 2)]  # the same, without egress
            with ThreadPoolExecutor(workers) as pool:  # each baseline right after the lease it is compared with
                futures = []
                for i, (r, cmd) in enumerate(jobs):
                    futures.append(pool.submit(
                        one_lease, executor, r, target, args.requests, args.phases, direct_url, cmd, direct_on_host
                    ))  # fmt: skip
                    if cmd:
                        futures.append(pool.submit(one_lease, executor, bases[i // 2], target, 0, 0, None,
                                                   unproxied=True))  # fmt: skip
                results = [f.result() for f in futures]
            wall = time.perf_counter() - started
        merged: dict[str, list[float]] = {k: [x for r in results for x in r[k]] for k in results[0]}
        first_added = statistics.median(merged["first_with_command"]) - statistics.median(merged["first_unproxied"])
        baseline = merged["direct"]
        alone = f" (one client alone {ms(direct())})" if direct is not None else ""
        added = statistics.median(merged["proxied"]) - statistics.median(baseline) if baseline else float("nan")
        cmd = statistics.median(merged["cmd_proxied"]) - statistics.median(merged["cmd"])
        print(
            f"{label:12} concurrency {workers}: attempt start (first phase) {ms(merged['first_phase'])}, "
            f"with a networked command {ms(merged['first_with_command'])} "
            f"(without egress {ms(merged['first_unproxied'])}: added {first_added * 1000:+.0f} ms), "
            f"later phase {ms(merged['phase'])}; command start {ms(merged['cmd'])}, behind the forwarder "
            f"{cmd * 1000:+6.1f} ms; request via proxy {ms(merged['proxied'])}, "
            f"without {ms(baseline)}{alone}, added {added * 1000:6.2f} ms; {len(roots)} leases in {wall:.1f} s"
        )
        each = {k: " ".join(f"{x * 1000:.0f}" for x in merged[k]) for k in merged if k.startswith("first")}
        print(f"{label:6} concurrency {workers}: each first phase (ms, in lease order): {each['first_phase']}; "
              f"with a command: {each['first_with_command']}; without egress: {each['first_unproxied']}")  # fmt: skip
    executor.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docker", action="store_true", help="also measure the Docker executor")
    parser.add_argument("--requests", type=int, default=50, help="GETs per lease")
    parser.add_argument("--phases", type=int, default=5, help="empty allowlist phases timed per lease")
    parser.add_argument("--leases", type=int, default=2, help="leases per worker")
    parser.add_argument("--no-local", action="store_true", help="skip the local executor (with --docker)")
    parser.add_argument("--hops", action="store_true", help="time each hop of the local path on the host")
    parser.add_argument(
        "--past-proxy",
        choices=("on", "off", "ab"),
        default="on",
        help="local: log traffic past the proxy (a TUN device per command), not, or both alternated",
    )
    parser.add_argument("--rounds", type=int, default=2, help="alternations with --past-proxy ab")
    parser.add_argument("--pairs", type=int, default=0, help="local: N phases alternated without/with the device")
    args = parser.parse_args()
    if args.hops:
        from egress_hops import hops  # this script's directory is on the path

        hops(args.requests * 4)
        return 0

    from pytest_maka.executors.local import LocalExecutor, LocalOptions
    from pytest_maka.executors.local import egress as local_egress

    if args.no_local and args.docker:
        docker_bench(args)
        return 0
    if args.pairs:
        with http_server() as server, tempfile.TemporaryDirectory(prefix="maka-egress-bench-") as tmp:
            executor = LocalExecutor(LocalOptions(egress_hosts={"allowed.test": "127.0.0.1"}))
            past_proxy_pairs(executor, Path(tmp), ("allowed.test", server.port), args.pairs)
            executor.close()
        return 0
    settings = {"on": [True], "off": [False], "ab": [False, True] * args.rounds}[args.past_proxy]
    with upstream() as port:
        url = f"http://127.0.0.1:{port}/"
        for guard in settings:
            local_egress.GUARD_PAST_PROXY = guard
            measure(
                "local" if guard else "local/no-tun",
                lambda: LocalExecutor(LocalOptions(egress_hosts={"allowed.test": "127.0.0.1"})),
                ("allowed.test", port),
                lambda: host_direct(url, args.requests * 4),
                url,
                args,
                direct_on_host=True,
            )
    if args.docker:
        docker_bench(args)
    return 0


def docker_bench(args: argparse.Namespace) -> None:
    import docker

    from pytest_maka.executors.docker import DockerExecutor, DockerOptions

    api = docker.APIClient(version="auto")
    name = f"maka-bench-upstream-{uuid.uuid4().hex[:8]}"
    net = api.create_network(name, internal=True, labels={"io.pytest-maka.bench": "1"})["Id"]
    server = ["python3", "-c", EGRESS_SERVER, "8080"]
    cid = api.create_container("python:3.11-slim", server, host_config=api.create_host_config(network_mode=name))["Id"]
    try:
        api.start(cid)
        ip = api.inspect_container(cid)["NetworkSettings"]["Networks"][name]["IPAddress"]
        state = Path(tempfile.mkdtemp(prefix="maka-egress-bench-state-"))
        options = {"egress_network": name, "network": name, "egress_hosts": {"allowed.test": ip}, "state_dir": state}
        # concurrency 4: what --maka-concurrency 4 passes (one executor serves both passes of measure())
        fields = DockerOptions.model_fields
        if "concurrency" in fields:  # the code before it had no such key
            options["concurrency"] = 4
        measure(
            "docker",
            lambda: DockerExecutor(DockerOptions(**options, slots_per_engine=8, prestart=False)),
            ("allowed.test", 8080),
            None,
            f"http://{ip}:8080/",
            args,
        )
    finally:
        api.remove_container(cid, force=True)
        api.remove_network(net)


if __name__ == "__main__":
    raise SystemExit(main())
