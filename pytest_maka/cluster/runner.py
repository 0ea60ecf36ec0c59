"""The controller's side of a Dask cluster: each attempt becomes one Dask task.

``ClusterRunner`` is the CellRunner with one change: ``run_attempt`` submits the attempt to
the cluster (resource ``cells=1``, so ``dask worker --resources cells=N`` bounds the cells
per machine) and waits for it on the lookahead's pool thread; the resume, retry and
earliest-valid-wins rules are the CellRunner's own. The controller alone writes the
ledger and the artifacts it receives, so the ledger's guarantees are unchanged. A task
whose worker died is recorded ``infra_failure`` naming the worker (and retried as the
spec's ``retries.infra`` says); Ctrl-C cancels the waiting tasks and records the attempts
``agent_aborted`` (a task a worker has already started runs to its end there: Dask cannot
stop a running task; its result is dropped). Every wait on the cluster is bounded (``wait``):
an attempt the cluster can no longer deliver is an ``infra_failure`` that says why.
"""

from __future__ import annotations

import asyncio
import shutil
import tarfile
import threading
import time
import uuid
from contextlib import suppress
from pathlib import Path
from typing import Any

from ..core import cancel, progress
from ..core.cell import Cell
from ..core.record_model import AttemptRecord
from ..core.records import attempt_record
from ..core.spec import ClusterEntry
from ..core.taxonomy import Status
from ..run.lifecycle import CellRunner, LeaseFn
from . import ship, transfer, wait
from .remote import PHASE_TOPIC, cancel_name, run_attempt_remote


