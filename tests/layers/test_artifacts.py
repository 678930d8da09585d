"""Artifact workspaces on every layer backend, sync and async (issue 12).

Flyte's documented flows on our API (stage under ``user/``, a direct write
into ``memory/`` refused, promotion with its audit entry, a compare-and-set
conflict, version history, the audit tail), then each part on its own: text,
JSON and binary files, ``stat``, listing by prefix, compare-and-set on writes
and deletes, promotion, versions, the transcript (pydantic-ai messages
included), keyed and per-user workspaces, snapshots; and that every refused
or failed operation leaves every row of the workspace as it was.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from modes import call
from store_backends import OpenedBackend, backend_params, open_backend

from firefly_orm.artifacts import (
    ArtifactFile,
    Artifacts,
    ArtifactWorkspace,
    AuditRecord,
    FileInfo,
    Layout,
    ReadOnlyPathError,
    ShaMismatchError,
    TranscriptMessage,
    WorkspaceExistsError,
    WorkspaceSnapshot,
    json_text,
    transcript_from_json,
)
from firefly_orm.artifacts import (
    _ops as ops,
)
from firefly_orm.artifacts._model import REGISTRY_NAMESPACE, Body
from firefly_orm.conversation import ConversationMemory
from firefly_orm.errors import ConcurrencyError, EntryValidationError, NotFoundError
from firefly_orm.uow import StagedUnitOfWork

SHA_OF_EMPTY = hashlib.sha256(b"").hexdigest()


#: The layer backends whose units of work are staged: applied at commit, no lock
#: taken before.  Only there can a stale writer be interleaved in one thread.
STAGED_BACKENDS = ("memory", "file", "mongo")


@pytest.fixture(params=backend_params(STAGED_BACKENDS))
def staged_store(request: pytest.FixtureRequest) -> Iterator[Any]:
    opened = open_backend(request, str(request.param))
    try:
        assert isinstance(opened.store.unit_of_work(), StagedUnitOfWork)
        yield opened.store
    finally:
        opened.close()


def sha(data: str | bytes) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def rows(store: Any, ws: ArtifactWorkspace) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the workspace (its head and each namespace), as comparable tuples."""
    layout = ws.layout
    found: dict[str, list[tuple[Any, ...]]] = {}
    for namespace in layout.family:
        found[namespace] = sorted(
            (e.entry_id, e.key, e.version, json.dumps(e.content, sort_keys=True))
            for e in store.load(namespace)
        )
    found["head"] = [
        (e.entry_id, e.key, e.version)
        for e in store.load(REGISTRY_NAMESPACE)
        if e.entry_id == layout.head_id
    ]
    return found


# --------------------------------------------------------------------------- Flyte's flows


async def test_flyte_flow_stage_block_promote_conflict_history_tail(
    layer_backend: OpenedBackend, mode: str
) -> None:
    store = layer_backend.store
    artifacts = Artifacts(store=store)
    agent = await call(
        mode,
        artifacts,
        "get_or_create",
        "session-1",
        read_only_prefixes=("memory/",),
        keep_versions=True,
    )
    # 1. the agent stages a proposal under user/
    staged = await call(
        mode, agent, "write_text", "user/profile.md", "likes tea", actor="agent", reason="draft"
    )
    assert staged.sha256 == sha("likes tea") and staged.version == 1
    # 2. a direct write into memory/ is refused, and leaves nothing behind
    before = rows(store, agent)
    with pytest.raises(ReadOnlyPathError, match="read-only prefix 'memory/'") as refused:
        await call(mode, agent, "write_text", "memory/profile.md", "likes tea", actor="agent")
    assert (refused.value.path, refused.value.prefix) == ("memory/profile.md", "memory/")
    with pytest.raises(ReadOnlyPathError):
        await call(mode, agent, "delete", "memory/profile.md", actor="agent")
    assert rows(store, agent) == before
    # 3. a reviewer (a handle without read-only prefixes) promotes it, with its audit entry
    reviewer = await call(mode, artifacts, "open", "session-1", keep_versions=True)
    promoted = await call(
        mode,
        reviewer,
        "promote",
        "user/profile.md",
        "memory/profile.md",
        actor="reviewer",
        reason="approved",
        src_sha=staged.sha256,
    )
    assert (promoted.path, promoted.sha256, promoted.actor) == (
        "memory/profile.md",
        staged.sha256,
        "reviewer",
    )
    assert await call(mode, agent, "read_text", "memory/profile.md") == "likes tea"
    # 4. compare-and-set: two writers read the same sha; the second one is refused
    base = await call(mode, agent, "current_sha", "user/profile.md")
    await call(mode, agent, "write_text", "user/profile.md", "likes coffee", expected_sha=base)
    with pytest.raises(ShaMismatchError) as conflict:
        await call(mode, agent, "write_text", "user/profile.md", "likes milk", expected_sha=base)
    assert conflict.value.current_sha == sha("likes coffee")
    assert sha("likes coffee") in str(conflict.value)
    assert isinstance(conflict.value, ConcurrencyError)
    assert await call(mode, agent, "read_text", "user/profile.md") == "likes coffee"
    # 5. version history of the staged file
    history = await call(mode, agent, "history", "user/profile.md")
    assert [(h.sha256, h.version) for h in history] == [
        (sha("likes tea"), 1),
        (sha("likes coffee"), 2),
    ]
    old = await call(mode, agent, "read_version", "user/profile.md", sha("likes tea"))
    assert old is not None and old.text() == "likes tea"
    # 6. the audit tail, most recent last
    tail = await call(mode, agent, "audit_tail", 10)
    assert [(r.op, r.path, r.old_sha, r.new_sha, r.actor) for r in tail] == [
        ("create", "user/profile.md", "", sha("likes tea"), "agent"),
        ("promote", "memory/profile.md", "", sha("likes tea"), "reviewer"),
        ("update", "user/profile.md", sha("likes tea"), sha("likes coffee"), "agent"),
    ]
    assert (tail[1].source, tail[1].moved, tail[1].reason) == ("user/profile.md", False, "approved")
    assert [r.op for r in await call(mode, agent, "audit_tail", 1)] == ["update"]
    # everything is in the store: a new store object (a new process) sees it
    again = Artifacts(store=layer_backend.reopen()).workspace("session-1")
    assert await call(mode, again, "list_paths") == ["memory/profile.md", "user/profile.md"]
    assert len(await call(mode, again, "audit_tail", 100)) == 3


