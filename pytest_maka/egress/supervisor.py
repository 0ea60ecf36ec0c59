"""The Docker proxy container's main process: switches phases on command, without ``docker exec``.

Standard library only (with ``relay.py`` and ``wire.py`` beside it in ``/etc/maka``). It reads
one JSON command per line on its standard input (the harness attaches to the container once)
and answers one JSON line on its standard output:

- ``{"cmd": "ping"}`` -> ``{"ok": true}`` (sent once the relay code is imported);
- ``{"cmd": "start", "name", "filter", "conf", "conf_path", "filter_path", "log_path",
  "listen", "dns"}``: checks that the container forwards nothing (``ip_forward`` is 0),
  writes the phase's tinyproxy filter and configuration, starts tinyproxy (in the foreground, a child) and
  the relay in front of it (in this process, on a loop thread), answers once both listen;
  a failure answers ``{"ok": false, "code": 3|4|6, "out": ...}`` (tinyproxy, relay, forwarding);
- ``{"cmd": "stop"}``: stops the relay (it records the connections it cuts), then tinyproxy,
  waits until tinyproxy is gone and answers with tinyproxy's log text (``log``) and the
  relay's records as JSON lines (``relay``).

If this process dies, the container ends with it (``init`` reaps, nothing restarts it), so a
dead supervisor can never leave a proxy running with stale rules: the harness's next command
gets end-of-file and the phase is an ``infra_failure``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Any

try:
    from . import relay
except ImportError:  # a script in the proxy container, with relay.py beside it
    import relay  # type: ignore[no-redef]

PID_PATH = "/run/maka/tinyproxy.pid"
#: tinyproxy's own output (it logs to its LogFile; this holds what it says before it can).
ERR_PATH = "/run/maka/tinyproxy.err"
IP_FORWARD = "/proc/sys/net/ipv4/ip_forward"


def _split(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


class Supervisor:
    """One phase at a time: tinyproxy (a child process) and a relay on this process's loop thread."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.relay: relay.Relay | None = None
        self.records: list[str] = []
        self.log_path: str | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, msg: dict[str, Any]) -> dict[str, Any]:
        with open(IP_FORWARD) as f:
            if f.read().strip() != "0":
                return {"ok": False, "code": 6, "out": "ip_forward is on"}
        for path, text in ((msg["filter_path"], msg["filter"]), (msg["conf_path"], msg["conf"])):
            with open(path, "w") as f:
                f.write(text)
        self.log_path, self.records = msg["log_path"], []
        with open(ERR_PATH, "w") as err:  # in the foreground: no daemon's fork, and it is this process's child
            self.proc = subprocess.Popen(["tinyproxy", "-d", "-c", msg["conf_path"]], stdin=subprocess.DEVNULL,
                                         stdout=err, stderr=err)  # fmt: skip
        if not _listening(self.upstream, self.proc):
            self._stop_tinyproxy()
            with open(ERR_PATH, errors="replace") as err:
                said = err.read()[-300:]
            return {"ok": False, "code": 3, "out": said or f"tinyproxy does not listen on port {self.upstream[1]}"}
        records = self.records

        async def listen() -> relay.Relay:
            r = relay.Relay(self.upstream, lambda rec: records.append(json.dumps(rec, separators=(",", ":"))))
            await r.listen_tcp(*_split(msg["listen"]))
            if msg.get("dns"):
                await r.listen_dns(*_split(msg["dns"]))
            return r

        try:
            self.relay = relay.run(listen())
        except Exception as exc:  # the port taken, an address gone: the phase must not run
            self._stop_tinyproxy()
            return {"ok": False, "code": 4, "out": f"{type(exc).__name__}: {exc}"}
        return {"ok": True}

    def stop(self) -> dict[str, Any]:
        if self.relay is not None:
            relay.run(self.relay.close())
            self.relay = None
        self._stop_tinyproxy()
        text = ""
        if self.log_path is not None:
            try:
                with open(self.log_path, errors="replace") as f:
                    text = f.read()
            except OSError:
                pass
        return {"ok": True, "log": text, "relay": "\n".join(self.records) + "\n"}

    def _stop_tinyproxy(self) -> None:
        """SIGTERM, and SIGKILL after 5 s; returns once it is gone (its log is then complete)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        killer = threading.Timer(5.0, proc.kill)  # Popen.wait(timeout) polls in sleeps of up to 50 ms
        killer.start()
        try:
            proc.terminate()
            proc.wait()
        finally:
            killer.cancel()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(PID_PATH)


def _listening(address: tuple[str, int], proc: subprocess.Popen[bytes], timeout: float = 5.0) -> bool:
    """True once something accepts connections at ``address``; False if ``proc`` ends first or in time."""
    end = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(address, timeout=1).close()
            return True
        except OSError:
            if time.monotonic() >= end or proc.poll() is not None:
                return False
            time.sleep(0.002)


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    sup = Supervisor(int(args[0]) if args else 3129)
    relay.loop()  # the loop thread, before the first phase needs it
    out = sys.stdout
    for line in sys.stdin:
        try:
            msg = json.loads(line)
            cmd = msg.get("cmd")
            if cmd == "start":
                reply = sup.start(msg)
            elif cmd == "stop":
                reply = sup.stop()
            elif cmd == "ping":
                reply = {"ok": True}
            else:
                reply = {"ok": False, "code": 2, "out": f"unknown command {cmd!r}"}
        except Exception as exc:  # answer, whatever went wrong: the harness fails the phase
            reply = {"ok": False, "code": 1, "out": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
