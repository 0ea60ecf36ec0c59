"""What a Dask worker runs: one attempt of one cell, with this machine's executor.

The worker loads the cohort from the spec path it is given when this machine has the spec
and its task sources there (a shared filesystem, the same checkout), else from its copy of
the bundle the controller shipped (``ship``), once per spec and worker process, into a
pytest-free ``Engine`` (``boot``: no pytest configuration on a worker) whose plugins are
the ones installed on the worker and the project's conftest.py hooks. It runs the attempt
into a private output directory, packs the attempt's directory into a tarball and returns
it with the record; the controller writes both. Nothing here writes the cohort's ledger.

A Dask worker that dies makes the scheduler run its tasks again elsewhere. An attempt must
not silently run twice, so the first execution of a task claims it (scheduler metadata
under the attempt's token holds the worker's address); a re-execution finds the claim
and returns ``lost`` with that address instead of running, and the controller records the
lost attempt as an infra failure naming the worker, then retries per the spec's rules.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
import time
import uuid
from contextlib import suppress
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from ..core import cancel
from ..core.record_model import AttemptRecord
from ..engine import Engine
from . import boot, ship, transfer

#: The Dask event topic of remote phases (the controller's live view subscribes to it).
PHASE_TOPIC = "maka-phase"

_lock = threading.Lock()
#: The engine of each spec this worker process has run attempts of, and its private output directory.
_engines: dict[str, tuple[Engine, str]] = {}


#: (the Dask worker, the attempt's token) while this thread runs an attempt the controller sent.
_relay_to: ContextVar[tuple[Any, str] | None] = ContextVar("maka_relay_to", default=None)


class _Relay:
    """An AttemptObserver around the worker engine's own: also sends each phase of the
    attempt this thread runs to the controller, as a Dask event ``{token, phase, detail}``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def attempt_started(self, cell: Any, attempt: int) -> None:
        self.inner.attempt_started(cell, attempt)

    def phase(self, cell: Any, attempt: int, phase: str, detail: str | None) -> None:
        self.inner.phase(cell, attempt, phase, detail)
        target = _relay_to.get()
        if target is not None:
            worker, token = target
            with suppress(Exception):  # a view's update must never cost the attempt
                worker.log_event(PHASE_TOPIC, {"token": token, "phase": phase, "detail": detail})

    def attempt_finished(self, cell: Any, record: AttemptRecord) -> None:
        self.inner.attempt_finished(cell, record)


def _engine(spec_path: str, invocation_dir: str | None) -> Engine:
    """The engine for ``spec_path`` on this worker (built once, without pytest: ``boot``).

    Its plugins are found from the controller's invocation directory when this machine has
    it (so the same conftest.py hooks apply), else from the spec's directory; its private
    output directory lives in the Dask worker's local directory."""
    with _lock:
        if spec_path not in _engines:
            from distributed import get_worker

            out = tempfile.mkdtemp(prefix="maka-", dir=get_worker().local_directory)
            anchor = invocation_dir if invocation_dir and Path(invocation_dir).is_dir() else str(Path(spec_path).parent)
            try:
                engine = boot.build(Path(spec_path), Path(anchor), Path(out), observer=_Relay)
            except BaseException:
                shutil.rmtree(out, ignore_errors=True)
                raise
            if not _engines:
                atexit.register(close_all)
            _engines[spec_path] = (engine, out)
        return _engines[spec_path][0]


def close_all() -> None:
    """At the worker's exit: close every engine (its executor sweeps what dead processes left)."""
    with _lock:
        try:
            for engine, out in _engines.values():
                try:
                    engine.close()
                finally:
                    shutil.rmtree(out, ignore_errors=True)
        finally:
            _engines.clear()
            ship.remove_all()


def _claim(token: str, address: str) -> str | None:
    """Claim the attempt for this worker; the address of an earlier claimant if there was one.

    The claim is scheduler metadata, read and written without waiting: a ``Variable.get``
    with a timeout waits on the scheduler, and under load Dask's ``sync`` turned such a wait
    into a spurious ``TimeoutError`` or an ``UnboundLocalError`` (a cancelled call)."""
    from distributed import get_client

    client = get_client()
    mine = f"{address} {uuid.uuid4().hex}"  # tells this call's own claim from an earlier execution's
    for tries_left in (2, 1, 0):
        try:
            earlier = client.get_metadata(["maka-attempt", token], default=None)
            if earlier and earlier != mine:
                return str(earlier).split(" ", 1)[0]
            client.set_metadata(["maka-attempt", token], mine)
            return None
        except (UnboundLocalError, TimeoutError, OSError):
            # Dask's sync() reports a call cancelled by a reconnecting client as UnboundLocalError
            if not tries_left:
                raise
            time.sleep(0.5)
    return None


def _sweep(engine: Engine) -> None:
    """Remove what the lost worker's leases left on this machine (if it ran here): a fresh
    executor's prepare and close remove the leftovers of dead processes, on every executor."""
    fresh = type(engine.executor)(engine.cohort.loaded.executor.options)
    try:
        fresh.prepare([])
    finally:
        fresh.close()


def run_attempt_remote(
    spec_path: str,
    cell_key: str,
    number: int,
    token: str,
    cap: int,
    invocation_dir: str | None = None,
    shipped: tuple[str, str, tuple[str, ...], bytes] | None = None,
) -> dict[str, Any]:
    """Run attempt ``number`` of the cell ``cell_key`` here; the record and the artifacts.

    ``shipped`` is (key, spec path, task source paths, the bundle's bytes) of ``ship``: used
    when this machine lacks the spec or a task source at the controller's path."""
    from distributed import get_worker

    address = get_worker().address
    if shipped is not None and not ship.has_all(shipped[1], shipped[2]):
        key, spec, _sources, data = shipped
        spec_path = ship.local_spec(get_worker().local_directory, key, spec, data)
    earlier = _claim(token, address)
    if earlier is not None:
        with suppress(Exception):  # the loss is what matters: report it whatever the sweep met
            _sweep(_engine(spec_path, invocation_dir))
        return {"lost": earlier}
    engine = _engine(spec_path, invocation_dir)
    cell = engine.cell(cell_key)
    if cell is None:
        return {"error": f"the Dask worker {address} reads a different cohort at {spec_path}: no cell {cell_key}"}
    runner = engine.runner
    attempt_dir = runner.attempt_dir(cell, number)
    scratch = engine.workspace(cell)
    scope, done = cancel.Scope(), threading.Event()
    watcher = threading.Thread(target=_watch, args=(token, scope, done), name="maka-cancel-watch", daemon=True)
    relaying = _relay_to.set((get_worker(), token))
    try:
        with scope:
            watcher.start()
            record = runner.run_attempt(cell, number, engine.lease(), scratch)
        data, facts = transfer.pack(attempt_dir, cap)
        record = record.updated(worker=address, transfer=facts)
        return {"record": record.to_json(), "artifacts": data}  # JSON on the wire
    except KeyboardInterrupt:
        return {"error": "cancelled by the controller"}
    finally:
        done.set()
        _relay_to.reset(relaying)
        shutil.rmtree(attempt_dir, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)


def cancel_name(token: str) -> str:
    """The name of the Dask Event the controller sets to stop attempt ``token`` where it runs."""
    return f"maka-cancel-{token}"


def cancel_event(token: str, client: Any = None) -> Any:
    """The Dask Event the controller sets to stop attempt ``token`` where it runs."""
    from distributed import Event

    return Event(cancel_name(token), client=client)


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
