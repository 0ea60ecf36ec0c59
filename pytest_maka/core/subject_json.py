"""JSON a subject wrote, read within bounds: size and nesting depth (pure).

Every file a subject writes (usage.json, claim.json, trajectory.json, a stream of JSON lines)
is read through ``loads``: a document nested deeper than ``MAX_DEPTH`` is refused (CPython's
``json`` recurses once per level and raises RecursionError, which no reader expected, and a
value nested a few hundred levels deep breaks every later ``json.dumps`` or recursive walk of
it), and one larger than the caller's limit is refused unread. A refusal is
the subject's fault: the caller treats the file as absent or malformed, never the harness as
broken.
"""

from __future__ import annotations

import json
from typing import Any

#: Levels of arrays and objects accepted (real reports use fewer than 20).
MAX_DEPTH = 64


class RefusedJson(ValueError):
    """The document is too large or too deeply nested (a ValueError, as a parse error is)."""


def too_deep(value: Any, max_depth: int = MAX_DEPTH) -> bool:
    """Whether ``value`` (parsed JSON) nests arrays and objects more than ``max_depth`` levels."""
    level = [value] if isinstance(value, (dict, list)) else []
    for _ in range(max_depth):
        if not level:
            return False
        nxt: list[Any] = []
        for item in level:
            nxt += [c for c in (item.values() if type(item) is dict else item) if type(c) is dict or type(c) is list]
        level = nxt
    return bool(level)


def loads(data: str | bytes, *, max_bytes: int | None = None, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` of a subject-written document; ValueError (RefusedJson when over a bound)."""
    if max_bytes is not None and len(data) > max_bytes:
        raise RefusedJson(f"larger than {max_bytes} bytes")
    try:
        value = json.loads(data)
    except RecursionError:  # the C parser's own limit (about 1,000 levels): refused, never raised on
        raise RefusedJson(f"nested more than {max_depth} levels deep") from None
    if too_deep(value, max_depth):
        raise RefusedJson(f"nested more than {max_depth} levels deep")
    return value
