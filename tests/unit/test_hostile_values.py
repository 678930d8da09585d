"""Hostile values refused by validation (issue 17, item 4), without a database.

Every store calls :func:`validate_entry` before it writes; the contract suite
checks "refused and nothing written" on each backend.  Here: the rules
themselves (depth limit, colliding keys, version range, schema names, MongoDB
names) and that the checks cannot themselves overflow the stack.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from firefly_orm.entry import (
    MAX_ENTRY_VERSION,
    MAX_JSON_DEPTH,
    MemoryEntry,
    check_json_structure,
    validate_entry,
)
from firefly_orm.errors import EntryValidationError
from firefly_orm.migrate import validate_schema_name
from firefly_orm.mongo._document import entry_to_document, validate_collection_name
from firefly_orm.testing._samples import nested_list


def _nested_dict(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"k": value}
    return value


def _refused(field: str, **fields: Any) -> EntryValidationError:
    with pytest.raises(EntryValidationError) as info:
        validate_entry(MemoryEntry(**fields), "ns")
    assert info.value.field == field
    assert field in str(info.value)
    return info.value


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 10_000, sys.getrecursionlimit() * 50])
def test_deep_lists_and_dicts_are_refused_not_a_recursion_error(depth: int) -> None:
    _refused("content", content=nested_list(depth))
    _refused("content", content=_nested_dict(depth))
    _refused("metadata", content=1, metadata={"m": nested_list(depth)})
    error = _refused("content", content={"ok": [1], "bad": [nested_list(depth)]})
    assert str(MAX_JSON_DEPTH) in str(error)


def test_the_depth_limit_itself_is_accepted() -> None:
    validate_entry(MemoryEntry(content=nested_list(MAX_JSON_DEPTH)), "ns")
    validate_entry(MemoryEntry(content=_nested_dict(MAX_JSON_DEPTH)), "ns")
    # The metadata dict is one level itself.
    validate_entry(MemoryEntry(content=1, metadata=_nested_dict(MAX_JSON_DEPTH)), "ns")
    _refused("metadata", content=1, metadata={"m": _nested_dict(MAX_JSON_DEPTH)})


def test_validate_json_value_names_its_field() -> None:
    from firefly_orm.entry import validate_json_value

    validate_json_value("raw_messages", [[], {}, [[1]]])
    with pytest.raises(EntryValidationError) as info:
        validate_json_value("raw_messages", nested_list(10_000))
    assert info.value.field == "raw_messages"


def test_a_reference_cycle_is_refused() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    _refused("content", content=cycle)
    wide: dict[str, Any] = {}
    wide.update({str(i): wide for i in range(1000)})
    _refused("content", content=wide)


@pytest.mark.parametrize(
    "value",
    [
        {1: "a", "1": "b"},
        {True: 1, "true": 2},
        {None: 1, "null": 2},
        {1.5: 1, "1.5": 2},
        {"outer": [{"x": 0, 2: "a", "2": "b"}]},
    ],
    ids=["int", "bool", "none", "float", "nested"],
)
def test_keys_colliding_after_json_conversion_are_refused(value: dict[Any, Any]) -> None:
    error = _refused("content", content=value)
    assert "collide" in str(error)
    _refused("metadata", content=1, metadata={"m": value})


def test_non_string_keys_that_do_not_collide_are_still_accepted() -> None:
    entry = MemoryEntry(content={1: "a", "2": "b", None: 0, 2.5: 1}, metadata={"m": {3: 3}})
    validate_entry(entry, "ns")


@pytest.mark.parametrize("version", [-1, MAX_ENTRY_VERSION + 1, 2**63, 2**64, True])
def test_versions_outside_the_column_range_are_refused(version: int) -> None:
    _refused("version", version=version)


@pytest.mark.parametrize("version", [0, 1, MAX_ENTRY_VERSION])
def test_versions_inside_the_column_range_are_accepted(version: int) -> None:
    validate_entry(MemoryEntry(version=version), "ns")


@pytest.mark.parametrize("name", ["abc\n", "abc\r\n", "\nabc", "a\nb", "abc ", ""])
def test_schema_names_must_match_in_full(name: str) -> None:
    with pytest.raises(EntryValidationError) as info:
        validate_schema_name(name)
    assert info.value.field == "schema_name"


@pytest.mark.parametrize("name", ["abc", "_x", "A" * 63, None])
def test_valid_schema_names(name: str | None) -> None:
    assert validate_schema_name(name) == name


def test_mongo_collection_names_are_not_regex_prefixed() -> None:
    # No regular expression is involved, so no trailing-newline loophole either.
    assert validate_collection_name("memory_entries") == "memory_entries"


def test_mongo_codec_keeps_deep_values_within_the_bson_nesting_limit() -> None:
    """MongoDB refuses documents nested over 100 levels: deep values go as JSON text."""
    entry = MemoryEntry(content=nested_list(MAX_JSON_DEPTH), metadata=_nested_dict(99))
    validate_entry(entry, "ns")
    doc = entry_to_document(entry, "ns")
    assert _bson_depth(doc) <= 100


def _bson_depth(value: Any) -> int:
    depth, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            depth = max(depth, level)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return depth


# --------------------------------------------------------------------------- the walk, read again


class _Dict(dict[Any, Any]):
    """A dict subclass: the walk looks inside it as inside a dict."""


def _verdict_by_recursion(value: Any, depth: int = 1) -> bool:
    """Whether the structure rules refuse ``value``, read recursively (shallow values only)."""
    if isinstance(value, dict):
        texts = [_key_text(k) for k in value]
        known = [t for t in texts if t is not None]
        if len(set(known)) < len(known):
            return True
        children: Any = value.values()
    elif isinstance(value, list | tuple):
        children = value
    else:
        return False
    return depth > MAX_JSON_DEPTH or any(_verdict_by_recursion(c, depth + 1) for c in children)


def _key_text(key: Any) -> str | None:
    if isinstance(key, str):
        return str.__str__(key)
    if key is None or isinstance(key, bool | int | float):
        import json

        return json.dumps(key)
    return None


_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.floats(-2, 2), st.text(max_size=3)
)
_keys = st.one_of(st.text(max_size=2), st.integers(0, 3), st.booleans(), st.none(), st.just(1.5))
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(_keys, inner, max_size=4),
        st.dictionaries(_keys, inner, max_size=3).map(_Dict),
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(value=_values, wrap=st.integers(0, MAX_JSON_DEPTH + 3), as_dict=st.booleans())
def test_the_structure_walk_agrees_with_a_recursive_reading(
    value: Any, wrap: int, as_dict: bool
) -> None:
    # Wrapped near the depth limit, so both sides of it are reached.
    for _ in range(wrap):
        value = {"k": value} if as_dict else [value]
    expected = _verdict_by_recursion(value)
    try:
        check_json_structure("content", value)
    except EntryValidationError:
        refused = True
    else:
        refused = False
    assert refused == expected
