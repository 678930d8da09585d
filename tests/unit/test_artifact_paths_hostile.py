"""Hostile names for artifact workspaces (issue 34, section 5, attacks 4 and 5; the promote right).

* Attack 4: ``write_text("a\\x85b.md", ...)`` was accepted: C1 control
  characters passed the path check.  Now every control character (``Cc``),
  every bidirectional formatting character and the line and paragraph
  separators are refused, wherever they stand, in paths, prefixes, workspace
  keys and actors, with one clear error and nothing written.
* Attack 5: ``read_only_prefixes=("./memory/",)`` protected nothing: prefixes
  were not normalised as paths are.  Now every spelling of a prefix
  (``./memory/``, ``memory/./``) is the same prefix, the spellings that name
  nothing (``memory//``, ``./``) are refused, and a path under it is refused
  however either is spelled, in any letter case.
* The promote right: the agent's handle (read-only prefixes, no ``reviewer``)
  cannot promote into them, however the destination is spelled.
"""

from __future__ import annotations

import json
import sys
import unicodedata
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from firefly_orm.artifacts import Artifacts, ReadOnlyPathError, check_path
from firefly_orm.artifacts._rules import (
    check_actor,
    check_prefix,
    check_read_only_prefixes,
    check_workspace_key,
    read_only_prefix_of,
    refused_character,
)
from firefly_orm.errors import EntryValidationError
from firefly_orm.store import InMemoryStore

#: Every control character (category Cc), computed, not listed.
CONTROLS = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cc"]
#: The bidirectional formatting characters and the line and paragraph separators.
FORMATS = [
    "\u061c",
    "\u200e",
    "\u200f",
    *(chr(c) for c in range(0x202A, 0x202F)),
    *(chr(c) for c in range(0x2066, 0x206A)),
    "\u2028",
    "\u2029",
]
REFUSED = CONTROLS + FORMATS
#: Characters names may hold (the joiners emoji and many scripts need among them).
NAME_CHARS = st.characters(
    blacklist_categories=("Cs", "Cc", "Zl", "Zp"),
    blacklist_characters="/\\" + "".join(FORMATS),
)
SEGMENTS = st.text(NAME_CHARS, min_size=1, max_size=8).filter(
    lambda s: s not in (".", "..") and len(s.encode()) <= 255
)
SETTINGS = settings(max_examples=60, deadline=None)


def rows(store: InMemoryStore) -> str:
    """Every row of the store, comparable."""
    return json.dumps(
        {
            ns: sorted((e.entry_id, e.version) for e in store.load(ns))
            for ns in sorted(store.namespaces)
        },
        sort_keys=True,
    )


def test_the_refused_characters_are_exactly_these() -> None:
    assert len(CONTROLS) == 65 and "\x85" in CONTROLS and "\x9f" in CONTROLS
    for char in REFUSED:
        assert refused_character(f"a{char}b") == char
    for char in ("\u200d", "\u200c", "\u00ad", "\ufeff", "\u2060", "é", " ", "~"):
        assert refused_character(f"a{char}b") is None, repr(char)


def test_the_issue_repro_c1_in_a_path() -> None:
    store = InMemoryStore()
    ws = Artifacts(store=store).get_or_create("w")
    before = rows(store)
    with pytest.raises(EntryValidationError, match=r"control characters.*U\+0085") as refused:
        ws.write_text("a\x85b.md", "x")
    assert refused.value.field == "path"
    assert rows(store) == before


@pytest.mark.parametrize("char", REFUSED, ids=lambda c: f"U+{ord(c):04X}")
def test_every_refused_character_is_refused_everywhere(char: str) -> None:
    name = f"user/a{char}b.md"
    for check, field in (
        (check_path, "path"),
        (check_prefix, "prefix"),
        (check_workspace_key, "key"),
        (check_actor, "actor"),
    ):
        with pytest.raises(EntryValidationError) as refused:
            check(name)
        assert refused.value.field == field
        assert ("NUL" if char == "\x00" else "control characters") in str(refused.value)


def test_joiners_stay_allowed() -> None:
    # a family emoji (zero-width joiners) and a Persian word with a non-joiner
    for name in ("\U0001f468\u200d\U0001f469\u200d\U0001f467.md", "\u0645\u06cc\u200c\u062e"):
        assert check_path(name) == unicodedata.normalize("NFC", name)


@SETTINGS
@given(
    before=st.text(NAME_CHARS, max_size=6),
    after=st.text(NAME_CHARS, max_size=6),
    char=st.sampled_from(REFUSED),
    where=st.sampled_from(["path", "key", "actor", "prefix", "promote"]),
)
def test_a_refused_character_anywhere_writes_nothing(
    before: str, after: str, char: str, where: str
) -> None:
    store = InMemoryStore()
    artifacts = Artifacts(store=store)
    ws = artifacts.create("w")
    ws.write_text("src.md", "x")
    state = rows(store)
    hostile = f"{before}{char}{after}"
    with pytest.raises(EntryValidationError):
        if where == "path":
            ws.write_text(f"user/{hostile}", "y")
        elif where == "key":
            artifacts.create(hostile or char)
        elif where == "actor":
            ws.write_text("user/ok.md", "y", actor=hostile)
        elif where == "prefix":
            artifacts.create("w2", read_only_prefixes=(f"memory/{hostile}/",))
        else:
            ws.promote("src.md", f"memory/{hostile}", actor="r", reason="")
    assert rows(store) == state


