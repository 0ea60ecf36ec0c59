"""Refuse and log what a local sandbox sends past the egress proxy: a TUN device in its network namespace.

bwrap's ``--unshare-net`` leaves the sandbox only its loopback, so a packet for any other
address fails with ``ENETUNREACH`` and is never seen. For each command of an allowlist
phase the harness (root on the host) adds one device: bwrap is started with
``--json-status-fd`` (it reports the sandbox's pid) and ``--block-fd`` (it waits before
running the command); a thread of the harness enters the sandbox's network namespace
(``setns``), creates the TUN device ``maka0`` there (address 192.0.0.8, RFC 7600's dummy
address, IPv6 off, the default route), goes back and releases the command. The subject
gains nothing: no capability, no ``/dev/net/tun``, no process of the harness inside; the
device's file descriptor stays on the host. The thread reads what the sandbox sends to the
device: each packet is counted in its flow (``PastProxyFlows``) and answered with a
refusal (``packets.refusal``); nothing is forwarded anywhere, and once the descriptor is
closed (the command ended, or the thread died) the device and its route are gone, so a
packet fails with ``ENETUNREACH`` again. Reading is rate-limited per command (a flood only
fills the device's queue, whose overflow the kernel drops).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import json
import os
import select
import socket
import struct
import threading
import time
from collections.abc import Callable

from . import packets
from .log import PastProxyFlows

TUN_NAME = "maka0"
#: RFC 7600's IPv4 dummy address: the sandbox's address on the device.
ADDRESS = "192.0.0.8"
TUN_DEVICE = "/dev/net/tun"
#: Packets read per second per command (and the burst): more wait in the device's queue.
RATE = 2000.0
_CLONE_NEWNET = 0x40000000
_TUNSETIFF, _IFF_TUN, _IFF_NO_PI = 0x400454CA, 0x0001, 0x1000
_SIOCSIFADDR, _SIOCSIFFLAGS, _SIOCADDRT = 0x8916, 0x8914, 0x890B
_IFF_UP, _RTF_UP = 0x1, 0x1


def unavailable() -> str | None:
    """Why traffic past the proxy cannot be logged on this host (None: it can)."""
    if os.geteuid() != 0:
        return "the harness does not run as root (entering the sandbox's network namespace needs it)"
    if not os.path.exists(TUN_DEVICE):
        return f"no {TUN_DEVICE} on this host"
    return None


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc().setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def _ifreq(payload: bytes) -> bytes:
    return struct.pack("16s", TUN_NAME.encode()) + payload.ljust(24, b"\0")


def _sockaddr(ip: str) -> bytes:
    return struct.pack("=H2s4s8s", socket.AF_INET, b"", socket.inet_aton(ip), b"")


def _make_device() -> int:
    """In the current thread's network namespace: the device up, with its address and the default route."""
    tun = os.open(TUN_DEVICE, os.O_RDWR | os.O_CLOEXEC)
    try:
        fcntl.ioctl(tun, _TUNSETIFF, _ifreq(struct.pack("=H", _IFF_TUN | _IFF_NO_PI)))
        with contextlib.suppress(OSError), open(f"/proc/sys/net/ipv6/conf/{TUN_NAME}/disable_ipv6", "w") as f:
            f.write("1")  # no link-local address, no router solicitations
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            fcntl.ioctl(s, _SIOCSIFADDR, _ifreq(_sockaddr(ADDRESS)))
            fcntl.ioctl(s, _SIOCSIFFLAGS, _ifreq(struct.pack("=H", _IFF_UP)))
            dev = ctypes.create_string_buffer(TUN_NAME.encode())
            any_ = _sockaddr("0.0.0.0")
            # struct rtentry (x86_64/aarch64 LP64): pad, dst, gateway, genmask, flags, ..., metric, dev, mtu...
            route = struct.pack(
                "@L16s16s16sHhLPhPLLH6x", 0, any_, any_, any_, _RTF_UP, 0, 0, 0, 0, ctypes.addressof(dev), 0, 0, 0
            )
            fcntl.ioctl(s, _SIOCADDRT, route)
    except BaseException:
        os.close(tun)
        raise
    return tun


