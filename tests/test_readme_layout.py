"""The README's layout section names every package, top-level module and doc: it cannot go stale."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _layout() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Development") :]
    return section[section.index("```") + 3 : section.index("```", section.index("```") + 3)]


def test_every_package_and_module_is_in_the_readme_layout() -> None:
    layout = _layout()
    words = set(re.findall(r"[\w./-]+", layout))
    package = ROOT / "pytest_maka"
    missing = [f"{p.name}/" for p in sorted(package.iterdir()) if (p / "__init__.py").is_file()]
    missing = [name for name in missing if name not in words]
    missing += [p.name for p in sorted(package.glob("*.py")) if p.name != "__init__.py" and p.name not in words]
    assert not missing, f"README.md's Development layout does not name: {', '.join(missing)}"


def test_every_doc_is_in_the_readme_layout() -> None:
    named = set(re.findall(r"[\w-]+\.md", _layout()))
    missing = sorted(p.name for p in (ROOT / "docs").glob("*.md") if p.name not in named)
    assert not missing, f"README.md's Development layout does not name docs: {', '.join(missing)}"
