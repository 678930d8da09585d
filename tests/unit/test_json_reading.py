"""Stored JSON reads back exactly as :func:`json.loads` would read it.

The SQL stores parse ``content`` and ``metadata`` with
:func:`~firefly_orm.entry._json.load_json` (pydantic-core's parser, falling
back to :func:`json.loads` where it refuses a text).  A faster parse is only
worth having if no stored value changes: every value, every float bit, every
integer size, every escape, and the same errors for broken text.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from firefly_orm.entry._json import MAX_JSON_DEPTH, load_json

_scalars = (
    st.none()
    | st.booleans()
    | st.integers()  # beyond 64 bits too
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(codec="utf-8"))
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


def same(a: Any, b: Any) -> bool:
    """Equal, with the same types all the way down (``1`` is not ``1.0``, ``-0.0`` not ``0.0``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return math.copysign(1.0, a) == math.copysign(1.0, b) and a == b
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


@settings(max_examples=500, deadline=None)
@given(value=_values, ascii_only=st.booleans(), as_bytes=st.booleans())
def test_every_value_reads_as_json_loads_reads_it(
    value: Any, ascii_only: bool, as_bytes: bool
) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    raw: str | bytes = text.encode() if as_bytes else text
    assert same(load_json(raw), json.loads(raw))


@pytest.mark.parametrize(
    "text",
    [
        '"\\ud800"',  # an escaped lone surrogate: valid JSON, refused by the fast parser
        '["\\udfff", {"k": "\\ud83d"}]',
        "[" * 300 + "]" * 300,  # deeper than the fast parser goes
        '{"a": 1, "a": 2}',  # the last of duplicate keys
        "NaN",
        "[Infinity, -Infinity, -0.0, 1e400]",
        "123456789012345678901234567890",
    ],
)
def test_texts_the_fast_parser_refuses_or_bends_read_as_json_loads_reads_them(text: str) -> None:
    assert repr(load_json(text)) == repr(json.loads(text))


def test_values_as_deep_as_a_store_accepts_read_without_the_fallback() -> None:
    deep = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert load_json(deep) == json.loads(deep)


@pytest.mark.parametrize("text", ["", "[1,]", '{"a": 1} x', '"a\nb"', "{'a': 1}", '"\\x"'])
def test_broken_text_raises_what_json_loads_raises(text: str) -> None:
    with pytest.raises(json.JSONDecodeError) as raised:
        load_json(text)
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(text)
    assert str(raised.value) == str(expected.value)
