"""Every input file type, fuzzed: the loader either loads it or refuses it in one line naming the file.

Each target gets byte mutations of a valid seed, documents of its syntax with hostile values
at the keys the loaders read, and random bytes (tests/fuzz/strategies.py). CI runs a fixed
(derandomized) sample of MAKA_FUZZ_EXAMPLES cases per target; ``bench/fuzz.py`` runs more.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from .strategies import cases
from .targets import TARGETS, fresh, outcome

EXAMPLES = int(os.environ.get("MAKA_FUZZ_EXAMPLES", "400"))


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_input_loads_or_is_refused_in_one_line(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = TARGETS[name]
    monkeypatch.setenv("MAKA_CACHE_DIR", str(tmp_path / "cache"))
    seen: dict[str, int] = {}

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(cases(target))
    def run(data: bytes) -> None:
        result = outcome(target, fresh(tmp_path / "case"), data)
        seen[result] = seen.get(result, 0) + 1

    run()
    assert seen.get("refused", 0) > 0, f"{name}: no hostile case was refused: {seen}"


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_seed_loads(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The seeds are valid: fuzzing starts from files the loaders accept."""
    monkeypatch.setenv("MAKA_CACHE_DIR", str(tmp_path / "cache"))
    target = TARGETS[name]
    assert outcome(target, fresh(tmp_path / "case"), target.seed) == "ok"
