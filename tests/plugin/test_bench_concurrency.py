"""bench/concurrency.py: every configuration of a list runs into a directory of its own."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "concurrency.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_concurrency", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_configuration_listed_twice_gets_two_fresh_output_directories(tmp_path: Path) -> None:
    dirs = _bench().run_dirs(tmp_path, [(1, 200), (1, 200), (8, 1)])
    runs = [run for _, run in dirs]
    collects = [collect for collect, _ in dirs]
    assert len(set(runs)) == 3  # the second 1x200 would otherwise resume the first one's results
    assert len(set(collects)) == 3
    assert not set(runs) & set(collects)
    assert all(d.parent == tmp_path and not d.exists() for d in runs + collects)
    assert runs[0].name.endswith("1x200") and runs[2].name.endswith("8x1")