# --------------------------------------------------------------------------- files


async def test_text_json_and_binary_files(store: Any, mode: str) -> None:
    ws = await call(mode, Artifacts(store=store), "create", "kinds")
    text = "naïve café\n\x00 NUL inside and 🐍"
    t = await call(mode, ws, "write_text", "notes/a.md", text, actor="ann", reason="why")
    assert (t.size, t.sha256, t.kind, t.actor, t.reason) == (
        len(text.encode()),
        sha(text),
        "text",
        "ann",
        "why",
    )
    assert await call(mode, ws, "read_text", "notes/a.md") == text
    value = {"b": [1, 2.5, None], "a": {"z": True}, "é": "x"}
    j = await call(mode, ws, "write_json", "state.json", value)
    assert j.kind == "json" and j.sha256 == sha(json_text(value))
    assert json_text(value) == json.dumps(value, indent=2, sort_keys=True)
    assert await call(mode, ws, "read_json", "state.json") == value
    assert await call(mode, ws, "read_text", "state.json") == json_text(value)
    blob = bytes(range(256)) * 3
    b = await call(mode, ws, "write_bytes", "bin/blob.dat", blob)
    assert (b.kind, b.size, b.sha256) == ("bytes", len(blob), sha(blob))
    assert await call(mode, ws, "read_bytes", "bin/blob.dat") == blob
    assert await call(mode, ws, "read_bytes", "notes/a.md") == text.encode()
    with pytest.raises(EntryValidationError, match="not UTF-8"):
        await call(mode, ws, "read_text", "bin/blob.dat")
    with pytest.raises(EntryValidationError, match="does not hold JSON"):
        await call(mode, ws, "read_json", "notes/a.md")
    await call(mode, ws, "write_text", "empty.txt", "")
    assert (await call(mode, ws, "stat", "empty.txt")).sha256 == SHA_OF_EMPTY
    # stat: sha256, size, updated_at, version, actor, reason
    info = await call(mode, ws, "stat", "notes/a.md")
    assert isinstance(info, FileInfo) and info == t
    assert info.updated_at.tzinfo is not None
    second = await call(mode, ws, "write_text", "notes/a.md", "v2", actor="bob")
    assert (second.version, second.actor, second.reason) == (2, "bob", "")
    assert second.updated_at > info.updated_at
    assert await call(mode, ws, "stat", "notes/a.md") == second
    # missing files
    assert await call(mode, ws, "stat", "nope") is None
    assert await call(mode, ws, "read", "nope") is None
    assert await call(mode, ws, "current_sha", "nope") == ""
    assert await call(mode, ws, "exists", "nope") is False
    assert await call(mode, ws, "exists", "notes/a.md") is True
    with pytest.raises(NotFoundError, match="no file 'nope'"):
        await call(mode, ws, "read_text", "nope")
    assert await call(mode, ws, "read_text", "nope", "") == ""
    assert await call(mode, ws, "read_json", "nope", None) is None
    assert await call(mode, ws, "read_bytes", "nope", b"") == b""
    found = await call(mode, ws, "read", "./notes/a.md")  # normalised on reads too
    assert isinstance(found, ArtifactFile) and found.data == b"v2" and found.info == second


