"""The configuration guide's table of variables states the defaults ``MemorySettings`` has."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from firefly_orm.config import MemorySettings

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "memory" / "configuration.md"
_ROW = re.compile(r"^\| (`[A-Z_]+`(?:, `[A-Z_]+`)*) \| (.+) \|$")


def _documented() -> list[tuple[str, str]]:
    """``(variable, default as written)`` for each variable of the guide's table."""
    pairs: list[tuple[str, str]] = []
    for line in GUIDE.read_text(encoding="utf-8").splitlines():
        match = _ROW.match(line)
        if match is None:
            continue
        names = re.findall(r"`([A-Z_]+)`", match.group(1))
        cell = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", match.group(2))  # links: their text
        defaults = [part.strip() for part in re.sub(r"\([^)]*\)", "", cell).split(",")]
        assert len(names) == len(defaults), line
        pairs.extend(zip(names, defaults, strict=True))
    return pairs


def _value(written: str) -> Any:
    """What a default cell means: ``unset`` / ``—`` is ``None``, a code span its text."""
    if written in {"unset", "—"}:
        return None
    code = re.fullmatch(r"`([^`]*)`", written)
    assert code is not None, f"unreadable default {written!r}"
    return code.group(1)


DOCUMENTED = [pair for pair in _documented() if "<" not in pair[1]]


def test_the_table_is_read() -> None:
    names = {name for name, _ in DOCUMENTED}
    assert {"BACKEND", "SUMMARIZE_THRESHOLD", "MAX_CONVERSATION_TOKENS"} <= names


@pytest.mark.parametrize(("variable", "written"), DOCUMENTED)
def test_documented_default_is_the_settings_default(variable: str, written: str) -> None:
    field = MemorySettings.model_fields[variable.lower()]
    expected = _value(written)
    actual = field.default
    if expected is None:
        assert actual is None
    elif isinstance(actual, bool):
        assert str(actual).lower() == expected
    elif isinstance(actual, int | float):
        assert float(expected) == actual
    else:
        assert str(actual) == expected
