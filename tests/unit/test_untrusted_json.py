"""``load_untrusted_json``: the one bounded reader of JSON from outside (issue 34, section 5).

Within its bounds it reads exactly what :func:`json.loads` reads; past them
(depth, integer digits, size, encoding, NaN) it raises one
:class:`JSONInputError` line, before anything recursive runs.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from firefly_orm.entry._json import (
    MAX_INPUT_INT_DIGITS,
    MAX_INPUT_JSON_DEPTH,
    JSONInputError,
    load_untrusted_json,
)
from firefly_orm.errors import FireflyOrmError

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: Strings full of what a bracket counter could be fooled by.
_tricky_text = st.text(alphabet='[]{}"\\,:ab\n\u00e9\U0001f600', max_size=12)
_finite = st.floats(allow_nan=False, allow_infinity=False)
_scalars = st.none() | st.booleans() | st.integers() | _finite | _tricky_text
json_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_tricky_text, inner, max_size=4),
    max_leaves=25,
)


def depth(value: Any) -> int:
    """Nesting of lists and dicts: ``[]`` and ``{}`` are 1."""
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    return 0


def nest(value: Any, levels: int) -> Any:
    for _ in range(levels):
        value = [value]
    return value


@SETTINGS
@given(json_values, st.booleans())
def test_reads_what_json_loads_reads(value: Any, indent: bool) -> None:
    text = json.dumps(value, indent=2 if indent else None, ensure_ascii=False)
    assert load_untrusted_json(text) == json.loads(text)
    assert load_untrusted_json(text.encode("utf-8")) == json.loads(text)


@SETTINGS
@given(json_values, st.integers(min_value=0, max_value=6))
def test_depth_limit_is_exact_and_strings_do_not_fool_it(value: Any, extra: int) -> None:
    nested = nest(value, extra)
    text = json.dumps(nested)
    levels = depth(nested)
    if levels:
        assert load_untrusted_json(text, max_depth=levels) == nested
    if levels > 0:
        with pytest.raises(JSONInputError, match=f"more than {levels - 1} levels"):
            load_untrusted_json(text, max_depth=levels - 1)


@pytest.mark.parametrize("opener", ["[", '{"a":'])
def test_100000_deep_is_one_line_not_a_recursion_error(opener: str) -> None:
    closer = "]" if opener == "[" else "}"
    text = opener * 100_000 + "1" + closer * 100_000
    with pytest.raises(JSONInputError) as refused:
        load_untrusted_json(text)
    message = str(refused.value)
    assert message.startswith(f"is nested too deeply (more than {MAX_INPUT_JSON_DEPTH} levels")
    assert "\n" not in message and isinstance(refused.value, FireflyOrmError | ValueError)


@pytest.mark.parametrize(
    ("tail", "expected"),
    [
        ('"' + '\\"' * 200_000, "nested too deeply"),  # one string never closed
        ('"' * 400_001, "nested too deeply"),
        ('"\\' * 200_000, "nested too deeply"),
    ],
    ids=["escaped-quotes", "quotes", "quote-backslash"],
)
def test_unclosed_strings_after_many_brackets_finish(tail: str, expected: str) -> None:
    """Cutting strings out stays linear: a regex that had to fail after scanning to
    the end from each quote would take minutes here (quadratic), not milliseconds."""
    with pytest.raises(JSONInputError, match=expected):
        load_untrusted_json("[" * 300 + tail)
    # and without the brackets, the parser says why it is not JSON
    with pytest.raises(JSONInputError, match=r"^is not JSON \("):
        load_untrusted_json("[" + tail)


def test_the_deepest_allowed_is_read_and_located_when_one_more() -> None:
    assert load_untrusted_json(json.dumps(nest(1, MAX_INPUT_JSON_DEPTH))) == nest(1, 256)
    text = '{\n  "ok": [1],\n  "x": ' + json.dumps(nest(1, MAX_INPUT_JSON_DEPTH)) + "}"
    with pytest.raises(JSONInputError, match=r"line 3, column 263, under key 'x'\)$"):
        load_untrusted_json(text)


def test_integer_digits() -> None:
    assert load_untrusted_json("9" * MAX_INPUT_INT_DIGITS) == int("9" * MAX_INPUT_INT_DIGITS)
    assert load_untrusted_json("-" + "9" * MAX_INPUT_INT_DIGITS) < 0
    with pytest.raises(JSONInputError, match=r"^holds an integer of 5000 digits \(at most 4300"):
        load_untrusted_json('{"a": [' + "9" * 5000 + "]}")
    with pytest.raises(JSONInputError, match="integer of 11 digits"):
        load_untrusted_json("12345678901", max_int_digits=10)
    # a float with many digits is a float (no quadratic conversion)
    assert load_untrusted_json("1." + "5" * 5000) == pytest.approx(14 / 9)


def test_integer_limit_zero_leaves_the_interpreters() -> None:
    before = sys.get_int_max_str_digits()
    try:
        sys.set_int_max_str_digits(5000)
        assert load_untrusted_json("9" * 4500, max_int_digits=0) == int("9" * 4500)
        sys.set_int_max_str_digits(640)
        with pytest.raises(JSONInputError, match="at most 640 are read by this interpreter"):
            load_untrusted_json("9" * 700)
    finally:
        sys.set_int_max_str_digits(before)


def test_size_encoding_constants_and_syntax() -> None:
    with pytest.raises(JSONInputError, match=r"^is larger than 4 bytes$"):
        load_untrusted_json(b"[1,2]", max_size=4)
    with pytest.raises(JSONInputError, match=r"^is larger than 4 characters$"):
        load_untrusted_json("[1,2]", max_size=4)
    with pytest.raises(JSONInputError, match=r"^is not UTF-8 \(byte 0xff at offset 2\)$"):
        load_untrusted_json(b'["\xff"]')
    with pytest.raises(JSONInputError, match=r"^holds NaN, which is not JSON$"):
        load_untrusted_json("[NaN]")
    assert math.isinf(load_untrusted_json("[-Infinity]", allow_constants=True)[0])
    with pytest.raises(JSONInputError, match=r"^is not JSON \(Expecting value"):
        load_untrusted_json("")
    with pytest.raises(JSONInputError, match=r"^is not JSON \(Extra data"):
        load_untrusted_json("[] []")


def test_object_pairs_hook_refusal_is_reported() -> None:
    def once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in pairs]
        if len(set(keys)) != len(keys):
            raise ValueError("a key appears twice")
        return dict(pairs)

    assert load_untrusted_json('{"a": 1}', object_pairs_hook=once) == {"a": 1}
    with pytest.raises(JSONInputError, match=r"^is not JSON \(a key appears twice\)$"):
        load_untrusted_json('{"a": 1, "a": 2}', object_pairs_hook=once)
