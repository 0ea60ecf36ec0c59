"""The shipped price table (dated) with per-subject overrides; used when an agent reports no cost."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

TABLE_FILE = Path(__file__).with_name("prices.json")


@cache
def shipped() -> dict[str, Any]:
    return json.loads(TABLE_FILE.read_text(encoding="utf-8"))


def price_table(overrides: dict[str, dict[str, float]] | None = None) -> dict[str, Any]:
    """The shipped table with ``overrides`` (model -> prices) on top; an override keeps the date honest."""
    table = shipped()
    if not overrides:
        return table
    return {**table, "date": f"{table['date']}+spec", "models": {**table["models"], **overrides}}