async def test_list_paths_sorted_by_path_with_string_prefixes(store: Any, mode: str) -> None:
    ws = await call(mode, Artifacts(store=store), "create", "listing")
    paths = ["user/b.md", "users.md", "memory/x", "user/a/z.md", "a", "user/a.md", "Z", "é.md"]
    for path in paths:
        await call(mode, ws, "write_text", path, path)
    assert await call(mode, ws, "list_paths") == sorted(paths)  # code-point order
    assert await call(mode, ws, "list_paths", "user/") == ["user/a.md", "user/a/z.md", "user/b.md"]
    assert await call(mode, ws, "list_paths", "user") == [
        "user/a.md",
        "user/a/z.md",
        "user/b.md",
        "users.md",
    ]
    assert await call(mode, ws, "list_paths", "nothing/") == []
    infos = await call(mode, ws, "files", "user/", limit=2)
    assert [(i.path, i.sha256) for i in infos] == [
        ("user/a.md", sha("user/a.md")),
        ("user/a/z.md", sha("user/a/z.md")),
    ]
    await call(mode, ws, "delete", "user/a.md")
    assert await call(mode, ws, "list_paths", "user/") == ["user/a/z.md", "user/b.md"]
    # another workspace with the same paths is another namespace
    other = await call(mode, Artifacts(store=store), "create", "listing-2")
    assert await call(mode, other, "list_paths") == []


async def test_compare_and_set_on_writes_and_deletes(store: Any, mode: str) -> None:
    ws = await call(mode, Artifacts(store=store), "create", "cas")
    first = await call(mode, ws, "write_text", "f.txt", "one", expected_sha="")
    with pytest.raises(ShaMismatchError, match="expected absent") as exists:
        await call(mode, ws, "write_text", "f.txt", "two", expected_sha="")
    assert (exists.value.path, exists.value.expected_sha, exists.value.current_sha) == (
        "f.txt",
        "",
        first.sha256,
    )
    stale = sha("something else")
    with pytest.raises(ShaMismatchError) as mismatch:
        await call(mode, ws, "write_text", "f.txt", "two", expected_sha=stale)
    assert mismatch.value.current_sha == first.sha256
    assert first.sha256 in str(mismatch.value)
    upper = first.sha256.upper()  # hex in any case
    second = await call(mode, ws, "write_text", "f.txt", "two", expected_sha=upper)
    assert second.version == 2
    with pytest.raises(ShaMismatchError):
        await call(mode, ws, "write_text", "new.txt", "x", expected_sha=second.sha256)
    # deletes
    with pytest.raises(ShaMismatchError) as refused:
        await call(mode, ws, "delete", "f.txt", expected_sha=first.sha256)
    assert refused.value.current_sha == second.sha256
    with pytest.raises(ShaMismatchError):
        await call(mode, ws, "delete", "f.txt", expected_sha="")
    assert await call(mode, ws, "read_text", "f.txt") == "two"
    assert await call(mode, ws, "delete", "f.txt", expected_sha=second.sha256) is True
    assert await call(mode, ws, "delete", "f.txt") is False
    assert await call(mode, ws, "delete", "f.txt", expected_sha="") is False
    with pytest.raises(ShaMismatchError, match="current sha is absent"):
        await call(mode, ws, "delete", "f.txt", expected_sha=second.sha256)
    # a re-created file starts at version 1 again
    again = await call(mode, ws, "write_text", "f.txt", "three", expected_sha="")
    assert again.version == 1
    tail = await call(mode, ws, "audit_tail", 50)
    assert [(r.op, r.path) for r in tail] == [
        ("create", "f.txt"),
        ("update", "f.txt"),
        ("delete", "f.txt"),
        ("create", "f.txt"),
    ]
    assert (tail[2].old_sha, tail[2].new_sha) == (second.sha256, "")


