"""A TCP relay on 127.0.0.1 in front of the real engine's unix socket that a test cuts mid-request.

The executor reaches the engine as ``tcp://127.0.0.1:PORT``; ``cut_when(method, path part,
bytes)`` drops every connection and stops listening once that many response bytes of such a
request went through, as an engine that dies in the middle of a step (a ping then fails too).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Iterator

ENGINE_SOCKET = "/var/run/docker.sock"
METHODS = (b"GET ", b"POST ", b"PUT ", b"HEAD ", b"DELETE ")


class CutRelay:
    def __init__(self, engine_socket: str = ENGINE_SOCKET) -> None:
        self._engine = engine_socket
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"tcp://127.0.0.1:{self._listener.getsockname()[1]}"
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._rule: tuple[bytes, bytes, int] | None = None
        self.cut = threading.Event()
        #: The request line of the request during which the relay was cut.
        self.cut_during = ""
        threading.Thread(target=self._accept, daemon=True).start()

    def cut_when(self, method: str, path_part: str, after_bytes: int) -> None:
        self._rule = (method.encode() + b" ", path_part.encode(), after_bytes)

    def _accept(self) -> None:
        while not self.cut.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self._engine)
            with self._lock:
                if self.cut.is_set():
                    client.close()
                    upstream.close()
                    return
                self._conns += [client, upstream]
            state = {"request": b"", "sent": 0}
            threading.Thread(target=self._pump, args=(client, upstream, state, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, state, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, state: dict, to_engine: bool) -> None:
        try:
            while data := src.recv(65536):
                if to_engine:
                    if data.startswith(METHODS):
                        state["request"], state["sent"] = data.split(b"\r\n", 1)[0], 0
                else:
                    state["sent"] += len(data)
                    if self._matches(state):
                        self._cut(state["request"])
                        return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

    def _matches(self, state: dict) -> bool:
        if self._rule is None:
            return False
        method, part, after = self._rule
        request: bytes = state["request"]
        return request.startswith(method) and part in request and state["sent"] >= after

    def _cut(self, request: bytes) -> None:
        """Stop listening and reset every connection (as a machine that drops off the network)."""
        with self._lock:
            if self.cut.is_set():
                return
            self.cut_during = request.decode(errors="replace")
            self.cut.set()
            with contextlib.suppress(OSError):
                self._listener.close()
            for conn in self._conns:
                with contextlib.suppress(OSError):
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    conn.close()

    def close(self) -> None:
        self._cut(b"(closed)")


@contextlib.contextmanager
def cut_relay() -> Iterator[CutRelay]:
    relay = CutRelay()
    try:
        yield relay
    finally:
        relay.close()
