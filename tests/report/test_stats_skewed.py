"""Issue 26: with skewed per-task differences the paired interval still agrees with the sign-flip test, both ways.

Skewed as in the calibration's ``skewed`` scenario: B better by +4 logits on 15% of the tasks
only, so a few tasks carry the whole difference and the t interval's normal approximation is
at its weakest. ``bench/signflip_inversion.py`` measures the coverage against a full inversion.
"""

from __future__ import annotations

import importlib.util
import math
import random
import sys
from pathlib import Path

import pytest

from pytest_maka.core.stats import compare_paired, compare_scores, t_interval


def _shift(p: float, logits: float = 4.0) -> float:
    odds = p / (1 - p) * math.exp(logits) if p < 1 else math.inf
    return 1.0 if odds == math.inf else odds / (1 + odds)


def _skewed(rng: random.Random, tasks: int, reps: int) -> tuple[dict[str, list[bool]], dict[str, list[bool]]]:
    ps = [rng.betavariate(0.5, 0.5) for _ in range(tasks)]
    pb = [_shift(p) if rng.random() < 0.15 else p for p in ps]
    b = {f"t{i}": [rng.random() < p for _ in range(reps)] for i, p in enumerate(pb)}
    a = {f"t{i}": [rng.random() < p for _ in range(reps)] for i, p in enumerate(ps)}
    return b, a


def test_skewed_differences_keep_test_and_interval_in_agreement() -> None:
    rng = random.Random(26)
    extended = 0
    for _ in range(240):
        tasks, reps = rng.choice([20, 30, 50]), rng.choice([3, 5])
        b, a = _skewed(rng, tasks, reps)
        c = compare_paired(b, a)
        assert c.p_value is not None and c.low is not None and c.high is not None and c.diff is not None
        assert (c.p_value < 0.05) == (c.low > 0 or c.high < 0), c
        assert c.low <= c.diff <= c.high
        plain = t_interval([sum(b[t]) / reps - sum(a[t]) / reps for t in sorted(a)])
        assert plain is not None
        if (plain[0] > 0 or plain[1] < 0) and c.p_value >= 0.05:
            extended += 1  # the skewed t interval excluded 0 where the exact test did not reject
            assert c.low <= 0.0 <= c.high
    assert extended >= 3  # the agreement rule did work on these cohorts, not only pass through


def test_the_inversion_bench_runs(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    path = Path(__file__).resolve().parents[2] / "bench" / "signflip_inversion.py"
    spec = importlib.util.spec_from_file_location("maka_signflip_inversion", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "maka_signflip_inversion", bench)
    spec.loader.exec_module(bench)
    assert bench.main(["--cohorts", "20", "--sizes", "20", "--reps", "3", "--large", "30x3"]) == 0
    out = capsys.readouterr().out
    assert "cover report" in out and "full inversion" in out
    # the inverted interval agrees with the test by construction
    row = next(line for line in out.splitlines() if line.strip().startswith("20 |"))
    assert row.split("|")[5].strip() == "100.0"


def test_score_differences_rounded_to_nothing_never_turn_the_test_against_the_estimate() -> None:
    # 100 tasks x 5 repetitions of scores: the differences are rounded to 1/50 for the exact test.
    # 94 tasks differ by -0.0098 or +0.006 (both round to 0), 6 by +0.02: the rounded values are six
    # wins for A (p = 2/64), the exact mean is negative and its interval holds 0.
    a: dict[str, list[float]] = {}
    b = {f"t{i:03d}": [0.5] * 5 for i in range(100)}
    for i in range(100):
        small = [0.5, 0.5, 0.5, 0.5, 0.451] if i % 2 else [0.53, 0.5, 0.5, 0.5, 0.5]
        a[f"t{i:03d}"] = small if i < 94 else [0.6, 0.5, 0.5, 0.5, 0.5]
    c = compare_scores(a, b)
    assert c.diff == pytest.approx(-0.000586)
    assert c.p_value is not None and c.low is not None and c.high is not None
    assert (c.p_value < 0.05) == (c.low > 0 or c.high < 0)  # was p = 0.031 beside [-0.0024, +0.02]
    assert c.low <= c.diff <= c.high and c.verdict == "even"
