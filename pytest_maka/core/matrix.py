"""Subject variants: ``matrix: {model: [a, b], version: [x, y]}`` expands into one subject per combination.

Names are readable and stable: ``NAME-a-x``, ``NAME-a-y``, ... (values made name-safe), so a
model sweep or an A/B of two versions is one spec entry.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

from .errors import SpecError


def _slug(value: Any) -> str:
    text = re.sub(r"[^A-Za-z0-9_.+-]+", "_", str(value).split("/")[-1]).strip("_")
    return text or "x"


def expand(entry: dict[str, Any], file: Path, key: str) -> list[dict[str, Any]]:
    """The entries ``entry`` stands for: itself without a matrix, else one per combination."""
    matrix = entry.get("matrix")
    if matrix is None:
        return [entry]
    where = f"{key}.matrix" if key else "matrix"
    if not isinstance(matrix, dict) or not matrix:
        raise SpecError(file, where, "expected a mapping of option name -> list of values")
    for name, values in matrix.items():
        if name in ("name", "kind", "matrix"):
            raise SpecError(file, f"{where}.{name}", "name and kind cannot vary; declare two subjects instead")
        if not isinstance(values, list) or not values:
            raise SpecError(file, f"{where}.{name}", "expected a non-empty list of values")
    base = {k: v for k, v in entry.items() if k != "matrix"}
    out = []
    for combo in itertools.product(*matrix.values()):
        variant = dict(zip(matrix, combo, strict=True))
        suffix = "-".join(_slug(v) for v in combo)
        out.append({**base, **variant, "name": f"{base.get('name', 'subject')}-{suffix}"})
    return out