async def test_refused_writes_leave_every_row_as_it_was(store: Any, mode: str) -> None:
    ws = await call(
        mode,
        Artifacts(store=store),
        "create",
        "refusals",
        read_only_prefixes=("memory/",),
        keep_versions=True,
        max_bytes=64,
    )
    await call(mode, ws, "write_text", "user/a.md", "a")
    await call(mode, ws, "append", {"role": "user", "content": "hi"})
    before = rows(store, ws)
    stale = sha("stale")
    attempts: list[tuple[type[Exception], str, tuple[Any, ...], dict[str, Any]]] = [
        (ShaMismatchError, "write_text", ("user/a.md", "b"), {"expected_sha": stale}),
        (ShaMismatchError, "write_text", ("user/a.md", "b"), {"expected_sha": ""}),
        (ShaMismatchError, "delete", ("user/a.md",), {"expected_sha": stale}),
        (ReadOnlyPathError, "write_json", ("memory/p.json", {}), {}),
        (ReadOnlyPathError, "write_bytes", ("memory/p.bin", b""), {}),
        (EntryValidationError, "write_text", ("../up", "x"), {}),
        (EntryValidationError, "write_text", ("/abs", "x"), {}),
        (EntryValidationError, "write_text", ("a//b", "x"), {}),
        (EntryValidationError, "write_text", ("audit/log.jsonl", "x"), {}),
        (EntryValidationError, "write_text", ("Meta/x", "x"), {}),
        (EntryValidationError, "write_text", ("messages.json", "x"), {}),
        (EntryValidationError, "write_text", ("a\x00b", "x"), {}),
        (EntryValidationError, "write_text", ("a\x85b.md", "x"), {}),
        (EntryValidationError, "write_text", ("user/\u202egnp.md", "x"), {}),
        (ReadOnlyPathError, "write_text", ("MEMORY/p.md", "x"), {}),
        (ReadOnlyPathError, "write_text", ("./memory/./p.md", "x"), {}),
        (ReadOnlyPathError, "promote", ("user/a.md", "memory/a.md"), {"actor": "a", "reason": ""}),
        (ReadOnlyPathError, "promote", ("user/a.md", "Memory/a.md"), {"actor": "a", "reason": ""}),
        (EntryValidationError, "write_text", ("user/big", "x" * 65), {}),
        (EntryValidationError, "write_bytes", ("user/big", b"x" * 65), {}),
        (EntryValidationError, "write_json", ("user/nan.json", float("nan")), {}),
        (EntryValidationError, "write_json", ("user/set.json", {1, 2}), {}),
        (EntryValidationError, "write_json", ("user/keys.json", {1: "a", "b": 2}), {}),
        (EntryValidationError, "write_text", ("user/a.md", 42), {}),
        (EntryValidationError, "write_bytes", ("user/a.md", "text"), {}),
        (EntryValidationError, "write_text", ("user/a.md", "x"), {"actor": ""}),
        (EntryValidationError, "write_text", ("user/a.md", "x"), {"reason": None}),
        (EntryValidationError, "write_text", ("user/a.md", "x"), {"expected_sha": "abc"}),
        (EntryValidationError, "write_text", ("user/a.md", "\ud800"), {}),
        (EntryValidationError, "append", (object(),), {}),
        (EntryValidationError, "extend", ([{"ok": 1}, {1, 2}],), {}),
        (NotFoundError, "promote", ("user/none", "done/x"), {"actor": "r", "reason": ""}),
        (
            ShaMismatchError,
            "promote",
            ("user/a.md", "done/a.md"),
            {"actor": "r", "reason": "", "src_sha": stale},
        ),
        (
            EntryValidationError,
            "promote",
            ("user/a.md", "./user/a.md"),
            {"actor": "r", "reason": ""},
        ),
    ]
    for error, name, args, kwargs in attempts:
        with pytest.raises(error):
            await call(mode, ws, name, *args, **kwargs)
        assert rows(store, ws) == before, f"{name}{args} {kwargs} changed the rows"