class ClusterRunner(CellRunner):
    """Runs every attempt on a Dask cluster; records them here."""

    client: Any
    spec_path: Path
    #: ``executor.cluster``: max_transfer_bytes (what a worker may send back), no_worker_timeout_sec.
    settings_cluster: ClusterEntry
    #: The controller's invocation directory: a worker that has it configures pytest from there.
    invocation_dir: Path | None
    #: Attempts waiting on the cluster, by token: where the phases the workers report go.
    _in_flight: dict[str, tuple[Cell, int]]
    _relay_lock: threading.Lock
    #: The spec and its task sources, for workers without them (one Dask task, see ``ship``).
    bundle: ship.Bundle
    _bundle_future: Any
    _bundle_lock: threading.Lock
    #: The look at the cluster every waiting attempt shares (``wait``).
    _watch: wait.Watch

    @classmethod
    def wrap(
        cls,
        runner: CellRunner,
        client: Any,
        spec_path: Path,
        cluster: ClusterEntry,
        invocation_dir: Path | None,
        bundle: ship.Bundle,
    ) -> ClusterRunner:
        made = cls.__new__(cls)
        made.__dict__.update(runner.__dict__)
        made.client = client
        made.spec_path = spec_path
        made.settings_cluster = cluster
        made.invocation_dir = invocation_dir
        made._in_flight, made._relay_lock = {}, threading.Lock()
        made.bundle = bundle
        made._bundle_future, made._bundle_lock = None, threading.Lock()
        made._watch = wait.Watch(client)
        client.subscribe_topic(PHASE_TOPIC, made._on_phase)
        return made

    def _on_phase(self, event: tuple[float, dict[str, Any]]) -> None:
        """A phase a worker reports (on the client's thread): to this process's observer."""
        _, msg = event
        with self._relay_lock:
            running = self._in_flight.get(msg.get("token")) if isinstance(msg, dict) else None
            if running is not None and self.observer is not None:
                self.observer.phase(*running, str(msg.get("phase")), msg.get("detail"))

    def run_attempt(self, cell: Cell, number: int, lease: LeaseFn, scratch: Path) -> AttemptRecord:
        with progress.attempt_scope(self.observer, cell, number):
            progress.phase("queued on the cluster")
            started = time.time()
            token = uuid.uuid4().hex
            with self._relay_lock:
                self._in_flight[token] = (cell, number)
            future = self.client.submit(
                run_attempt_remote,
                str(self.spec_path),
                cell.key,
                number,
                token,
                self.settings_cluster.max_transfer_bytes,
                str(self.invocation_dir) if self.invocation_dir else None,
                self._shipped(),
                resources={"cells": 1},
                pure=False,
                key=f"maka-{cell.key}-a{number}-{uuid.uuid4().hex[:8]}",
            )
            try:
                with cancel.on_cancel(lambda: self._stop(future, token)):
                    outcome = self._outcome(future, token)
            except (KeyboardInterrupt, asyncio.CancelledError):
                self._done(token)
                self._stop(future, token)
                record = self._local(cell, number, started, Status.AGENT_ABORTED, "cancelled by the user or the system")
                self.ledger.append(record)
                progress.attempt_finished(record)
                raise KeyboardInterrupt from None
            self._done(token)
            if "record" in outcome:  # JSON on the wire: typed again here
                record = AttemptRecord.model_validate(outcome["record"])
                record = self._unpack(cell, number, outcome["artifacts"], record)
            else:
                record = self._local(cell, number, started, Status.INFRA_FAILURE, outcome["error"])
                record = record.updated(worker=outcome.get("worker"))
            record = record.updated(run=self.target_run(cell))  # the worker's runner knows nothing of earlier runs
            self.ledger.append(record)
            progress.attempt_finished(record)
            return record

    def _shipped(self) -> tuple[str, str, tuple[str, ...], Any]:
        """(key, spec path, source paths, the bundle's Dask future). The bundle is one task
        named by its content key, submitted once (submitting only queues a message: nothing
        waits under the lock); each attempt depends on it, so a worker fetches it once from a
        peer, and should every worker holding it die, Dask computes it again."""
        import dask

        with self._bundle_lock:
            if self._bundle_future is None:
                # the bundle is in the graph on purpose, under ship's own cap: no large-graph warning
                with dask.config.set({"distributed.admin.large-graph-warning-threshold": 2 * ship.MAX_BUNDLE_BYTES}):
                    self._bundle_future = self.client.submit(
                        ship.carry, self.bundle.data, key=f"maka-bundle-{self.bundle.key}", pure=False
                    )
        return self.bundle.key, self.bundle.spec, self.bundle.sources, self._bundle_future

    def _done(self, token: str) -> None:
        """No more phases of this attempt reach the observer (its record comes next)."""
        with self._relay_lock:
            self._in_flight.pop(token, None)

    def _stop(self, future: Any, token: str) -> None:
        """Drop the task if it is still queued; stop it where it runs if it has started."""
        future.cancel()
        with suppress(Exception):  # bounded: a scheduler that does not answer must not hold Ctrl-C up
            self.client.sync(self.client.scheduler.event_set, name=cancel_name(token), callback_timeout=wait.ASK_SEC)

    def _outcome(self, future: Any, token: str) -> dict[str, Any]:
        """The task's result, or what went wrong with the cluster, as an ``error``."""
        from distributed import KilledWorker

        try:
            result = wait.result(self._watch, future, self.settings_cluster.no_worker_timeout_sec)
        except wait.ClusterStalled as exc:
            self._stop(future, token)
            return {"error": f"infra: {exc}"}
        except KilledWorker as exc:
            return {"error": f"infra: Dask workers running this attempt kept dying ({exc})"}
        except Exception as exc:  # the task raised: a harness bug on the worker is infra, never the agent's
            return {"error": f"the attempt failed on the Dask cluster: {type(exc).__name__}: {exc}"}
        if "lost" in result:
            lost = result["lost"]
            return {"error": f"the Dask worker {lost} running this attempt was lost", "worker": lost}
        return result

    def _local(self, cell: Cell, number: int, started: float, status: Status, message: str) -> AttemptRecord:
        """An attempt record made on the controller (the attempt produced none)."""
        self.attempt_dir(cell, number).mkdir(parents=True, exist_ok=True)
        return attempt_record(
            cell,
            cohort=self.settings.cohort,
            attempt=number,
            status=status,
            started=started,
            finished=time.time(),
            artifacts={"dir": self.attempt_dir(cell, number).relative_to(self.settings.out_dir).as_posix()},
            error={"type": status.value, "message": message},
            run=self.target_run(cell),
        )

    def _unpack(self, cell: Cell, number: int, data: bytes, record: AttemptRecord) -> AttemptRecord:
        """Place the worker's attempt directory where a local attempt would have written it; the
        record with what the unpacking met in its ``transfer``."""
        target = self.attempt_dir(cell, number)
        shutil.rmtree(target, ignore_errors=True)
        facts = dict(record.extra("transfer") or {})
        try:
            refused = transfer.unpack(data, target)
        except (tarfile.TarError, OSError, EOFError) as exc:  # the record stands; its files did not arrive
            facts["error"] = f"the attempt's files could not be unpacked: {type(exc).__name__}: {exc}"
            target.mkdir(parents=True, exist_ok=True)
            return record.updated(transfer=facts)
        if refused:
            facts["refused"] = refused
        return record.updated(transfer=facts)
