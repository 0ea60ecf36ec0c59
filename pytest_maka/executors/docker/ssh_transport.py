"""Docker over ``ssh://`` through the system ``ssh``: one ``ssh`` per request, ended when the
response has been read, and closing one whose ``ssh`` is gone never raises.

docker-py's shell-out transport (``use_ssh_client=True``) runs ``ssh ... docker system
dial-stdio`` per request. Its socket's ``close`` writes to ``ssh``'s stdin; once a
hijacked stream (``exec_start``) has ended, the remote side closes and ``ssh`` exits, so
that write raises ``BrokenPipeError`` out of ``exec_start`` whenever ``ssh`` was quicker
than the close (a race, lost often when four cells start at once). It also makes a new pool
per request and leaves each ``ssh`` to the garbage collector. Here each URL has one pool,
a connection handed back is ended at once, and ending tolerates an ``ssh`` already gone.
"""

from __future__ import annotations

import contextlib
import subprocess
from typing import Any

import docker
import urllib3.exceptions
from docker.transport.sshconn import SSHConnection, SSHConnectionPool, SSHHTTPAdapter, SSHSocket

SSH_MOUNT = "http+docker://ssh"


class QuietSSHSocket(SSHSocket):
    """An ``ssh`` pipe whose ``close`` ends the process whether or not it is still there."""

    def close(self) -> None:
        proc = self.proc
        if proc is None:
            return
        self.proc = None
        with contextlib.suppress(OSError, ValueError):
            proc.stdin.write(b"\n\n")  # what docker-py sends: lets dial-stdio end cleanly
            proc.stdin.flush()
        if proc.poll() is None:
            proc.terminate()
        with contextlib.suppress(OSError, ValueError):
            proc.stdin.close()  # stdout stays open: http.client may still flush the response
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(2)


class QuietSSHConnection(SSHConnection):
    def connect(self) -> None:
        sock = QuietSSHSocket(self.ssh_host)
        sock.settimeout(self.timeout)
        sock.connect()
        self.sock = sock


class OneShotSSHConnectionPool(SSHConnectionPool):
    """Each request gets a fresh ``ssh`` (http.client closes a connection's output pipe with
    its response, so none can be reused); a connection handed back is ended at once."""

    def _new_conn(self) -> Any:
        return QuietSSHConnection(None, self.timeout, self.ssh_host)

    def _get_conn(self, timeout: float | None = None) -> Any:
        if self.pool is None:
            raise urllib3.exceptions.ClosedPoolError(self, "Pool is closed.")
        return self._new_conn()

    def _put_conn(self, conn: Any) -> None:
        if conn is not None:
            conn.close()


class OneShotSSHAdapter(SSHHTTPAdapter):
    """One pool per URL for the shell-out ``ssh`` transport."""

    def __init__(self, base_url: str, *, timeout: float, max_pool_size: int) -> None:
        super().__init__(base_url, timeout=timeout, max_pool_size=max_pool_size, shell_out=True)

    def get_connection(self, url: Any, proxies: Any = None) -> Any:
        with self.pools.lock:
            pool = self.pools.get(url)
            if pool is None:
                pool = OneShotSSHConnectionPool(timeout=self.timeout, maxsize=self.max_pool_size, host=self.ssh_host)
                self.pools[url] = pool
            return pool


def api_client(url: str, *, timeout: float, max_pool_size: int = 10) -> docker.APIClient:
    """An API client for ``url``; ``ssh://`` URLs get the transport above."""
    if not url.startswith("ssh://"):
        return docker.APIClient(base_url=url, version="auto", timeout=timeout, max_pool_size=max_pool_size)
    client = docker.APIClient(
        base_url=url, version=docker.constants.DEFAULT_DOCKER_API_VERSION, timeout=timeout, use_ssh_client=True
    )
    client.close()  # the stock adapter: it has opened nothing yet
    adapter = OneShotSSHAdapter(url, timeout=timeout, max_pool_size=max_pool_size)
    client._custom_adapter = adapter
    client.mount(SSH_MOUNT, adapter)
    client._version = client._retrieve_server_version()
    return client