async def test_a_failure_inside_the_unit_of_work_writes_no_part(
    store: Any, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = await call(mode, Artifacts(store=store), "create", "failing", keep_versions=True)
    await call(mode, ws, "write_text", "a.md", "one")
    before = rows(store, ws)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the version snapshot failed")

    # The file row and the audit row are saved before the version row is built.
    monkeypatch.setattr(Layout, "version_entry", broken)
    with pytest.raises(RuntimeError, match="snapshot failed"):
        await call(mode, ws, "write_text", "a.md", "two")
    with pytest.raises(RuntimeError, match="snapshot failed"):
        await call(mode, ws, "write_text", "b.md", "new")
    with pytest.raises(RuntimeError, match="snapshot failed"):
        await call(mode, ws, "promote", "a.md", "c.md", actor="r", reason="", move=True)
    assert rows(store, ws) == before
    assert await call(mode, ws, "read_text", "a.md") == "one"


async def test_promote_copy_move_and_conditions(store: Any, mode: str) -> None:
    artifacts = Artifacts(store=store)
    agent = await call(mode, artifacts, "create", "promo", read_only_prefixes=("memory/",))
    reviewer = artifacts.workspace("promo", keep_versions=True)
    one = await call(mode, agent, "write_json", "user/a.json", {"n": 1})
    copied = await call(
        mode, reviewer, "promote", "user/a.json", "memory/a.json", actor="r", reason="ok"
    )
    assert copied.kind == "json" and copied.version == 1
    assert await call(mode, agent, "read_json", "memory/a.json") == {"n": 1}
    assert await call(mode, agent, "exists", "user/a.json") is True
    # the destination's compare-and-set, and the source's
    two = await call(mode, agent, "write_json", "user/a.json", {"n": 2})
    with pytest.raises(ShaMismatchError) as dst_moved:
        await call(
            mode,
            reviewer,
            "promote",
            "user/a.json",
            "memory/a.json",
            actor="r",
            reason="",
            expected_sha="",
        )
    assert dst_moved.value.current_sha == one.sha256
    with pytest.raises(ShaMismatchError) as src_changed:
        await call(
            mode,
            reviewer,
            "promote",
            "user/a.json",
            "memory/a.json",
            actor="r",
            reason="",
            src_sha=one.sha256,
        )
    assert src_changed.value.current_sha == two.sha256
    moved = await call(
        mode,
        reviewer,
        "promote",
        "user/a.json",
        "memory/a.json",
        actor="r",
        reason="second",
        move=True,
        src_sha=two.sha256,
        expected_sha=one.sha256,
    )
    assert moved.version == 2 and moved.sha256 == two.sha256
    assert await call(mode, agent, "exists", "user/a.json") is False
    tail = await call(mode, reviewer, "audit_tail", 2)
    assert [r.op for r in tail] == ["update", "promote"]
    last = tail[-1]
    assert (last.op, last.path, last.source, last.moved, last.old_sha, last.new_sha) == (
        "promote",
        "memory/a.json",
        "user/a.json",
        True,
        one.sha256,
        two.sha256,
    )
    assert last.to_dict()["source"] == "user/a.json"
    # moving out of a read-only area is refused; copying out of it is allowed
    with pytest.raises(ReadOnlyPathError, match="cannot be moved"):
        await call(
            mode, agent, "promote", "memory/a.json", "user/b.json", actor="r", reason="", move=True
        )
    back = await call(mode, agent, "promote", "memory/a.json", "user/b.json", actor="r", reason="")
    assert back.sha256 == two.sha256
    with pytest.raises(EntryValidationError, match="src"):
        await call(mode, agent, "promote", "../x", "user/b.json", actor="r", reason="")
    with pytest.raises(TypeError):
        await call(mode, agent, "promote", "user/b.json", "memory/c.json")  # actor, reason required


@pytest.mark.parametrize("spelled", ["memory/", "./memory/", "memory/./", "./memory/./"])
async def test_an_agent_cannot_promote_into_its_read_only_area(
    store: Any, mode: str, spelled: str
) -> None:
    """The agent's handle (read-only prefixes, no reviewer right) cannot approve its own writes.

    However the prefix is spelled, a direct write and a promotion under it
    (in any letter case) are refused with nothing written; a reviewer's
    handle (no prefixes, or ``reviewer=True``) promotes.
    """
    artifacts = Artifacts(store=store)
    agent = await call(mode, artifacts, "create", "self-approve", read_only_prefixes=(spelled,))
    assert agent.read_only_prefixes == ("memory/",) and agent.reviewer is False
    staged = await call(mode, agent, "write_text", "user/p.md", "mine")
    before = rows(store, agent)
    for dst in ("memory/p.md", "memory/deep/p.md", "MEMORY/p.md"):
        with pytest.raises(ReadOnlyPathError, match="reviewer"):
            await call(mode, agent, "promote", "user/p.md", dst, actor="agent", reason="")
        with pytest.raises(ReadOnlyPathError):
            await call(mode, agent, "write_text", dst, "sneaky")
        with pytest.raises(ReadOnlyPathError):
            await call(mode, agent, "promote", "user/p.md", dst, actor="a", reason="", move=True)
    assert rows(store, agent) == before
    # outside the read-only area the agent's copy is an ordinary write
    copied = await call(mode, agent, "promote", "user/p.md", "user/q.md", actor="a", reason="")
    assert copied.sha256 == staged.sha256
    # a reviewer holding the same prefixes and the right, and one without the prefixes
    reviewer = artifacts.workspace("self-approve", read_only_prefixes=(spelled,), reviewer=True)
    assert reviewer.options()["reviewer"] is True
    with pytest.raises(ReadOnlyPathError):
        await call(mode, reviewer, "write_text", "memory/p.md", "direct")
    done = await call(
        mode, reviewer, "promote", "user/p.md", "memory/p.md", actor="rev", reason="ok"
    )
    assert (done.path, done.sha256, done.actor) == ("memory/p.md", staged.sha256, "rev")
    plain = artifacts.workspace("self-approve")
    await call(mode, plain, "promote", "user/q.md", "memory/q.md", actor="rev", reason="ok")
    assert await call(mode, agent, "list_paths", "memory/") == ["memory/p.md", "memory/q.md"]
    not_a_bool: Any = "yes"
    with pytest.raises(EntryValidationError, match="reviewer"):
        artifacts.workspace("self-approve", reviewer=not_a_bool)


async def test_history_and_read_version(store: Any, mode: str) -> None:
    artifacts = Artifacts(store=store)
    ws = await call(mode, artifacts, "create", "hist", keep_versions=True)
    for text in ("A", "B", "A"):
        await call(mode, ws, "write_text", "doc.md", text, reason=f"write {text}")
    await call(mode, ws, "write_text", "doc.md.bak", "other path")
    history = await call(mode, ws, "history", "doc.md")
    assert [(h.sha256, h.version, h.reason) for h in history] == [
        (sha("A"), 1, "write A"),
        (sha("B"), 2, "write B"),
        (sha("A"), 3, "write A"),
    ]
    assert all(h.path == "doc.md" for h in history)
    assert [h.updated_at for h in history] == sorted(h.updated_at for h in history)
    version_b = await call(mode, ws, "read_version", "doc.md", sha("B"))
    assert version_b.data == b"B" and version_b.info.version == 2
    assert await call(mode, ws, "read_version", "doc.md", sha("C")) is None
    with pytest.raises(EntryValidationError, match="sha"):
        await call(mode, ws, "read_version", "doc.md", "")
    # a deleted file keeps its versions
    await call(mode, ws, "delete", "doc.md")
    assert len(await call(mode, ws, "history", "doc.md")) == 3
    # without keep_versions nothing is kept, but the current content is still found by sha
    plain = artifacts.workspace("hist")
    await call(mode, plain, "write_text", "plain.md", "P")
    assert await call(mode, plain, "history", "plain.md") == []
    assert (await call(mode, plain, "read_version", "plain.md", sha("P"))).data == b"P"
    quiet = artifacts.workspace("hist", audit=False)
    before = len(await call(mode, ws, "audit_log"))
    await call(mode, quiet, "write_text", "quiet.md", "Q")
    assert len(await call(mode, ws, "audit_log")) == before


# --------------------------------------------------------------------------- transcript


async def test_transcript_is_persisted_per_message(layer_backend: OpenedBackend, mode: str) -> None:
    store = layer_backend.store
    ws = await call(mode, Artifacts(store=store), "create", "talk")
    await call(mode, ws, "append", {"role": "user", "content": "hi"})
    again = Artifacts(store=layer_backend.reopen()).workspace("talk")
    assert await call(mode, again, "messages") == [{"role": "user", "content": "hi"}]
    count = await call(
        mode, ws, "extend", [{"role": "assistant", "content": "hello"}, "plain", [1, 2]]
    )
    assert count == 3
    assert await call(mode, again, "messages") == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        "plain",
        [1, 2],
    ]
    assert await call(mode, again, "messages", last=2) == ["plain", [1, 2]]
    assert await call(mode, again, "messages", last=0) == []
    stamped = await call(mode, again, "transcript")
    assert all(isinstance(m, TranscriptMessage) for m in stamped)
    assert [m.at for m in stamped] == sorted(m.at for m in stamped)
    with pytest.raises(EntryValidationError, match=r"messages\[1\]"):
        await call(mode, ws, "extend", ["ok", {1, 2}])
    assert len(await call(mode, ws, "messages")) == 4
    assert await call(mode, ws, "extend", []) == 0


