"""What a Dask worker runs: one attempt of one cell, with this machine's executor.

The worker loads the cohort from the spec path it is given (the spec and its task sources
must be readable at the same path on every machine: a shared filesystem, or the same
checkout), once per spec and worker process, through pytest's own plugin machinery so that
every adapter, subject and executor plugin installed on the worker applies. It runs the
attempt into a private output directory, packs the attempt's directory into a tarball and
returns it with the record; the controller writes both. Nothing here writes the cohort's
ledger.

A Dask worker that dies makes the scheduler run its tasks again elsewhere. An attempt must
not silently run twice, so the first execution of a task claims it (a Dask ``Variable``
named by the attempt's token holds the worker's address); a re-execution finds the claim
and returns ``lost`` with that address instead of running, and the controller records the
lost attempt as an infra failure naming the worker, then retries per the spec's rules.
"""

from __future__ import annotations

import io
import shutil
import tarfile
import tempfile
import threading
from pathlib import Path
from typing import Any

from ..core import cancel

_lock = threading.Lock()
_sessions: dict[str, Any] = {}


def _session(spec_path: str) -> Any:
    """A MakaSession for ``spec_path`` on this worker (made once, through pytest's config)."""
    with _lock:
        if spec_path not in _sessions:
            from _pytest.config import _prepareconfig

            from ..fixtures import MAKA_KEY

            out = tempfile.mkdtemp(prefix="maka-dask-")
            args = [f"--maka-spec={spec_path}", f"--maka-out={out}", "-p", "no:cacheprovider", "-p", "no:faulthandler"]
            config = _prepareconfig(args)
            config._do_configure()
            _sessions[spec_path] = config.stash[MAKA_KEY]
        return _sessions[spec_path]


def _claim(token: str, address: str) -> str | None:
    """Claim the attempt for this worker; the address of an earlier claimant if there was one."""
    from distributed import Variable

    claim = Variable(f"maka-attempt-{token}")
    try:
        earlier = claim.get(timeout=0.2)
    except TimeoutError:
        earlier = None
    if earlier:
        return str(earlier)
    claim.set(address)
    return None


def _pack(directory: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(directory, arcname=".")
    return buffer.getvalue()


def run_attempt_remote(spec_path: str, cell_key: str, number: int, token: str) -> dict[str, Any]:
    """Run attempt ``number`` of the cell ``cell_key`` here; the record and the artifacts."""
    from distributed import get_worker

    from ..fixtures import lease_function, workspace_path

    address = get_worker().address
    earlier = _claim(token, address)
    if earlier is not None:
        return {"lost": earlier}
    maka = _session(spec_path)
    cell = next((c for c in maka.cohort.cells if c.key == cell_key), None)
    if cell is None:
        return {"error": f"the Dask worker {address} reads a different cohort at {spec_path}: no cell {cell_key}"}
    runner = maka.runner
    attempt_dir = runner.attempt_dir(cell, number)
    scratch = workspace_path(maka, cell)
    scope, done = cancel.Scope(), threading.Event()
    watcher = threading.Thread(target=_watch, args=(token, scope, done), name="maka-cancel-watch", daemon=True)
    try:
        with scope:
            watcher.start()
            record = runner.run_attempt(cell, number, lease_function(maka), scratch)
        record["worker"] = address
        return {"record": record, "artifacts": _pack(attempt_dir)}
    except KeyboardInterrupt:
        return {"error": "cancelled by the controller"}
    finally:
        done.set()
        shutil.rmtree(attempt_dir, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)


def cancel_event(token: str, client: Any = None) -> Any:
    """The Dask Event the controller sets to stop attempt ``token`` where it runs."""
    from distributed import Event

    return Event(f"maka-cancel-{token}", client=client)


def _watch(token: str, scope: cancel.Scope, done: threading.Event) -> None:
    """Cancel the attempt (as Ctrl-C would here) once the controller asks; end with it."""
    from distributed import get_client

    event = cancel_event(token, get_client())
    while not done.is_set():
        try:
            if event.wait(timeout=1):
                scope.cancel()
                return
        except Exception:
            return  # the scheduler is gone: nothing will ask any more
