"""When the harness is a container's main process (PID 1), a minimal init stays PID 1 and reaps.

Orphans of a PID namespace are re-parented to its PID 1, which must wait for them or they stay
zombies (each ``bwrap`` of a sandbox leaves one). The harness waits only for the children it
started, and reaping every child in it would steal exit statuses its own ``wait`` calls are
owed. So, as PID 1, the process forks once: the child goes on as the harness (PID 2), and the
parent only reaps every child that ends, forwards the signals a container's PID 1 is sent
(``docker stop``'s SIGTERM, ``kill``'s SIGINT) to the harness, and exits with the harness's
status once it has ended. Signals sent by a terminal already reach the harness's process
group, so those are not forwarded a second time.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

#: Set to 1 to keep the harness itself as PID 1 (no init is forked).
NO_INIT_ENV = "MAKA_NO_INIT"
FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGWINCH,
)
#: ``si_code`` of a signal the kernel sent (a terminal's Ctrl-C, a hang-up): the group got it too.
SI_KERNEL = 0x80


def become_init() -> None:
    """As PID 1: fork; the parent reaps and forwards until the harness ends, the child returns."""
    if os.getpid() != 1 or os.environ.get(NO_INIT_ENV) == "1":
        return
    if threading.active_count() > 1:  # a fork would lose the other threads: stay as we are
        return
    watched = {*FORWARDED, signal.SIGCHLD}
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, watched)  # none is lost between fork and wait
    try:
        child = os.fork()
    except OSError:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        return
    if child == 0:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        return
    os._exit(serve(child, watched))


def serve(child: int, watched: set[signal.Signals]) -> int:
    """Reap every child that ends and forward signals to ``child``; its exit code once it has ended."""
    with contextlib.suppress(OSError):  # hold no pipe of the harness's output open after it ends
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
    code: int | None = None
    while code is None:
        info = signal.sigwaitinfo(watched)
        if info.si_signo == signal.SIGCHLD:
            code = reap(child)
        elif info.si_code != SI_KERNEL and info.si_pid != child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, info.si_signo)
    reap(child)
    return code


def reap(child: int) -> int | None:
    """Wait for every child that has ended; the exit code of ``child`` if it was one of them."""
    code = None
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:  # no child left at all
            return code
        if pid == 0:
            return code
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            code = 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a shell says


def main_guard() -> None:
    """Call from an entry point before anything starts threads (a no-op unless PID 1)."""
    if sys.platform.startswith("linux"):
        become_init()
