"""``maka agents``: list, install (errors), prune, against a private cache directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_maka.cli import main
from pytest_maka.subjects.install.cache import MARKER, AgentCache
from pytest_maka.subjects.presets import PRESETS


def test_list_shows_every_preset_with_its_pin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agents", "--cache", str(tmp_path), "list"]) == 0
    out = capsys.readouterr().out
    for preset in PRESETS:
        assert f"{preset.package}@{preset.version}" in out
    assert out.count(" - ") == len(PRESETS), "nothing is installed in an empty cache"


def test_install_refuses_unknown_presets_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agents", "--cache", str(tmp_path), "install", "no-such-agent"]) == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown preset 'no-such-agent'" in err[0]
    assert main(["agents", "--cache", str(tmp_path), "install"]) == 4


def test_prune_keeps_the_pinned_installs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cache = AgentCache(tmp_path)
    pinned = cache.path(PRESETS[0].install_spec(None))
    old = cache.path(PRESETS[0].install_spec("0.0.1"))
    for path in (pinned, old):
        path.mkdir(parents=True)
        (path / MARKER).write_text(json.dumps({"agent": "x", "package": "p", "version": "v"}))
    assert main(["agents", "--cache", str(tmp_path), "prune", "--keep-pinned"]) == 0
    assert pinned.exists() and not old.exists()
    assert cache.installed(PRESETS[0].install_spec(None))


def test_list_shows_each_install_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agents", "--cache", str(tmp_path), "list"]) == 0
    out = capsys.readouterr().out
    for preset in PRESETS:
        assert f"key {preset.install_spec(None).key} " in out
