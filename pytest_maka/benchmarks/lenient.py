"""Keys of a ``task.toml`` that Harbor does not know: kept, named, and checked for meaning.

Harbor 0.25's models ignore keys they do not declare, in every table: published tasks carry
``[task] format``, ``category``, ``[[steps]] id``, ``dependencies``. Such a key is no reason to
drop a task here either: it is kept in the task's metadata (``ignored_keys``, with a hint when
it is one letter off a known key) and named once per run; ``--maka-strict`` refuses it. A few
of them would change what the agent or the verifier sees if a runner took them at their word;
those are honoured when running as Harbor does gives the same thing, else the task is skipped
with the reason (``meaning``), never run silently otherwise.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

#: What ``ignored_keys`` entries are called in every message.
NOT_USED = "not used by pytest-maka"
#: Container runtimes that are the engine's default (asking for one changes nothing).
DEFAULT_RUNTIMES = ("runc", "default", "docker")
_STEP_KEY = re.compile(r"^steps\[(\d+)\]\.(\w+)$")


@dataclass(frozen=True)
class Unknown:
    """A key the models do not declare: its dotted path, value and the keys known beside it."""

    path: str
    value: Any
    known: tuple[str, ...] = ()

    @property
    def hint(self) -> str | None:
        name = self.path.rsplit(".", 1)[-1]
        close = difflib.get_close_matches(name, self.known, n=1, cutoff=0.8)
        return close[0] if close else None

    @property
    def message(self) -> str:
        hint = self.hint
        return f"{self.path}: {NOT_USED}" + (f" (did you mean {hint!r}?)" if hint else "")


@dataclass
class Leniency:
    """The unknown keys of one file and what they mean for running it."""

    unknown: list[Unknown] = field(default_factory=list)

    def metadata(self) -> dict[str, Any]:
        """What the task's metadata keeps: the key paths, their hints, their values."""
        if not self.unknown:
            return {}
        out: dict[str, Any] = {"ignored_keys": [u.path for u in self.unknown]}
        hints = {u.path: u.hint for u in self.unknown if u.hint}
        if hints:
            out["ignored_key_hints"] = hints
        out["ignored_values"] = {u.path: _plain(u.value) for u in self.unknown}
        return out


def _plain(value: Any) -> Any:
    """A TOML value as JSON can hold it (dates become text)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def unknown_keys(model: BaseModel, prefix: str = "") -> list[Unknown]:
    """Every key under ``model`` that its models do not declare (``model_extra``), in order."""
    out: list[Unknown] = []
    known = tuple(type(model).model_fields)
    for key, value in (model.model_extra or {}).items():
        out.append(Unknown(path=f"{prefix}{key}", value=value, known=known))
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            out.extend(unknown_keys(value, f"{prefix}{name}."))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, BaseModel):
                    out.extend(unknown_keys(item, f"{prefix}{name}[{i}]."))
    return out


def message(path: str, hints: dict[str, str] | None = None) -> str:
    """``task.format: not used by pytest-maka`` (with the hint recorded for it, if any)."""
    hint = (hints or {}).get(path)
    return f"{path}: {NOT_USED}" + (f" (did you mean {hint!r}?)" if hint else "")


def meaning(unknown: list[Unknown], step_names: list[str]) -> str | None:
    """Why the task cannot run as its author meant (a skip reason), or None.

    ``steps[i].dependencies`` (names or ids of other steps): Harbor runs the steps in the
    order they are listed, and so does pytest-maka; a dependency on an earlier step is
    satisfied by that order, one on a later step or on no step at all is not.
    ``*.runtime`` (a container runtime such as ``runsc``): only the engine's default one runs here.
    """
    ids = _step_ids(unknown, step_names)
    for u in unknown:
        name = u.path.rsplit(".", 1)[-1]
        step = _STEP_KEY.match(u.path)
        if step is not None and step.group(2) == "dependencies":
            index = int(step.group(1))
            deps = u.value if isinstance(u.value, list) else [u.value]
            for dep in deps:
                at = ids.get(str(dep))
                if at is None or at >= index:
                    where = "is no step" if at is None else "is not an earlier step"
                    return (
                        f"{u.path} names {dep!r}, which {where}: the steps run in the order listed "
                        "(as in Harbor), so that dependency cannot be honoured"
                    )
        if name == "runtime" and str(u.value).strip().lower() not in DEFAULT_RUNTIMES:
            return f"{u.path} = {u.value!r}: a container runtime other than the engine's default is not supported"
    return None


def _step_ids(unknown: list[Unknown], step_names: list[str]) -> dict[str, int]:
    """Each step's position by its name and by its ``id`` when it has one."""
    ids = {name: i for i, name in enumerate(step_names)}
    for u in unknown:
        step = _STEP_KEY.match(u.path)
        if step is not None and step.group(2) == "id":
            ids.setdefault(str(u.value), int(step.group(1)))
    return ids
