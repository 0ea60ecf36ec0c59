"""Token usage and cost: one normalised shape, and cost from a price table where the agent gives none.

Unknown stays None, never 0: a subject that reports no tokens has ``input_tokens: None``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

TOKEN_KEYS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
#: Older spellings accepted from a subject's usage.json.
ALIASES = {"cache_tokens": "cache_read_tokens"}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _num(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None


def normalise(data: Mapping[str, Any] | None) -> dict[str, Any]:
    """The known fields of a usage mapping, typed; everything else is dropped."""
    if not isinstance(data, Mapping):
        return {}
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = ALIASES.get(key, key)
        if name in TOKEN_KEYS and _int(value) is not None:
            out[name] = value
    cost = _num(data.get("cost_usd"))
    if cost is not None:
        out["cost_usd"] = cost
    models = data.get("models")
    if isinstance(models, Mapping):
        per = {str(m): normalise(v) for m, v in models.items() if isinstance(v, Mapping)}
        if per:
            out["models"] = per
    return out


@dataclass(frozen=True)
class TokenUsage:
    """What a subject reported it spent, typed (None: it did not say). Parts add up field by field."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    cost_usd: float | None = None
    #: Per model, when the agent breaks it down.
    models: dict[str, TokenUsage] = dataclasses.field(default_factory=dict)

    def __add__(self, other: TokenUsage) -> TokenUsage:
        def plus(a: Any, b: Any) -> Any:
            return b if a is None else a if b is None else a + b

        sums = {f.name: plus(getattr(self, f.name), getattr(other, f.name)) for f in fields(self) if f.name != "models"}
        models = dict(self.models)
        for name, part in other.models.items():
            models[name] = models[name] + part if name in models else part
        return TokenUsage(**sums, models=models)

    @classmethod
    def of(cls, data: Mapping[str, Any] | None) -> TokenUsage:
        """The known fields of a usage mapping (``normalise``), typed."""
        known = normalise(data)
        models = {m: cls.of(v) for m, v in known.pop("models", {}).items()}
        return cls(**known, models=models)

    def as_dict(self) -> dict[str, Any]:
        """The normalised mapping the record keeps (unknown fields absent)."""
        out: dict[str, Any] = {f: getattr(self, f) for f in (*TOKEN_KEYS, "cost_usd") if getattr(self, f) is not None}
        if self.models:
            out["models"] = {m: u.as_dict() for m, u in self.models.items()}
        return out


def add(total: dict[str, Any], part: Mapping[str, Any]) -> dict[str, Any]:
    """``total`` plus ``part`` field by field (a field stays unknown until one side knows it)."""
    out = dict(total)
    for key in (*TOKEN_KEYS, "cost_usd"):
        if part.get(key) is not None:
            out[key] = (out.get(key) or 0) + part[key]
    return out


def tokens(usage: Mapping[str, Any]) -> int | None:
    """Input plus output tokens, or None when neither is known."""
    known = [usage[k] for k in ("input_tokens", "output_tokens") if usage.get(k) is not None]
    return sum(known) if known else None


def price_cost(usage: Mapping[str, Any], model: str | None, table: Mapping[str, Any]) -> float | None:
    """Cost in USD from per-million-token prices, or None when the model or a count is unknown.

    ``table`` maps model names (exact, or a prefix ending in ``*``) to
    ``{input, output, cache_read, cache_write}`` USD per million tokens.
    """
    prices = lookup(table, model)
    if prices is None or usage.get("input_tokens") is None or usage.get("output_tokens") is None:
        return None
    total = 0.0
    for key, field in (
        ("input_tokens", "input"),
        ("output_tokens", "output"),
        ("cache_read_tokens", "cache_read"),
        ("cache_write_tokens", "cache_write"),
    ):
        count = usage.get(key) or 0
        rate = _num(prices.get(field))
        if count and rate is None:
            return None
        total += count * (rate or 0.0) / 1e6
    return round(total, 8)


def lookup(table: Mapping[str, Any], model: str | None) -> Mapping[str, Any] | None:
    """The price entry for ``model``: an exact name first, then the longest matching ``prefix*``."""
    if not model:
        return None
    name = model.split("/")[-1]
    models = table.get("models", table)
    if isinstance(models.get(name), Mapping):
        return models[name]
    best = None
    for key, value in models.items():
        fits = key.endswith("*") and name.startswith(key[:-1]) and isinstance(value, Mapping)
        if fits and (best is None or len(key) > len(best[0])):
            best = (key, value)
    return best[1] if best else None


def with_cost(usage: dict[str, Any], model: str | None, table: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """``usage`` with ``cost_usd`` from the price table when the subject gave none, and where the
    cost came from (``subject``, ``price_table:DATE``, or None when it stays unknown)."""
    if usage.get("cost_usd") is not None:
        return usage, "subject"
    cost = price_cost(usage, model, table)
    if cost is None:
        return usage, None
    date = table.get("date") if isinstance(table.get("date"), str) else None
    return {**usage, "cost_usd": cost}, f"price_table:{date}" if date else "price_table"


#: Where a cost came from: the agent's own figure, the price table, or nowhere.
CostFrom = Literal["agent", "price_table", "unknown"]


@dataclass(frozen=True)
class CostProvenance:
    """Where ``usage.cost_usd`` came from, and whether it is a guess.

    A guess is an agent's own figure for a model the price table does not know (the agent
    may price an unknown model at a default rate), or a figure metered from the agent's
    stream because it was stopped before it printed its total (a lower bound).
    """

    source: CostFrom
    guess: bool = False
    #: The price table's date, when the table priced it or was consulted.
    table_date: str | None = None
    #: One line saying why it is a guess (or unknown).
    note: str | None = None

    def as_record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source, "guess": self.guess}
        if self.table_date:
            out["table_date"] = self.table_date
        if self.note:
            out["note"] = self.note
        return out


def provenance(
    usage: Mapping[str, Any], model: str | None, table: Mapping[str, Any], legacy: str | None
) -> CostProvenance:
    """The provenance of the cost in ``usage`` (after ``with_cost``, whose ``legacy`` source string it reads)."""
    date = table.get("date") if isinstance(table.get("date"), str) else None
    if usage.get("cost_usd") is None:
        why = "no cost from the agent"
        why += f", and the price table does not know {model!r}" if model else ", and no model name to price"
        return CostProvenance("unknown", note=why, table_date=date)
    if legacy == "subject":
        if model and lookup(table, model) is None:
            note = f"the agent priced {model!r}, which the price table does not know: its own default rate, perhaps"
            return CostProvenance("agent", guess=True, table_date=date, note=note)
        return CostProvenance("agent")
    return CostProvenance("price_table", table_date=date)