# --------------------------------------------------------------------------- prefixes


@pytest.mark.parametrize("spelled", ["memory/", "./memory/", "memory/./", "././memory/./"])
@pytest.mark.parametrize("path", ["memory/x.md", "./memory/x.md", "memory/./x.md", "MEMORY/x.md"])
def test_the_issue_repro_every_spelling_of_a_read_only_prefix(spelled: str, path: str) -> None:
    store = InMemoryStore()
    ws = Artifacts(store=store).get_or_create("w", read_only_prefixes=(spelled,))
    assert ws.read_only_prefixes == ("memory/",)
    before = rows(store)
    with pytest.raises(ReadOnlyPathError):
        ws.write_text(path, "y")
    with pytest.raises(ReadOnlyPathError):
        ws.delete(path)
    assert rows(store) == before


@pytest.mark.parametrize(
    "prefix",
    [
        "memory//",
        "memory//x",
        "./",
        ".",
        "",
        "memory/.",
        "memory/..",
        "../memory/",
        "memory/../",
        "/memory/",
        "memory\\",
        "mem\x85ory/",
        "mem\u202eory/",
    ],
)
def test_read_only_prefixes_that_name_nothing_or_something_else_are_refused(prefix: str) -> None:
    with pytest.raises(EntryValidationError) as refused:
        Artifacts().create("w", read_only_prefixes=(prefix,))
    assert refused.value.field == "read_only_prefixes"


def test_prefix_normalisation_examples() -> None:
    assert check_prefix("./memory/") == check_prefix("memory/./") == "memory/"
    assert check_prefix("./") == check_prefix("") == ""
    assert check_prefix("./user") == "user"  # the last segment stays a string prefix
    assert check_prefix(".") == "."  # dot-files at the top
    assert check_prefix("a/./b/.c") == "a/b/.c"
    assert check_read_only_prefixes(["memory/", "./memory/", "MEMORY/", "m/"]) == (
        "memory/",
        "m/",
    )
    for bad in ("a//b", "a/../b", "/a", "a\\b"):
        with pytest.raises(EntryValidationError):
            check_prefix(bad)


@st.composite
def spelled(draw: st.DrawFn, segments: list[str], folder: bool) -> str:
    """``segments`` joined by ``/`` with ``.`` segments mixed in (``folder``: a trailing ``/``)."""
    parts: list[str] = []
    for segment in segments:
        parts.extend(["."] * draw(st.integers(0, 1)))
        parts.append(segment)
    text = "/".join(parts)
    if folder:
        text += "/" + ("./" if draw(st.booleans()) else "")
    return text


@SETTINGS
@given(data=st.data(), prefix=st.lists(SEGMENTS, min_size=1, max_size=3))
def test_any_spelling_of_a_path_under_any_spelling_of_a_read_only_folder_is_refused(
    data: Any, prefix: list[str]
) -> None:
    rest = data.draw(st.lists(SEGMENTS, min_size=1, max_size=2))
    normal_prefix = "".join(unicodedata.normalize("NFC", s) + "/" for s in prefix)
    try:
        normal_path = check_path("/".join(prefix + rest))
    except EntryValidationError:
        return  # a reserved first segment, or too long: never writable anyway
    prefix_spelling = data.draw(spelled(prefix, folder=True))
    path_spelling = data.draw(spelled(prefix + rest, folder=False))
    if data.draw(st.booleans()):
        path_spelling = path_spelling.swapcase()
    checked = check_read_only_prefixes([prefix_spelling])
    assert checked == (normal_prefix,)
    assert check_prefix(checked[0]) == checked[0]  # normal forms are fixed points
    assert normal_path.startswith(normal_prefix)
    try:
        path = check_path(path_spelling)
    except EntryValidationError:
        return  # swapcase made a reserved name or changed a segment's length
    if path.casefold().startswith(normal_prefix.casefold()):
        assert read_only_prefix_of(path, checked) == normal_prefix
        store = InMemoryStore()
        agent = Artifacts(store=store).create("w", read_only_prefixes=checked)
        agent.write_text("staged.md", "x")
        before = rows(store)
        with pytest.raises(ReadOnlyPathError):
            agent.write_text(path_spelling, "y")
        with pytest.raises(ReadOnlyPathError, match="reviewer"):
            agent.promote("staged.md", path_spelling, actor="agent", reason="")
        assert rows(store) == before


def test_the_promote_right_with_hostile_spellings() -> None:
    store = InMemoryStore()
    artifacts = Artifacts(store=store)
    agent = artifacts.create("w", read_only_prefixes=("./memory/./",))
    agent.write_text("user/p.md", "mine")
    before = rows(store)
    for dst in ("memory/p.md", "./memory/p.md", "memory/./p.md", "Memory/p.md", "MEMORY/x/p.md"):
        with pytest.raises(ReadOnlyPathError, match="reviewer"):
            agent.promote("user/p.md", dst, actor="agent", reason="self-approval")
    assert rows(store) == before
    assert agent.audit_tail(5)[-1].op == "create"
    reviewer = artifacts.workspace("w", read_only_prefixes=("memory/",), reviewer=True)
    assert reviewer.promote("user/p.md", "./memory/p.md", actor="rev", reason="ok").path == (
        "memory/p.md"
    )
