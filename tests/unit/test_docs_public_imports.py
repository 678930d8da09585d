"""The guide and its samples import firefly_orm's public names, never its private modules."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(
    [
        ROOT / "README.md",
        *(ROOT / "docs" / "guide").rglob("*.md"),
        *(ROOT / "docs_src").glob("*.py"),
    ]
)
# ``from firefly_orm.a._b import x`` / ``import firefly_orm._b``: a module starting with "_"
_PRIVATE_IMPORT = re.compile(r"^\s*(?:from|import)\s+firefly_orm(?:\.\w+)*\._\w+", re.MULTILINE)


def test_pages_are_found() -> None:
    assert any(page.name == "artifacts_flyte_live.py" for page in PAGES)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_no_private_import(page: Path) -> None:
    found = _PRIVATE_IMPORT.findall(page.read_text(encoding="utf-8"))
    assert found == []
