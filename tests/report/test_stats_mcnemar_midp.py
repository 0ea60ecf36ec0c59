"""Issue 26: McNemar's mid-p test is not adopted, because its exact size exceeds 5.5% where the report does not flag.

Under "no difference" the number of tasks A won out of ``m`` differing ones is Binomial(m, 1/2),
so a test's size at ``m`` is an exact sum; these tests compute it for the mid-p test and for the
report's exact test (``bench/mcnemar_midp.py`` prints it for every m up to 500).
"""

from __future__ import annotations

import importlib.util
import sys
from fractions import Fraction
from math import comb
from pathlib import Path

import pytest

from pytest_maka.core.stats import MCNEMAR, compare_paired, mcnemar_exact
from pytest_maka.core.stats.paired import WEAK_DISCORDANT


def _mid_p(b: int, c: int) -> Fraction:
    m, k = b + c, min(b, c)
    below = sum(comb(m, i) for i in range(k))
    return min(Fraction(1), Fraction(2 * below + comb(m, k), 2**m))


def _size(m: int, rejects: list[bool]) -> Fraction:
    return Fraction(sum(comb(m, b) for b in range(m + 1) if rejects[b]), 2**m)


def test_the_mid_p_test_exceeds_its_level_at_sixteen_differing_tasks() -> None:
    m = 16
    assert m >= WEAK_DISCORDANT  # a size the report does not flag as weak
    size = _size(m, [_mid_p(b, m - b) < Fraction(1, 20) for b in range(m + 1)])
    # rejects at b <= 4 or b >= 12: 2 * (1 + 16 + 120 + 560 + 1820) / 2^16
    assert size == Fraction(2 * 2517, 2**16)
    assert float(size) == pytest.approx(0.0768, abs=1e-4) and size > Fraction(55, 1000)


@pytest.mark.parametrize("m", [*range(1, 41), 100, 458])
def test_the_reports_exact_test_never_exceeds_five_percent(m: int) -> None:
    size = _size(m, [mcnemar_exact(b, m - b) < 0.05 for b in range(m + 1)])
    assert size <= Fraction(1, 20)


def test_the_mid_p_test_is_over_five_and_a_half_percent_at_many_unflagged_sizes() -> None:
    over = [
        m
        for m in range(WEAK_DISCORDANT, 61)
        if _size(m, [_mid_p(b, m - b) < Fraction(1, 20) for b in range(m + 1)]) > Fraction(55, 1000)
    ]
    assert over == [11, 14, 16, 19, 24, 29, 34, 36, 41, 43, 48, 50, 55, 57]


def test_twelve_to_four_discordant_tasks_stay_even_with_the_exact_test() -> None:
    # the mid-p test would reject here (p = 0.049); the report's exact test does not (p = 0.077)
    a = {f"t{i}": [i < 12] for i in range(30)}
    b = {f"t{i}": [12 <= i < 16] for i in range(30)}
    c = compare_paired(a, b)
    assert c.method == MCNEMAR and (c.only_a, c.only_b) == (12, 4)
    assert c.p_value == pytest.approx(2 * 2517 / 2**16) and c.verdict == "even"
    assert _mid_p(12, 4) == Fraction(3214, 2**16) < Fraction(1, 20)
    assert c.low is not None and c.low <= 0.0  # the interval agrees with the test


def test_the_midp_bench_runs(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    path = Path(__file__).resolve().parents[2] / "bench" / "mcnemar_midp.py"
    spec = importlib.util.spec_from_file_location("maka_mcnemar_midp", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "maka_mcnemar_midp", bench)
    spec.loader.exec_module(bench)
    assert bench.main(["--max-m", "40"]) == 0
    out = capsys.readouterr().out
    assert "worst 7.68% at m = 16" in out and "largest size 4.90% (never above 5%)" in out
