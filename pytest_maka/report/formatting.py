"""Number formatting shared by the HTML, markdown and compare views."""

from __future__ import annotations

DASH = "\u2013"


def pct(value: float | None, digits: int = 1) -> str:
    """``41.7%`` or an en dash."""
    return DASH if value is None else f"{100 * value:.{digits}f}%"


def estimate(value: float, low: float, high: float) -> str:
    """``66.7% [40.1%, 88.0%]``: a proportion with its interval."""
    return f"{pct(value)} [{pct(low)}, {pct(high)}]"


def pp(value: float | None) -> str:
    """A difference in percentage points with its sign: ``+12.5 pp``."""
    return DASH if value is None else f"{100 * value + 0.0:+.1f} pp"


def p_text(p: float | None, *, prefix: bool = True) -> str:
    """``p = 0.031`` / ``p < 0.001`` (or ``0.031`` / ``< 0.001`` without prefix), or an en dash."""
    if p is None:
        return DASH
    text = "< 0.001" if p < 0.001 else f"{p:.3f}" if p < 0.1 else f"{p:.2f}"
    if not prefix:
        return text
    return f"p {text}" if text.startswith("<") else f"p = {text}"


def money(value: float | None) -> str:
    """``$1,234.50``, ``$0.0042`` for small amounts, or an en dash."""
    if value is None:
        return DASH
    return f"${value:,.2f}" if abs(value) >= 0.01 else f"${value:.4f}"
