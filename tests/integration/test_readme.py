"""The README's runnable snippets run (docs as tests)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
_SNIPPET = re.compile(r"<!-- snippet: ([\w-]+) -->\n```python\n(.*?)```", re.S)


def _snippets() -> dict[str, str]:
    return dict(_SNIPPET.findall(README.read_text(encoding="utf-8")))


def test_readme_has_snippets() -> None:
    assert {"quickstart-sqlite", "manager"} <= set(_snippets())


@pytest.mark.parametrize("name", sorted(_snippets()))
def test_readme_snippet_runs(name: str, tmp_path: Path) -> None:
    code = _snippets()[name]
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
