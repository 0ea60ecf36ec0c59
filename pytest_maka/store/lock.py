"""``lock.json``: the provenance of every run into an output directory, newest last.

The pytest session appends its run (spec, executor, argv, versions, ...); ``maka report``
reads the newest one back, so a report it rebuilds says what the original said. A
``lock.json`` the session cannot read is moved aside, never overwritten; one ``maka
report`` cannot read leaves the header without run details and says why.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

LOCK_FILE = "lock.json"
LOCK_SCHEMA = "pytest-maka/lock/1"


class RunDetails(BaseModel):
    """One run's entry: the fields a report header shows (every earlier version wrote a subset)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    cohort: str | None = None
    spec: str | None = None
    executor: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    argv: list[str] | None = None
    versions: dict[str, str] | None = None
    cells: int | None = None
    tasks: int | None = None
    subjects: list[str] | None = None
    repetitions: int | None = None
    skipped: dict[str, str] | None = None
    ignored_keys: dict[str, list[str]] | None = None
    rerun: bool | None = None


def write_lock(path: Path, meta: dict[str, Any]) -> str | None:
    """Append ``meta`` to the runs of ``path``; returns a one-line note when an unreadable
    lock.json had to be moved aside (a new one is started), else None."""
    runs: list[dict[str, Any]] = []
    note = None
    if path.exists():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            runs = data["runs"]
            if not isinstance(runs, list):
                raise TypeError("'runs' is not a list")
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
            aside = path.with_name(f"lock.corrupt-{time.strftime('%Y%m%dT%H%M%S')}.json")
            path.replace(aside)
            note = f"{path}: not a lock file ({type(e).__name__}: {e}); moved to {aside.name}, started a new one"
            runs = []
    data = {"schema": LOCK_SCHEMA, "cohort": meta["cohort"], "runs": [*runs, meta]}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(path)
    return note


def last_run(out_dir: Path) -> tuple[RunDetails | None, str | None]:
    """The newest run's details in ``out_dir/lock.json``, or (None, why not) when there are none."""
    path = Path(out_dir) / LOCK_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, f"no {LOCK_FILE} in {out_dir}: the report has no run details"
    except (OSError, ValueError, UnicodeDecodeError) as e:
        return None, f"{path}: not readable ({type(e).__name__}); the report has no run details"
    runs = data.get("runs") if isinstance(data, dict) else None
    if not isinstance(runs, list) or not runs or not isinstance(runs[-1], dict):
        return None, f"{path}: no run recorded in it; the report has no run details"
    try:
        return RunDetails.model_validate(runs[-1]), None
    except ValidationError as e:
        where = ".".join(str(p) for p in e.errors()[0]["loc"])
        return None, f"{path}: runs[-1].{where}: {e.errors()[0]['msg']}; the report has no run details"
