"""Student's t distribution for integer degrees of freedom: the CDF in closed form and its quantile.

The intervals need one critical value, ``t(df)`` at 0.975, with ``df`` the number of tasks
(clusters) minus one. Degrees of freedom here are always whole numbers, so the CDF has an
exact finite form (Abramowitz & Stegun 26.7.3 / 26.7.4): with ``theta = atan(x / sqrt(df))``,

    A(x | df) = P(|T| <= x) = sin(theta) * sum_j u_j                      (df even)
              = 2/pi * (theta + sin(theta) * sum_j u_j)                    (df odd)

where the ``u_j`` are products of ratios of odd and even numbers times powers of cos(theta).
The quantile inverts ``A`` by bisection on ``theta`` (monotone, bracketed in ``[0, pi/2)``),
so it needs no SciPy at run time; tests check it against ``scipy.stats.t``.
"""

from __future__ import annotations

import math
from functools import lru_cache

#: Two-sided 95% normal quantile (``scipy.stats.norm.ppf(0.975)``).
Z95 = 1.959963984540054
#: One-sided 80% normal quantile (``scipy.stats.norm.ppf(0.8)``): 80% power.
Z80 = 0.8416212335729143

_BISECTIONS = 200


def _check_df(df: int) -> None:
    if not isinstance(df, int) or isinstance(df, bool) or df < 1:
        raise ValueError(f"degrees of freedom must be a whole number >= 1, got {df!r}")


def _two_sided(theta: float, df: int) -> float:
    """``P(|T| <= sqrt(df) * tan(theta))`` for ``T ~ t(df)``."""
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2 == 0:
        term, total = 1.0, 1.0
        for j in range(1, df // 2):  # powers cos^2 .. cos^(df-2)
            term *= (2 * j - 1) / (2 * j) * c2
            total += term
        return s * total
    if df == 1:
        return 2.0 * theta / math.pi
    term = math.cos(theta)
    total = term
    for j in range(1, (df - 1) // 2):  # powers cos^3 .. cos^(df-2)
        term *= (2 * j) / (2 * j + 1) * c2
        total += term
    return 2.0 / math.pi * (theta + s * total)


def t_cdf(x: float, df: int) -> float:
    """``P(T <= x)`` for ``T ~ t(df)``, ``df`` a whole number >= 1."""
    _check_df(df)
    a = _two_sided(math.atan(abs(x) / math.sqrt(df)), df)
    return 0.5 + a / 2 if x >= 0 else 0.5 - a / 2


@lru_cache(maxsize=1024)
def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of ``t(df)`` (``scipy.stats.t.ppf(p, df)``), for ``0 < p < 1``."""
    _check_df(df)
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p == 0.5:
        return 0.0
    target = abs(2 * p - 1)  # P(|T| <= q)
    lo, hi = 0.0, math.pi / 2
    for _ in range(_BISECTIONS):
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        if _two_sided(mid, df) < target:
            lo = mid
        else:
            hi = mid
    q = math.sqrt(df) * math.tan((lo + hi) / 2)
    return q if p > 0.5 else -q


def t95(df: int) -> float:
    """Two-sided 95% critical value of ``t(df)``."""
    return t_quantile(0.975, df)
