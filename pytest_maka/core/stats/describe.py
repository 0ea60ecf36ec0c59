"""Descriptive figures: quantiles and distributions of durations, cost and tokens."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..record_model import Usage


def numbers(values: Iterable[Any]) -> list[float]:
    """The numeric values (bools excluded), as floats."""
    return [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile of already sorted values (numpy's default method)."""
    if not sorted_values:
        raise ValueError("quantile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q}")
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass(frozen=True)
class Distribution:
    """Five-number summary plus mean and p90 of some measurements."""

    n: int
    mean: float
    minimum: float
    p25: float
    median: float
    p75: float
    p90: float
    maximum: float

    @classmethod
    def of(cls, values: Iterable[Any]) -> Distribution | None:
        """The distribution of the numeric values, or None when there are none."""
        xs = sorted(numbers(values))
        if not xs:
            return None
        return cls(
            n=len(xs),
            mean=sum(xs) / len(xs),
            minimum=xs[0],
            p25=quantile(xs, 0.25),
            median=quantile(xs, 0.5),
            p75=quantile(xs, 0.75),
            p90=quantile(xs, 0.9),
            maximum=xs[-1],
        )


@dataclass(frozen=True)
class Spend:
    """Cost and tokens of a subject: totals over the cells that reported them, per cell and per success."""

    cost_usd: float | None
    #: Cells that reported a cost: totals and per-cell figures are over these only.
    cost_known: int
    input_tokens: int | None
    output_tokens: int | None
    tokens_known: int
    passes: int

    @property
    def tokens(self) -> int | None:
        known = [t for t in (self.input_tokens, self.output_tokens) if t is not None]
        return sum(known) if known else None

    @property
    def cost_per_cell(self) -> float | None:
        return None if self.cost_usd is None else self.cost_usd / self.cost_known

    @property
    def cost_per_success(self) -> float | None:
        """Total cost over the number of passes (what one success costs); None without a pass or a cost."""
        return None if self.cost_usd is None or not self.passes else self.cost_usd / self.passes

    @property
    def tokens_per_cell(self) -> float | None:
        t = self.tokens
        return None if t is None else t / self.tokens_known

    @property
    def tokens_per_success(self) -> float | None:
        t = self.tokens
        return None if t is None or not self.passes else t / self.passes


def spend_of(usages: Sequence[Usage | Mapping[str, Any] | None], passes: int) -> Spend:
    """Sum the ``usage`` of some records (None or missing fields are unknown, not 0)."""
    rows = [Usage.model_validate(u) if isinstance(u, Mapping) else u or Usage() for u in usages]
    costs = numbers(u.cost_usd for u in rows)
    tin = numbers(u.input_tokens for u in rows)
    tout = numbers(u.output_tokens for u in rows)
    tokens_known = sum(1 for u in rows if numbers([u.input_tokens]) or numbers([u.output_tokens]))
    return Spend(
        cost_usd=sum(costs) if costs else None,
        cost_known=len(costs),
        input_tokens=int(sum(tin)) if tin else None,
        output_tokens=int(sum(tout)) if tout else None,
        tokens_known=tokens_known,
        passes=passes,
    )