async def test_pydantic_ai_messages_round_trip(store: Any, mode: str) -> None:
    messages = pytest.importorskip("pydantic_ai.messages")
    when = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    request = messages.ModelRequest(parts=[messages.UserPromptPart("What is 2+2?", timestamp=when)])
    response = messages.ModelResponse(
        parts=[
            messages.ToolCallPart("calc", {"expr": "2+2"}, tool_call_id="c1"),
            messages.TextPart("4"),
        ],
        model_name="test",
        timestamp=when,
    )
    ws = await call(mode, Artifacts(store=store), "create", "pai")
    await call(mode, ws, "append", request)
    await call(mode, ws, "extend", [response, {"role": "note", "content": "a dict in between"}])
    back = await call(mode, ws, "messages")
    assert back[0] == request and isinstance(back[0], messages.ModelRequest)
    assert back[1] == response and isinstance(back[1], messages.ModelResponse)
    assert back[2] == {"role": "note", "content": "a dict in between"}
    as_json = [m.to_json() for m in await call(mode, ws, "transcript")][:2]
    assert transcript_from_json(as_json) == [request, response]
    assert transcript_from_json([{"role": "user"}]) == [{"role": "user"}]


# --------------------------------------------------------------------------- workspaces


async def test_keyed_workspaces(layer_backend: OpenedBackend, mode: str) -> None:
    store = layer_backend.store
    artifacts = Artifacts(store=store)
    assert await call(mode, artifacts, "exists", "k1") is False
    with pytest.raises(NotFoundError, match="does not exist"):
        await call(mode, artifacts, "open", "k1")
    ws = await call(mode, artifacts, "create", "k1")
    assert await call(mode, artifacts, "exists", "k1") is True
    with pytest.raises(WorkspaceExistsError, match="already exists"):
        await call(mode, artifacts, "create", "k1")
    await call(mode, ws, "write_text", "a.md", "kept")
    same = await call(mode, artifacts, "get_or_create", "k1")
    assert await call(mode, same, "read_text", "a.md") == "kept"
    await call(mode, artifacts, "create", "k2")
    await call(mode, artifacts, "create", "j0")
    infos = await call(mode, artifacts, "list_workspaces")
    assert [i.key for i in infos] == ["j0", "k1", "k2"]
    assert [i.key for i in await call(mode, artifacts, "list_workspaces", prefix="k")] == [
        "k1",
        "k2",
    ]
    assert [i.key for i in await call(mode, artifacts, "list_workspaces", limit=1)] == ["j0"]
    info = await call(mode, artifacts, "info", "k1")
    assert (info.key, info.user_id) == ("k1", None) and info.created_at.tzinfo is not None
    # delete_workspace removes every row of the family, atomically
    ws3 = await call(mode, artifacts, "create", "k3", keep_versions=True)
    await call(mode, ws3, "write_text", "x.md", "x")
    await call(mode, ws3, "append", "hello")
    assert all(rows(store, ws3).values())
    assert await call(mode, artifacts, "delete_workspace", "k3") is True
    assert not any(rows(store, ws3).values())
    assert await call(mode, artifacts, "delete_workspace", "k3") is False
    assert await call(mode, artifacts, "exists", "k3") is False
    with pytest.raises(NotFoundError):
        await call(mode, ws3, "write_text", "y.md", "y")
    with pytest.raises(NotFoundError):
        await call(mode, ws3, "append", "again")
    assert not any(rows(store, ws3).values())
    # re-created, it starts empty; the other workspaces are untouched
    fresh = await call(mode, artifacts, "create", "k3")
    assert await call(mode, fresh, "list_paths") == []
    assert await call(mode, ws, "read_text", "a.md") == "kept"
    # a handle of a workspace never created cannot write
    ghost = artifacts.workspace("never")
    with pytest.raises(NotFoundError, match=r"Artifacts\.create"):
        await call(mode, ghost, "write_text", "a", "b")


