"""Headless Debian Chromium (/usr/bin/chromium) driven by Playwright; never downloads a browser."""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
REPO = Path(__file__).resolve().parents[2]
#: Screenshots are also copied here (ignored by git: reports/) so CI can keep them as artifacts.
SCREENSHOTS = REPO / "reports" / "screenshots"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (the test extra)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
        )
        yield b
        b.close()


def bench_module() -> ModuleType:
    """bench/report_scale.py, whose generator writes realistic output directories."""
    spec = importlib.util.spec_from_file_location("report_scale", REPO / "bench" / "report_scale.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def save_screenshot(page: Any, tmp_path: Path, name: str, **kw: Any) -> Path:
    """Write a PNG under tmp_path and copy it to reports/screenshots/; return the tmp_path copy."""
    path = tmp_path / name
    page.screenshot(path=str(path), **kw)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(path, SCREENSHOTS / name)
    return path
