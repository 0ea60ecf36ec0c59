"""The README's layout section names every package, top-level module and doc: it cannot go stale."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pytest_maka"


def _layout() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Development") :]
    return section[section.index("```") + 3 : section.index("```", section.index("```") + 3)]


def _package_lines() -> dict[str, str]:
    """The layout's package lines under `pytest_maka/`: `  run/   the cell lifecycle` -> {"run/": line}."""
    lines: dict[str, str] = {}
    inside = False
    for line in _layout().splitlines():
        if line == "pytest_maka/":
            inside = True
        elif inside and not line.startswith("  "):
            break
        elif inside and (first := line.split()[0]).endswith("/"):
            lines[first] = line
    return lines


def test_the_layout_lists_each_package_once_and_no_other() -> None:
    packages = sorted(
        f"{init.parent.relative_to(PACKAGE).as_posix()}/"
        for init in PACKAGE.rglob("__init__.py")
        if init.parent != PACKAGE
    )
    listed = _package_lines()
    wrong = [f"add the line `  {name:<21} <its role in one line>`" for name in packages if name not in listed]
    wrong += [f"remove the line `{listed[name]}`" for name in listed if name not in packages]
    assert not wrong, "README.md's Development layout (under `pytest_maka/`): " + "; ".join(wrong)


def test_every_top_level_module_is_in_the_readme_layout() -> None:
    words = set(re.findall(r"[\w./-]+", _layout()))
    missing = [p.name for p in sorted(PACKAGE.glob("*.py")) if p.name != "__init__.py" and p.name not in words]
    assert not missing, f"README.md's Development layout does not name: {', '.join(missing)}"


def test_every_doc_is_in_the_readme_layout() -> None:
    named = set(re.findall(r"[\w-]+\.md", _layout()))
    missing = sorted(p.name for p in (ROOT / "docs").glob("*.md") if p.name not in named)
    assert not missing, f"README.md's Development layout does not name docs: {', '.join(missing)}"
