"""Artifact path rules, layouts and bodies, property-based (issue 12).

Paths are built from segments: good segments joined with ``/`` (with ``.``
segments mixed in) are accepted and normalised; one bad ingredient anywhere
(``..``, an empty segment, a leading ``/``, a backslash, NUL or another
control character, a reserved first segment) is refused with an
:class:`EntryValidationError` naming the field, and a workspace on an
:class:`InMemoryStore` then holds exactly the rows it held before.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from firefly_orm.artifacts import (
    MAX_PATH_BYTES,
    RESERVED_DIRS,
    TRANSCRIPT_PATH,
    Artifacts,
    Layout,
    check_path,
    json_text,
)
from firefly_orm.artifacts._model import Body, check_expected_sha, check_prefix
from firefly_orm.errors import EntryValidationError
from firefly_orm.store import InMemoryStore

#: The bidirectional formatting characters, refused as control characters are.
BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
#: Characters a good segment is made of: no control character, line separator or
#: bidirectional formatting character, no '/', no '\\'.
SEGMENT_CHARS = st.characters(
    blacklist_categories=("Cc", "Cs", "Zl", "Zp"), blacklist_characters="/\\" + BIDI
)
SEGMENTS = st.text(SEGMENT_CHARS, min_size=1, max_size=12).filter(
    lambda s: s not in (".", "..") and len(s.encode()) <= 255
)
BAD_CONTROL = st.sampled_from(
    ["\x00", "\x01", "\n", "\r", "\t", "\x1f", "\x7f", "\x80", "\x85", "\x9f", "\u2028", *BIDI]
)


def is_reserved(first: str, whole: str) -> bool:
    return first.casefold() in RESERVED_DIRS or whole.casefold() == TRANSCRIPT_PATH


@st.composite
def good_paths(draw: st.DrawFn) -> tuple[str, str]:
    """(a path as a caller may spell it, what it normalises to)."""
    segments = draw(st.lists(SEGMENTS, min_size=1, max_size=6))
    normal = [unicodedata.normalize("NFC", s) for s in segments]
    whole = "/".join(normal)
    assume(not is_reserved(normal[0], whole))
    assume(len(whole.encode()) <= MAX_PATH_BYTES)
    spelled: list[str] = []
    for segment in segments:
        spelled.extend(["."] * draw(st.integers(0, 1)))
        spelled.append(segment)
    return "/".join(spelled), whole


@st.composite
def bad_paths(draw: st.DrawFn) -> str:
    """A path with exactly one kind of flaw somewhere."""
    segments = draw(st.lists(SEGMENTS, min_size=1, max_size=5))
    flaw = draw(
        st.sampled_from(
            ["dotdot", "empty", "absolute", "trailing", "backslash", "control", "reserved"]
        )
    )
    where = draw(st.integers(0, len(segments)))
    if flaw == "dotdot":
        segments.insert(where, "..")
    elif flaw == "empty":
        segments.insert(min(where, len(segments) - 1) + 1 if len(segments) > 1 else 1, "")
        if segments[-1] == "":
            segments.append("x")
    elif flaw == "absolute":
        return "/" + "/".join(segments)
    elif flaw == "trailing":
        return "/".join(segments) + "/"
    elif flaw == "backslash":
        segments[min(where, len(segments) - 1)] += "\\x"
    elif flaw == "control":
        i = min(where, len(segments) - 1)
        segments[i] = segments[i] + draw(BAD_CONTROL)
    else:
        first = draw(st.sampled_from([*RESERVED_DIRS, "Audit", "META", "VeRsIoNs"]))
        if draw(st.booleans()) or len(segments) == 1:
            return draw(st.sampled_from(["messages.json", "Messages.JSON"]))
        segments[0] = first
    return "/".join(segments)


@given(good_paths())
def test_good_paths_are_normalised(case: tuple[str, str]) -> None:
    spelled, normal = case
    assert check_path(spelled) == normal
    assert check_path(normal) == normal  # idempotent
    assert unicodedata.is_normalized("NFC", normal)
    assert not normal.startswith("/") and "//" not in normal and not normal.endswith("/")
    assert ".." not in normal.split("/") and "." not in normal.split("/")


@given(bad_paths())
def test_bad_paths_are_refused_with_the_field_named(path: str) -> None:
    with pytest.raises(EntryValidationError) as refused:
        check_path(path)
    assert refused.value.field == "path"
    with pytest.raises(EntryValidationError) as named:
        check_path(path, "src")
    assert named.value.field == "src"


@pytest.mark.parametrize(
    "path",
    [
        "",
        ".",
        "./.",
        "..",
        "a/../b",
        "/a",
        "a//b",
        "a/",
        "a\\b",
        "a\x00b",
        "a\nb",
        "audit",
        "meta/x",
        "Versions/x",
        "messages.json",
        "MESSAGES.json",
        "x" * 256,
        "a/" * 600 + "a",
    ],
)
def test_known_bad_paths(path: str) -> None:
    with pytest.raises(EntryValidationError):
        check_path(path)


@pytest.mark.parametrize(
    ("spelled", "normal"),
    [
        ("./a", "a"),
        ("a/./b", "a/b"),
        ("user/notes.md", "user/notes.md"),
        ("messages.json/x", "messages.json/x"),
        ("auditing/x", "auditing/x"),
        ("x/audit/y", "x/audit/y"),
        ("cafe\u0301.md", "caf\u00e9.md"),
        ("C:x", "C:x"),
        ("...", "..."),
    ],
)
def test_known_good_paths(spelled: str, normal: str) -> None:
    assert check_path(spelled) == normal


def test_wrong_types_are_refused() -> None:
    for value in (None, 1, b"a", ["a"]):
        with pytest.raises(EntryValidationError, match="must be a string"):
            check_path(value)
    for prefix in ("/a", "a\\b", "a\x00"):
        with pytest.raises(EntryValidationError):
            check_prefix(prefix)
    assert check_prefix("") == ""


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.one_of(bad_paths(), good_paths().map(lambda case: case[0])))
def test_a_workspace_writes_a_path_only_when_it_is_good(path: str) -> None:
    store = InMemoryStore()
    ws = Artifacts(store=store).create("w")
    before = _all_rows(store)
    try:
        normal = check_path(path)
    except EntryValidationError:
        for write in (
            lambda: ws.write_text(path, "x"),
            lambda: ws.write_json(path, {"a": 1}),
            lambda: ws.write_bytes(path, b"x"),
            lambda: ws.delete(path),
            lambda: ws.read_text(path, ""),
            lambda: ws.history(path),
        ):
            with pytest.raises(EntryValidationError):
                write()
        assert _all_rows(store) == before
        return
    info = ws.write_text(path, "x")
    assert info.path == normal
    assert ws.list_paths() == [normal]
    assert ws.read_text(normal) == ws.read_text(path) == "x"
    assert [r.path for r in ws.audit_tail()] == [normal]


def _all_rows(store: InMemoryStore) -> list[tuple[str, str, Any]]:
    found: list[tuple[str, str, Any]] = []
    for namespace in ("artifacts", *Layout.of("w", None).family):
        found.extend((namespace, e.entry_id, e.content) for e in store.load(namespace))
    return sorted(found, key=repr)


KEYS = st.text(
    st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp"), blacklist_characters=BIDI),
    min_size=1,
    max_size=80,
)
USERS = st.one_of(
    st.none(),
    st.text(
        st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
        min_size=1,
        max_size=120,
    ),
)


@SETTINGS
@given(st.lists(st.tuples(KEYS, USERS), min_size=2, max_size=6, unique=True))
def test_every_workspace_has_namespaces_of_its_own(pairs: list[tuple[str, str | None]]) -> None:
    layouts = [Layout.of(key, user) for key, user in pairs]
    namespaces = [ns for layout in layouts for ns in layout.family]
    assert len(set(namespaces)) == len(namespaces)
    assert len({layout.head_id for layout in layouts}) == len(layouts)
    for layout in layouts:
        assert all(len(ns) < 250 for ns in layout.family)
        assert all(ns.startswith("artifacts:") for ns in layout.family)


@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(st.characters(blacklist_categories=["Cs"])),
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(
                st.text(st.characters(blacklist_categories=["Cs"]), max_size=5),
                children,
                max_size=4,
            )
        ),
        max_leaves=20,
    )
)
def test_json_bodies_hash_their_text(value: Any) -> None:
    body = Body.of_json(value)
    text = json.dumps(value, indent=2, sort_keys=True)
    assert body.text == json_text(value) == text
    assert body.sha256 == hashlib.sha256(text.encode()).hexdigest()
    assert json.loads(text) == value or value != value


def test_expected_sha_rules() -> None:
    assert check_expected_sha(None) is None
    assert check_expected_sha("") == ""
    upper = "AB" * 32
    assert check_expected_sha(upper) == upper.lower()
    for bad in ("abc", "g" * 64, 1, b"", "a" * 65):
        with pytest.raises(EntryValidationError, match="expected_sha"):
            check_expected_sha(bad)
