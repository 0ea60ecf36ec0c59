"""Rendering a pydantic ValidationError as the one line a user reads: file, key, expectation."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from .errors import MakaUserError, SpecError


def shorten(text: str, limit: int = 80) -> str:
    """A value as shown in a message: never more than ``limit`` characters."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


_TYPE_NAMES = {"str", "int", "float", "bool", "none", "list", "dict"}


def _model_names() -> set[str]:
    names: set[str] = set()
    todo = list(BaseModel.__subclasses__())
    while todo:
        cls = todo.pop()
        if cls.__name__ not in names:
            names.add(cls.__name__)
            todo.extend(cls.__subclasses__())
    return names


def _is_branch_label(part: str) -> bool:
    """``str``, ``list[str]``, ``function-after[...]`` or a model's name such as ``Build``."""
    if part in _TYPE_NAMES or "[" in part or part.startswith("function-"):
        return True
    return part[:1].isupper() and part in _model_names()


def key_path(loc: tuple[Any, ...] | list[Any], prefix: str = "") -> str:
    """Render a pydantic location as ``subjects[2].kind``."""
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _is_branch_label(str(part)):
            continue  # union branch labels add nothing for a reader
        else:
            out += f".{part}" if out else str(part)
    return out


def first_error(
    exc: ValidationError,
    file: Path,
    prefix: str = "",
    model: type | None = None,
    also: tuple[str, ...] = (),
    error: type[MakaUserError] = SpecError,
) -> MakaUserError:
    return _render(exc.errors(include_url=False), file, prefix, model, also, error)


def every_error(
    exc: ValidationError,
    file: Path,
    prefix: str = "",
    model: type | None = None,
    error: type[MakaUserError] = SpecError,
) -> MakaUserError:
    """One error naming every key in ``exc`` (``key: problem; key: problem``), none left out."""
    groups: dict[str, list[Any]] = {}
    for err in exc.errors(include_url=False):
        groups.setdefault(key_path(err["loc"], prefix), []).append(err)
    if len(groups) == 1:
        return _render(next(iter(groups.values())), file, prefix, model, (), error)
    parts = [str(_render(errs, None, prefix, model, (), error)) for errs in groups.values()]
    return error(file, None, "; ".join(parts))


def _render(
    errors: list[Any],
    file: Path | None,
    prefix: str,
    model: type | None,
    also: tuple[str, ...],
    error: type[MakaUserError],
) -> MakaUserError:
    # For union entries (subjects) pydantic reports one error per branch; prefer the
    # branch that is a mapping, since that is what a user who wrote a mapping meant.
    # A typo of a required key is reported as the unknown key it is, not as the missing one.
    errors.sort(key=lambda e: (any(str(p) == "str" for p in e["loc"]), e["type"] == "missing"))
    err = errors[0]
    key = key_path(err["loc"], prefix)
    etype = err["type"]
    if etype == "extra_forbidden":
        allowed = sorted(model.model_fields) if model is not None else []
        parent = key.rsplit(".", 1)[0] if "." in key else ""
        if parent and model is not None:
            allowed = sorted({*_allowed_keys_at(model, err["loc"][:-1]), *also})
        msg = "unknown key" + (f"; expected one of: {', '.join(allowed)}" if allowed else "")
    elif etype == "missing":
        msg = "missing required key"
    else:
        given = err.get("input")
        text, merged = _expectation([e for e in errors if key_path(e["loc"], prefix) == key])
        shown = "" if isinstance(given, (dict, list)) or "(got " in text else f" (got {shorten(repr(given))})"
        msg = f"{text}{shown}"
    more = len(errors) - max(merged, 1) if etype not in ("extra_forbidden", "missing") else len(errors) - 1
    if more > 0 and etype != "union_tag_invalid":
        msg += f" (+{more} more problem{'s' if more > 1 else ''})"
    return error(file, key or None, msg)


def _clean(msg: str) -> str:
    return re.sub(r" or instance of \w+", "", msg.removeprefix("Value error, "))


def _expectation(same_key: list[Any]) -> tuple[str, int]:
    """One message for the errors at one key: a union's branches become "a or b"."""
    texts = list(dict.fromkeys(_clean(e["msg"]) for e in same_key))
    lead = "Input should be "
    if len(texts) > 1 and all(t.startswith(lead) for t in texts):
        return lead + " or ".join(t.removeprefix(lead) for t in texts), len(same_key)
    return texts[0], 1


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold (through ``X | None``, ``list[X]``, ``dict[str, X]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in getattr(annotation, "__args__", ()) for m in _models_in(arg)]


def _allowed_keys_at(model: type, loc: tuple[Any, ...] | list[Any]) -> list[str]:
    """The field names of the model found at ``loc`` (best effort)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int) or _is_branch_label(str(part)):
            continue
        fields = getattr(current, "model_fields", {})
        if part not in fields:
            return []
        candidates = _models_in(fields[part].annotation)
        current = candidates[0] if candidates else None
        if current is None:
            return []
    return sorted(getattr(current, "model_fields", {}))