class TunGuard:
    """One command's device: the bwrap arguments that hold it until the device is made, and the reader."""

    def __init__(self, flows: PastProxyFlows, failed: Callable[[str], None]) -> None:
        self.flows = flows
        self._failed = failed
        self._status_r, self._status_w = os.pipe()
        self._block_r, self._block_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="maka-tunguard", daemon=True)
        #: Set once the reader has read all it will read.
        self._read = threading.Event()
        #: All bwrap wrote to its status pipe (``status``), complete once ``_closed`` is set.
        self._status_data = b""
        self._closed = threading.Event()
        #: The reader's token bucket.
        self._tokens, self._last = RATE, time.monotonic()

    @property
    def args(self) -> tuple[str, ...]:
        return ("--json-status-fd", str(self._status_w), "--block-fd", str(self._block_r))

    @property
    def fds(self) -> tuple[int, ...]:
        """The descriptors bwrap must inherit."""
        return (self._status_w, self._block_r)

    def start(self) -> None:
        self._thread.start()

    def launched(self, ended: bool = False) -> None:
        """Close the harness's copies of bwrap's ends (once bwrap has them, or will never run).

        ``ended``: the command is over; return once the reader has read what it sent.
        """
        for fd in (self._status_w, self._block_r):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._status_w = self._block_r = -1  # closed once: the numbers may be another file's next
        if ended:
            self._read.wait(10)

    def _run(self) -> None:
        tun = None
        try:
            status = self._status()
            if status is not None:
                tun = self._enter_and_make(int(status["child-pid"]), int(status["net-namespace"]))
        except Exception as exc:  # never a failed command for lack of logging: say so, run it unguarded
            self._failed(f"not logged: the sandbox's TUN device could not be made: {exc}")
        finally:
            with contextlib.suppress(OSError):
                os.write(self._block_w, b"1")
            os.close(self._block_w)
        try:
            if tun is not None:
                self._serve(tun)
        finally:
            self._read.set()
            if tun is not None:  # removes the device: the kernel takes milliseconds (after ``launched`` returned)
                os.close(tun)
            self._drain()

    def _status(self) -> dict[str, int] | None:
        """bwrap's first status message (the sandbox's pid and namespaces), None if bwrap ended first."""
        while b"}" not in self._status_data:
            chunk = os.read(self._status_r, 4096)
            if not chunk:
                return None
            self._status_data += chunk
        data = self._status_data
        return dict(json.loads(data[: data.index(b"}") + 1]))

    def _enter_and_make(self, pid: int, netns: int) -> int:
        """The device, made in the network namespace ``netns`` of process ``pid`` (checked: the pid may be
        another process's by now if the sandbox was killed meanwhile, and the harness's own namespace
        must never get the device or its route)."""
        home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            try:
                if os.fstat(target).st_ino != netns or os.fstat(home).st_ino == netns:
                    raise OSError(f"process {pid} is not in the sandbox's network namespace any more")
                _setns(target)
            finally:
                os.close(target)
            try:
                return _make_device()
            finally:
                _setns(home)
        finally:
            os.close(home)

    def _serve(self, tun: int) -> None:
        """Read, log and refuse until bwrap's status pipe ends (the command is over), then what is left."""
        os.set_blocking(tun, False)
        poll = select.poll()
        poll.register(tun, select.POLLIN)
        poll.register(self._status_r, select.POLLIN)
        while True:
            ready = {fd for fd, _ in poll.poll()}
            if tun in ready:
                self._read_all(tun)
            if self._status_r in ready and not self._more_status():
                self._read_all(tun)  # what the command sent before it ended is queued on the device
                return

    def _read_all(self, tun: int) -> None:
        """Every packet queued on the device, at most ``RATE`` a second (a flood waits, then overflows)."""
        while True:
            now = time.monotonic()
            self._tokens = min(RATE, self._tokens + (now - self._last) * RATE)
            self._last = now
            if self._tokens < 1:
                time.sleep((1 - self._tokens) / RATE)
                continue
            try:
                data = os.read(tun, 65536)
            except BlockingIOError:
                return
            self._tokens -= 1
            self._refuse(tun, data, time.time())

    def _refuse(self, tun: int, data: bytes, when: float) -> None:
        p = packets.parse(data)
        if p is None:  # not IPv4 (the device has no IPv6): nothing to log or answer
            return
        self.flows.add(when, p.method, p.sport, p.destination, p.length)
        answer = packets.refusal(data, p)
        if answer is not None:
            with contextlib.suppress(OSError):
                os.write(tun, answer)

    def _more_status(self) -> bool:
        """Read what bwrap wrote next to its status pipe; False at its end."""
        chunk = os.read(self._status_r, 4096)
        self._status_data += chunk
        return bool(chunk)

    def _drain(self) -> None:
        """Read the status pipe to its end (bwrap must never write to a closed pipe), then close it."""
        with contextlib.suppress(OSError):
            while self._more_status():
                pass
        os.close(self._status_r)
        self._closed.set()

    def status(self) -> bytes | None:
        """Once bwrap has exited: all it wrote to ``--json-status-fd`` (an exit code only for a
        command that ran); None if that could not be read to its end."""
        return self._status_data if self._closed.wait(10) else None