async def test_per_user_workspaces_are_erased_with_the_user(store: Any, mode: str) -> None:
    ann = Artifacts(store=store, user_id="ann")
    bob = Artifacts(store=store, user_id="bob")
    shared = Artifacts(store=store)
    ann_ws = await call(mode, ann, "create", "notes", keep_versions=True)
    bob_ws = await call(mode, bob, "create", "notes")
    shared_ws = await call(mode, shared, "create", "notes")
    assert len({ann_ws.layout.files, bob_ws.layout.files, shared_ws.layout.files}) == 3
    await call(mode, ann_ws, "write_text", "a.md", "ann's")
    await call(mode, ann_ws, "append", "ann says hi")
    await call(mode, bob_ws, "write_text", "a.md", "bob's")
    assert await call(mode, ann_ws, "read_text", "a.md") == "ann's"
    assert await call(mode, bob_ws, "read_text", "a.md") == "bob's"
    assert await call(mode, shared_ws, "exists", "a.md") is False
    assert [i.key for i in await call(mode, ann, "list_workspaces")] == ["notes"]
    assert [i.user_id for i in await call(mode, shared, "list_workspaces")] == [None]
    for namespace in ann_ws.layout.family:
        assert all(e.user_id == "ann" for e in store.load(namespace))
    await call(mode, ConversationMemory(store=store), "erase_user", "ann")
    assert await call(mode, ann, "exists", "notes") is False
    assert not any(rows(store, ann_ws).values())
    assert await call(mode, bob_ws, "read_text", "a.md") == "bob's"
    assert await call(mode, shared, "exists", "notes") is True


async def test_snapshot_export_and_import(store: Any, mode: str) -> None:
    artifacts = Artifacts(store=store, user_id="ann")
    ws = await call(mode, artifacts, "create", "src", keep_versions=True)
    await call(mode, ws, "write_text", "a.md", "one", actor="x", reason="first")
    await call(mode, ws, "write_text", "a.md", "two")
    await call(mode, ws, "write_bytes", "b.bin", b"\xff\x00")
    await call(mode, ws, "write_json", "c.json", {"k": [1]})
    await call(mode, ws, "delete", "c.json")
    await call(mode, ws, "extend", ["m1", {"role": "user", "content": "m2"}])
    snapshot = await call(mode, ws, "export_snapshot")
    assert isinstance(snapshot, WorkspaceSnapshot)
    assert [f.path for f in snapshot.files] == ["a.md", "b.bin"]
    assert [r.op for r in snapshot.audit] == ["create", "update", "create", "create", "delete"]
    assert len(snapshot.versions) == 4 and len(snapshot.messages) == 2
    copy = await call(mode, artifacts, "import_snapshot", snapshot, key="dst", keep_versions=True)
    again = await call(mode, copy, "export_snapshot")
    assert again.files == snapshot.files
    assert [r.to_dict() for r in again.audit] == [r.to_dict() for r in snapshot.audit]
    assert again.versions == snapshot.versions
    assert again.messages == snapshot.messages
    assert (again.key, again.user_id, again.created_at) == ("dst", "ann", snapshot.created_at)
    assert (await call(mode, copy, "stat", "a.md")).version == 2
    # an import over an existing workspace needs replace=True
    with pytest.raises(WorkspaceExistsError):
        await call(mode, artifacts, "import_snapshot", snapshot, key="dst")
    # a bad part is named, and nothing is written
    bad_file = ArtifactFile(
        FileInfo("x.md", sha("not this"), 4, "text", snapshot.created_at, 1, "a", ""), b"this"
    )
    bad = WorkspaceSnapshot(key="bad", files=[bad_file])
    with pytest.raises(EntryValidationError, match=r"files\[0\]\.sha256"):
        await call(mode, artifacts, "import_snapshot", bad)
    assert await call(mode, artifacts, "exists", "bad") is False
    built = ArtifactFile.build("./y.md", "why", actor="importer", updated_at=snapshot.created_at)
    assert (built.path, built.info.kind, built.info.sha256) == ("y.md", "text", sha("why"))
    replaced = WorkspaceSnapshot(
        key="dst",
        files=[built],
        audit=[AuditRecord(snapshot.created_at, "create", "y.md", "", sha("why"), "i", "")],
    )
    dst = await call(mode, artifacts, "import_snapshot", replaced, replace=True)
    assert await call(mode, dst, "list_paths") == ["y.md"]
    assert [r.actor for r in await call(mode, dst, "audit_log")] == ["i"]
    assert await call(mode, dst, "messages") == []


