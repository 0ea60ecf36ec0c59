"""Harbor's side of bench/survey.py: which task dirs Harbor 0.25 loads and would run.

Run with Harbor's own interpreter (``/tmp/harbor-venv/bin/python bench/survey_harbor.py OUT LIST``, LIST a
file of task dirs, one a line); it imports nothing of pytest-maka. For each dir it writes one JSON line to OUT:

- loadable: ``harbor.models.task.task.Task(dir)`` accepts it (a legacy ``task.yaml`` dir first
  goes through Harbor's own ``harbor tasks migrate`` mapper; a dir it cannot migrate is not loadable);
- runnable: ``Trial.create`` accepts a trial of the ``oracle`` agent on the Docker environment
  (Harbor's checks of the environment definition, network modes, resources), nothing started.

``why`` is the first line of Harbor's refusal, with the task dir written ``TASK``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import tempfile
from pathlib import Path


def _why(exc: BaseException, *paths: Path) -> str:
    errors = getattr(exc, "errors", None)  # pydantic: the first field and its message, not the error count
    if callable(errors) and errors():
        first = errors()[0]
        more = f" (+{len(errors()) - 1} more)" if len(errors()) > 1 else ""
        text = f"{type(exc).__name__}: {'.'.join(str(p) for p in first['loc'])}: {first['msg']}{more}"
    else:
        text = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}" if str(exc).strip() else type(exc).__name__
    for path in paths:
        text = text.replace(str(path.resolve()), "TASK").replace(str(path), "TASK")
    return text[:300]


def _migrated(task_dir: Path, scratch: Path) -> Path:
    from harbor.mappers.terminal_bench import TerminalBenchMapper

    return TerminalBenchMapper()._map_task(task_dir, scratch / "migrated" / task_dir.name)


async def _trial(task_dir: Path, scratch: Path) -> None:
    from harbor.models.trial.config import AgentConfig, TaskConfig, TrialConfig
    from harbor.trial.trial import Trial

    config = TrialConfig(
        task=TaskConfig(path=task_dir),
        trial_name="survey",
        trials_dir=scratch / "trials",
        agent=AgentConfig(name="oracle"),
    )
    await Trial.create(config)


def survey(task_dir: Path, scratch: Path) -> dict[str, object]:
    from harbor.models.task.task import Task

    facts: dict[str, object] = {"dir": str(task_dir), "loadable": False, "runnable": False, "why": ""}
    harbor_dir = task_dir
    try:
        if not (task_dir / "task.toml").is_file():
            harbor_dir = _migrated(task_dir, scratch)
            facts["migrated"] = True
        Task(harbor_dir)
    except Exception as exc:  # Harbor's refusal, whatever its type, is the fact recorded
        facts["why"] = _why(exc, task_dir, harbor_dir)
        return facts
    facts["loadable"] = True
    try:
        asyncio.run(_trial(harbor_dir, scratch))
    except Exception as exc:
        facts["why"] = _why(exc, task_dir, harbor_dir)
        return facts
    facts["runnable"] = True
    return facts


def main(argv: list[str]) -> int:
    logging.disable(logging.WARNING)
    out, listed = Path(argv[0]), Path(argv[1])
    dirs = [Path(line) for line in listed.read_text().splitlines() if line]
    with out.open("w") as sink:
        for task_dir in dirs:
            with tempfile.TemporaryDirectory(prefix="harbor-survey-") as scratch:
                sink.write(json.dumps(survey(task_dir, Path(scratch))) + "\n")
                sink.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