async def test_bad_arguments_are_named(store: Any, mode: str) -> None:
    artifacts = Artifacts(store=store)
    ws = await call(mode, artifacts, "create", "args")
    cases: list[tuple[dict[str, Any], str]] = [
        ({"read_only_prefixes": "memory/"}, "read_only_prefixes"),
        ({"read_only_prefixes": [""]}, "read_only_prefixes"),
        ({"keep_versions": "yes"}, "keep_versions"),
        ({"max_bytes": 0}, "max_bytes"),
        ({"max_bytes": 10**9}, "max_bytes"),
        ({"colour": "red"}, "colour"),
    ]
    for kwargs, field in cases:
        with pytest.raises(EntryValidationError, match=field):
            artifacts.workspace("args", **kwargs)
    for key in ("", "a\x00b", "x" * 201, None):
        with pytest.raises(EntryValidationError, match="key"):
            await call(mode, artifacts, "exists", key)
    with pytest.raises(EntryValidationError, match="user_id"):
        Artifacts(store=store, user_id="")
    with pytest.raises(EntryValidationError, match="prefix"):
        await call(mode, ws, "list_paths", "/abs")
    with pytest.raises(EntryValidationError, match="n"):
        await call(mode, ws, "audit_tail", -1)
    with pytest.raises(EntryValidationError, match="limit"):
        await call(mode, ws, "files", limit=-1)


def test_a_path_created_and_deleted_meanwhile_fails_a_stale_write(staged_store: Any) -> None:
    """ABA on a path: a write that read "no file" must not commit after a create and a delete.

    Its audit row is timed at its read, before theirs; had it committed, the
    path's audit chain would be out of order (a create after a create).  The
    head's version, moved on by every creation and deletion, catches it.
    Shown on the stores that apply the writes at commit; SQL stores lock the
    file row or run one writer at a time, so the interleaving cannot be staged
    in one thread there (the kill -9 test covers them across processes).
    """
    store = staged_store
    ws = Artifacts(store=store).create("aba", keep_versions=True)
    uow = store.unit_of_work()
    policy = ops.WritePolicy(keep_versions=True)
    with uow:
        ops.write_file(uow, ws.layout, "f.md", Body.of_text("late"), "late", "", None, policy)
        ws.write_text("f.md", "early", actor="early")
        ws.delete("f.md", actor="early")
        before = rows(store, ws)
        with pytest.raises(ConcurrencyError):
            uow.commit()
    assert rows(store, ws) == before
    assert [(r.op, r.actor) for r in ws.audit_log()] == [("create", "early"), ("delete", "early")]
    # Retried, the write reads again and lands after them, in order.
    ws.write_text("f.md", "late", actor="late")
    log = ws.audit_log()
    assert [r.op for r in log] == ["create", "delete", "create"]
    assert all(a.new_sha == b.old_sha for a, b in itertools.pairwise(log))


def _stale_delete(uow: Any, layout: Layout) -> None:
    assert ops.delete_file(uow, layout, "f.md", "late", "", None, ops.WritePolicy())


def _stale_update(uow: Any, layout: Layout) -> None:
    ops.write_file(uow, layout, "f.md", Body.of_text("late"), "late", "", None, ops.WritePolicy())


@pytest.mark.parametrize("stale", [_stale_delete, _stale_update], ids=["delete", "update"])
def test_a_stale_change_of_a_recreated_path_fails(staged_store: Any, stale: Any) -> None:
    """A delete or an update read at version 1 must not commit after the path was deleted
    and created again (at version 1 too): the update would overwrite the new file unseen."""
    store = staged_store
    ws = Artifacts(store=store).create("aba-change")
    ws.write_text("f.md", "one")
    uow = store.unit_of_work()
    with uow:
        stale(uow, ws.layout)
        ws.delete("f.md", actor="early")
        ws.write_text("f.md", "two", actor="early")
        with pytest.raises(ConcurrencyError):
            uow.commit()
    assert ws.read_text("f.md") == "two"
    log = ws.audit_log()
    assert all(a.new_sha == b.old_sha for a, b in itertools.pairwise(log))


def test_threads_incrementing_a_counter_lose_nothing(store: Any) -> None:
    """Writers in threads of one process (every store): CAS retries count every increment."""
    ws = Artifacts(store=store).create("counter", keep_versions=True)
    ws.write_json("n.json", 0, expected_sha="")
    threads, increments = 4, 6
    errors: list[BaseException] = []
    conflicts = [0] * threads

    def worker(index: int) -> None:
        try:
            done = 0
            while done < increments:
                found = ws.read("n.json")
                assert found is not None
                try:
                    ws.write_json("n.json", found.json() + 1, expected_sha=found.info.sha256)
                except ShaMismatchError:
                    conflicts[index] += 1
                    continue
                done += 1
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    assert not errors, errors
    assert ws.read_json("n.json") == threads * increments
    log = ws.audit_log()
    assert len(log) == 1 + threads * increments
    assert all(a.new_sha == b.old_sha for a, b in itertools.pairwise(log))
    assert len(ws.history("n.json")) == 1 + threads * increments
