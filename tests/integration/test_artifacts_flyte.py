"""Artifact workspaces to and from Flyte's directory layout, on every layer backend, sync and async.

An export is a directory Flyte's ``MemoryStore`` reads as it is
(``messages.json``, the files, ``meta/<quote(path)>.json``, ``audit/log.jsonl``,
``versions/<quote(path)>/<ts>_<sha>.txt``); exporting, importing into a fresh
store of the same kind and exporting again gives the same directory byte for
byte and the same snapshot.  A directory laid out as Flyte writes it imports;
hostile directories are refused with an error naming the entry, and nothing
is written; the export never leaves a half-written or clobbered target.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from modes import call
from store_backends import OpenedBackend, Place

from firefly_orm.artifacts import (
    MAX_FILE_BYTES,
    Artifacts,
    ArtifactWorkspace,
    WorkspaceExistsError,
    WorkspaceSnapshot,
)
from firefly_orm.artifacts._flyte import (
    AUDIT_LOG_PATH,
    SIDECAR_PATH,
    DirectoryLayoutError,
    async_export_directory,
    async_import_directory,
    export_directory,
    import_directory,
    read_directory,
    write_directory,
)
from firefly_orm.artifacts._flyte import _export as flyte_module
from firefly_orm.errors import EntryValidationError, NotFoundError
from firefly_orm.sql import SQLiteStore

pydantic_ai_messages = pytest.importorskip("pydantic_ai.messages")

#: The keys of Flyte's per-file metadata, in the order Flyte writes them.
FLYTE_META_KEYS = ["path", "sha256", "updated_at", "updated_by", "reason", "bytes"]
#: The keys of one of Flyte's audit lines.
FLYTE_AUDIT_KEYS = {"ts", "op", "path", "old_sha", "new_sha", "actor", "reason", "version_file"}


async def export(mode: str, ws: ArtifactWorkspace, path: Path, **kw: Any) -> WorkspaceSnapshot:
    if mode == "sync":
        return export_directory(ws, path, **kw)
    return await async_export_directory(ws, path, **kw)


async def import_(mode: str, artifacts: Artifacts, path: Path, **kw: Any) -> ArtifactWorkspace:
    if mode == "sync":
        return import_directory(artifacts, path, **kw)
    return await async_import_directory(artifacts, path, **kw)


def sha(data: str | bytes) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def tree(root: Path) -> dict[str, bytes | None]:
    """Every entry under ``root``: files with their bytes, folders as ``None``."""
    found: dict[str, bytes | None] = {}
    for entry in sorted(root.rglob("*")):
        rel = entry.relative_to(root).as_posix()
        found[rel] = entry.read_bytes() if entry.is_file() else None
    return found


def same_snapshot(a: WorkspaceSnapshot, b: WorkspaceSnapshot) -> None:
    assert (a.key, a.user_id, a.created_at) == (b.key, b.user_id, b.created_at)
    assert a.files == b.files
    assert [r.to_dict() for r in a.audit] == [r.to_dict() for r in b.audit]
    assert a.versions == b.versions
    assert a.messages == b.messages


@pytest.fixture
def fresh(layer_backend: OpenedBackend, tmp_path: Path) -> Iterator[OpenedBackend]:
    """A second, empty store of the same backend (its own files, schema or database)."""
    place: Place = replace(
        layer_backend.place, tmp_path=tmp_path / "fresh", name="t_" + uuid.uuid4().hex[:10]
    )
    place.tmp_path.mkdir()
    opened = OpenedBackend(layer_backend.backend, place)
    try:
        yield opened
    finally:
        opened.close()


async def rich_workspace(mode: str, artifacts: Artifacts, key: str) -> ArtifactWorkspace:
    """A workspace with every kind of file, change and message."""
    ws: ArtifactWorkspace = await call(
        mode, artifacts, "create", key, read_only_prefixes=("memory/",), keep_versions=True
    )
    reviewer = await call(mode, artifacts, "open", key, keep_versions=True)
    first = await call(mode, ws, "write_text", "user/profile.md", "likes tea", reason="learned")
    await call(
        mode, ws, "write_text", "user/profile.md", "likes green tea", expected_sha=first.sha256
    )
    await call(mode, ws, "write_json", "user/plan.json", {"steps": ["a", "b"], "done": 0.5})
    await call(mode, ws, "write_bytes", "blobs/raw.bin", bytes(range(256)), actor="tool")
    await call(mode, ws, "write_text", "notes/Ünïcode name ✓.txt", "naïve café\n")
    await call(mode, ws, "write_text", "scratch.md", "gone soon")
    await call(mode, ws, "delete", "scratch.md", actor="cleaner", reason="tidy")
    await call(
        mode,
        reviewer,
        "promote",
        "user/profile.md",
        "memory/profile.md",
        actor="reviewer",
        reason="approved",
    )
    await call(
        mode,
        reviewer,
        "promote",
        "user/plan.json",
        "memory/plan.json",
        actor="rev",
        reason="",
        move=True,
    )
    # the same content written again: a second version with the same sha
    await call(mode, ws, "write_text", "user/profile.md", "likes tea")
    request = pydantic_ai_messages.ModelRequest(
        parts=[pydantic_ai_messages.UserPromptPart("Remember that I like tea")]
    )
    response = pydantic_ai_messages.ModelResponse(
        parts=[pydantic_ai_messages.TextPart("Noted.")], model_name="test"
    )
    await call(mode, ws, "extend", [request, response])
    await call(mode, ws, "append", {"role": "user", "content": "plain dict message"})
    # a JSON message shaped like a pydantic-ai one stays a dict
    await call(mode, ws, "append", {"kind": "request", "parts": []})
    await call(mode, ws, "append", "just text")
    return ws


# --------------------------------------------------------------------------- round trips


async def test_round_trip_is_byte_identical(
    layer_backend: OpenedBackend, fresh: OpenedBackend, mode: str, tmp_path: Path
) -> None:
    source = Artifacts(store=layer_backend.store, user_id="ann")
    ws = await rich_workspace(mode, source, "session-42")
    original = await call(mode, ws, "export_snapshot")
    first = tmp_path / "first"
    written = await export(mode, ws, first)
    same_snapshot(written, original)

    target = Artifacts(store=fresh.store, user_id="ann")
    copy = await import_(mode, target, first)
    assert copy.key == "session-42"
    imported = await call(mode, copy, "export_snapshot")
    same_snapshot(imported, original)
    second = tmp_path / "second"
    await export(mode, copy, second)
    assert tree(second) == tree(first)

    # what the workspace API sees after the trip
    assert await call(mode, copy, "list_paths") == [
        "blobs/raw.bin",
        "memory/plan.json",
        "memory/profile.md",
        "notes/Ünïcode name ✓.txt",
        "user/profile.md",
    ]
    assert await call(mode, copy, "read_json", "memory/plan.json") == {
        "steps": ["a", "b"],
        "done": 0.5,
    }
    assert await call(mode, copy, "read_bytes", "blobs/raw.bin") == bytes(range(256))
    stat = await call(mode, copy, "stat", "user/profile.md")
    assert (stat.kind, stat.version, stat.actor) == ("text", 3, "agent")
    assert [h.sha256 for h in await call(mode, copy, "history", "user/profile.md")] == [
        sha("likes tea"),
        sha("likes green tea"),
        sha("likes tea"),
    ]
    messages = await call(mode, copy, "messages")
    assert isinstance(messages[0], pydantic_ai_messages.ModelRequest)
    assert isinstance(messages[1], pydantic_ai_messages.ModelResponse)
    assert messages[2:] == [
        {"role": "user", "content": "plain dict message"},
        {"kind": "request", "parts": []},
        "just text",
    ]
    tail = await call(mode, copy, "audit_tail", 3)
    assert [(r.op, r.path, r.source, r.moved) for r in tail] == [
        ("promote", "memory/profile.md", "user/profile.md", False),
        ("promote", "memory/plan.json", "user/plan.json", True),
        ("update", "user/profile.md", None, False),
    ]

    # into the same store under another key, and over an existing one only with replace
    again = await import_(mode, source, second, key="copy-of-42")
    same_snapshot(await call(mode, again, "export_snapshot"), replace(original, key="copy-of-42"))
    with pytest.raises(WorkspaceExistsError, match="copy-of-42"):
        await import_(mode, source, second, key="copy-of-42")
    await import_(mode, source, second, key="copy-of-42", replace=True)


async def test_export_is_flytes_layout(store_and_mode: tuple[Any, str], tmp_path: Path) -> None:
    store, mode = store_and_mode
    ws = await rich_workspace(mode, Artifacts(store=store), "layout")
    snapshot = await export(mode, ws, tmp_path / "out")
    found = tree(tmp_path / "out")
    files = {rel for rel, data in found.items() if data is not None}

    # the files at their paths, with their bytes
    for file in snapshot.files:
        assert found[file.path] == file.data
    # one metadata file per file: Flyte's keys, in Flyte's order, true to the bytes
    metas = sorted(rel for rel in files if rel.startswith("meta/") and rel != SIDECAR_PATH)
    assert metas == sorted(f"meta/{quote(f.path, safe='')}.json" for f in snapshot.files)
    for file in snapshot.files:
        raw = found[f"meta/{quote(file.path, safe='')}.json"]
        assert raw is not None
        meta = json.loads(raw)
        assert list(meta) == FLYTE_META_KEYS
        assert meta["path"] == file.path and meta["bytes"] == len(file.data)
        assert meta["sha256"] == sha(file.data) and meta["updated_by"] == file.info.actor
        assert datetime.fromisoformat(meta["updated_at"]) == file.info.updated_at
    # the audit log: one JSON object per line, Flyte's keys (plus a promotion's source)
    raw_log = found[AUDIT_LOG_PATH]
    assert raw_log is not None and raw_log.endswith(b"\n")
    lines = [json.loads(line) for line in raw_log.decode().splitlines()]
    assert [line["op"] for line in lines] == [r.op for r in snapshot.audit]
    for line in lines:
        extra = {"source", "moved"} if line["op"] == "promote" else set()
        assert set(line) == FLYTE_AUDIT_KEYS | extra
        if line["version_file"]:
            # each write names its version file, which holds what was written
            assert found[line["version_file"]] is not None
            assert sha(found[line["version_file"]] or b"") == line["new_sha"]
        else:
            assert line["op"] == "delete"
    # versions/<quote(path)>/<ts with '-' for ':'>_<sha>.txt
    version_files = sorted(rel for rel in files if rel.startswith("versions/"))
    assert len(version_files) == len(snapshot.versions)
    for kept in snapshot.versions:
        stamp = kept.info.updated_at.isoformat().replace(":", "-")
        rel = f"versions/{quote(kept.path, safe='')}/{stamp}_{kept.info.sha256}.txt"
        assert found[rel] == kept.data
    # the transcript: a JSON list
    transcript = json.loads(found["messages.json"] or b"")
    assert isinstance(transcript, list) and len(transcript) == len(snapshot.messages)
    assert transcript[2] == {"role": "user", "content": "plain dict message"}
    # everything else lives in one extra file under meta/, a name Flyte never reads
    rest = files - set(metas) - set(version_files) - {f.path for f in snapshot.files}
    assert rest == {"messages.json", AUDIT_LOG_PATH, SIDECAR_PATH}
    assert "@" not in quote("a@b/c", safe="")
    # Flyte's own way of listing files (skip its bookkeeping) sees exactly ours
    listed = sorted(
        rel
        for rel in files
        if rel.split("/")[0] not in ("audit", "meta", "versions") and rel != "messages.json"
    )
    assert listed == [f.path for f in snapshot.files]
    # the exported files carry their update time as their modification time
    stat = os.stat(tmp_path / "out" / "user" / "profile.md")
    updated = next(f.info.updated_at for f in snapshot.files if f.path == "user/profile.md")
    assert stat.st_mtime_ns // 1000 == (updated - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(
        microseconds=1
    )


@pytest.fixture(params=["sync", "async"])
def store_and_mode(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Any, str]]:
    """A SQLite store (for tests about the directory rather than the database)."""
    store = SQLiteStore(tmp_path / "db" / "layout.sqlite3")
    try:
        yield store, str(request.param)
    finally:
        store.close()


# --------------------------------------------------------------------------- written by Flyte


def flyte_time(at: datetime) -> str:
    """A time as Flyte writes it (UTC, whole seconds)."""
    return at.astimezone(UTC).isoformat(timespec="seconds")


def write_flyte_store(root: Path, *, messages: list[Any]) -> dict[str, Any]:
    """A directory laid out as Flyte's MemoryStore leaves it: three writes, versions on.

    ``user/notes.md`` written twice by ``agent``, ``memory/profile.json`` once
    by ``sleep-cycle``, ``legacy.txt`` dropped in without metadata, and a
    binary file with its metadata.
    """
    t0 = datetime(2025, 3, 1, 9, 30, 0, tzinfo=UTC)
    writes = [
        ("user/notes.md", "first draft", "agent", "draft", t0),
        ("user/notes.md", "second draft", "agent", "", t0 + timedelta(seconds=5)),
        (
            "memory/profile.json",
            json.dumps({"tea": True}, indent=2),
            "sleep-cycle",
            "nightly",
            t0 + timedelta(seconds=9),
        ),
    ]
    old: dict[str, str] = {}
    lines: list[str] = []
    for path, text, actor, reason, at in writes:
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        new = sha(text)
        version_dir = root / "versions" / quote(path, safe="")
        version_dir.mkdir(parents=True, exist_ok=True)
        version = version_dir / f"{flyte_time(at).replace(':', '-')}_{new}.txt"
        version.write_text(text, encoding="utf-8")
        meta = {
            "path": path,
            "sha256": new,
            "updated_at": flyte_time(at),
            "updated_by": actor,
            "reason": reason,
            "bytes": len(text.encode()),
        }
        (root / "meta").mkdir(exist_ok=True)
        (root / "meta" / f"{quote(path, safe='')}.json").write_text(json.dumps(meta, indent=2))
        event = {
            "ts": flyte_time(at),
            "op": "update" if path in old else "create",
            "path": path,
            "old_sha": old.get(path, ""),
            "new_sha": new,
            "actor": actor,
            "reason": reason,
            "version_file": version.relative_to(root).as_posix(),
        }
        lines.append(json.dumps(event, sort_keys=True))
        old[path] = new
    (root / "audit").mkdir()
    (root / "audit" / "log.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "legacy.txt").write_text("no sidecar", encoding="utf-8")
    legacy_time = datetime(2024, 12, 24, 18, 0, 0, 250_000, tzinfo=UTC)
    os.utime(root / "legacy.txt", (legacy_time.timestamp(), legacy_time.timestamp()))
    binary = b"\x89PNG\r\n\x1a\n\x00\xff"
    (root / "img").mkdir()
    (root / "img" / "dot.png").write_bytes(binary)
    (root / "meta" / "img%2Fdot.png.json").write_text(
        json.dumps(
            {
                "path": "img/dot.png",
                "sha256": sha(binary),
                "updated_at": flyte_time(t0),
                "updated_by": "camera",
                "reason": "",
                "bytes": len(binary),
            },
            indent=2,
        )
    )
    (root / "messages.json").write_text(json.dumps(messages, default=str, indent=2))
    return {"t0": t0, "legacy_time": legacy_time, "binary": binary}


async def test_directory_written_by_flyte_imports(
    layer_backend: OpenedBackend, mode: str, tmp_path: Path
) -> None:
    root = tmp_path / "agents" / "memory-store" / "v0" / "org" / "proj" / "dev" / "support-7"
    messages = [
        {"role": "user", "content": "I like tea"},
        {"role": "assistant", "content": "Noted."},
    ]
    facts = write_flyte_store(root, messages=messages)
    t0 = facts["t0"]
    artifacts = Artifacts(store=layer_backend.store)
    ws = await import_(mode, artifacts, root, keep_versions=True)
    assert ws.key == "support-7"  # Flyte keeps a keyed store under a path ending in its key
    assert await call(mode, ws, "list_paths") == [
        "img/dot.png",
        "legacy.txt",
        "memory/profile.json",
        "user/notes.md",
    ]
    notes = await call(mode, ws, "stat", "user/notes.md")
    assert (notes.sha256, notes.actor, notes.reason, notes.kind) == (
        sha("second draft"),
        "agent",
        "",
        "text",
    )
    assert notes.updated_at == t0 + timedelta(seconds=5)
    assert notes.version == 2  # two audited writes made it
    profile = await call(mode, ws, "stat", "memory/profile.json")
    assert (profile.actor, profile.reason, profile.version) == ("sleep-cycle", "nightly", 1)
    assert await call(mode, ws, "read_json", "memory/profile.json") == {"tea": True}
    png = await call(mode, ws, "stat", "img/dot.png")
    assert (png.kind, png.actor) == ("bytes", "camera")
    assert await call(mode, ws, "read_bytes", "img/dot.png") == facts["binary"]
    legacy = await call(mode, ws, "stat", "legacy.txt")  # no metadata: its mtime, "agent"
    assert (legacy.actor, legacy.updated_at, legacy.version) == ("agent", facts["legacy_time"], 1)
    history = await call(mode, ws, "history", "user/notes.md")
    assert [(h.sha256, h.reason, h.version) for h in history] == [
        (sha("first draft"), "draft", 1),
        (sha("second draft"), "", 2),
    ]
    assert history[0].updated_at == t0
    log = await call(mode, ws, "audit_log")
    assert [(r.op, r.path, r.actor, r.at) for r in log] == [
        ("create", "user/notes.md", "agent", t0),
        ("update", "user/notes.md", "agent", t0 + timedelta(seconds=5)),
        ("create", "memory/profile.json", "sleep-cycle", t0 + timedelta(seconds=9)),
    ]
    assert await call(mode, ws, "messages") == messages
    transcript = await call(mode, ws, "transcript")
    assert transcript[0].at < transcript[1].at  # dated by the import, in order

    # exported again, the files Flyte wrote come back as they were
    out = tmp_path / "out"
    await export(mode, ws, out)
    for rel in ("user/notes.md", "memory/profile.json", "img/dot.png", "legacy.txt"):
        assert (out / rel).read_bytes() == (root / rel).read_bytes()
    for rel in ("meta/user%2Fnotes.md.json", "meta/memory%2Fprofile.json.json"):
        theirs, ours = json.loads((root / rel).read_text()), json.loads((out / rel).read_text())
        assert list(ours) == list(theirs)
        assert {**ours, "updated_at": None} == {**theirs, "updated_at": None}
        assert datetime.fromisoformat(ours["updated_at"]) == datetime.fromisoformat(
            theirs["updated_at"]
        )
    ours_log = [json.loads(x) for x in (out / AUDIT_LOG_PATH).read_text().splitlines()]
    theirs_log = [json.loads(x) for x in (root / AUDIT_LOG_PATH).read_text().splitlines()]
    assert [{**x, "ts": None} for x in ours_log] == [{**x, "ts": None} for x in theirs_log]
    assert sorted(p.name for p in (out / "versions").rglob("*.txt")) == sorted(
        p.name for p in (root / "versions").rglob("*.txt")
    )


async def test_flyte_pydantic_ai_transcript_and_key_option(
    store_and_mode: tuple[Any, str], tmp_path: Path
) -> None:
    store, mode = store_and_mode
    request = pydantic_ai_messages.ModelRequest(
        parts=[pydantic_ai_messages.UserPromptPart("hello")]
    )
    dumped = pydantic_ai_messages.ModelMessagesTypeAdapter.dump_python([request], mode="json")
    root = tmp_path / "store"
    root.mkdir()
    (root / "messages.json").write_text(json.dumps(dumped, indent=2))
    ws = await import_(mode, Artifacts(store=store), root, key="chosen")
    assert ws.key == "chosen"
    assert await call(mode, ws, "messages") == [request]
    assert await call(mode, ws, "list_paths") == []


def flyte_writes_into(root: Path, path: str, text: str, actor: str, at: datetime) -> None:
    """What Flyte's ``write_text`` (versions on) does to a directory: file, meta, version, audit."""
    meta_file = root / "meta" / f"{quote(path, safe='')}.json"
    old = json.loads(meta_file.read_text())["sha256"] if meta_file.exists() else ""
    new = sha(text)
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_text(text, encoding="utf-8")
    version = (
        root / "versions" / quote(path, safe="") / (f"{flyte_time(at).replace(':', '-')}_{new}.txt")
    )
    version.parent.mkdir(parents=True, exist_ok=True)
    version.write_text(text, encoding="utf-8")
    meta = dict(
        zip(FLYTE_META_KEYS, [path, new, flyte_time(at), actor, "edit", len(text)], strict=True)
    )
    meta_file.write_text(json.dumps(meta, indent=2))
    event = {
        "ts": flyte_time(at),
        "op": "update" if old else "create",
        "path": path,
        "old_sha": old,
        "new_sha": new,
        "actor": actor,
        "reason": "edit",
        "version_file": version.relative_to(root).as_posix(),
    }
    with open(root / AUDIT_LOG_PATH, "a", encoding="utf-8") as log:
        log.write(json.dumps(event, sort_keys=True) + "\n")


async def test_changes_flyte_made_after_an_export_import(
    store_and_mode: tuple[Any, str], tmp_path: Path
) -> None:
    """Export, let Flyte work in the directory (write, add, append), import back: all of it."""
    store, mode = store_and_mode
    artifacts = Artifacts(store=store)
    ws = await call(mode, artifacts, "create", "shared", keep_versions=True)
    await call(mode, ws, "write_json", "plan.json", {"step": 1})
    await call(mode, ws, "write_text", "notes.md", "ours")
    await call(mode, ws, "append", {"role": "user", "content": "before"})
    root = tmp_path / "shared"
    snapshot = await export(mode, ws, root)
    later = snapshot.files[0].info.updated_at + timedelta(hours=1)
    flyte_writes_into(root, "notes.md", "edited in Flyte", "flyte-agent", later)
    flyte_writes_into(root, "new.md", "made in Flyte", "flyte-agent", later)
    transcript = json.loads((root / "messages.json").read_text())
    transcript.append({"role": "assistant", "content": "after"})
    (root / "messages.json").write_text(json.dumps(transcript, default=str, indent=2))

    back = await import_(mode, artifacts, root, replace=True, keep_versions=True)
    notes = await call(mode, back, "stat", "notes.md")
    assert (notes.actor, notes.version, notes.kind) == ("flyte-agent", 2, "text")
    assert notes.updated_at == later.replace(microsecond=0)
    assert await call(mode, back, "read_text", "new.md") == "made in Flyte"
    plan = await call(mode, back, "stat", "plan.json")  # untouched: as exported
    assert (plan.kind, plan.version) == ("json", 1)
    assert [(h.version, h.actor) for h in await call(mode, back, "history", "notes.md")] == [
        (1, "agent"),
        (2, "flyte-agent"),
    ]
    tail = await call(mode, back, "audit_tail", 2)
    assert [(r.op, r.path, r.actor) for r in tail] == [
        ("update", "notes.md", "flyte-agent"),
        ("create", "new.md", "flyte-agent"),
    ]
    messages = await call(mode, back, "transcript")
    assert [m.message["content"] for m in messages] == ["before", "after"]
    assert messages[0].at == snapshot.messages[0].at < messages[1].at


# --------------------------------------------------------------------------- refused directories


#: A JSON text nested 100,000 levels deep (``json.loads`` raises RecursionError on it).
DEEP = "[" * 100_000 + "]" * 100_000


def good_export(tmp_path: Path) -> Path:
    """A valid exported directory (written from a snapshot, no store needed)."""
    store = SQLiteStore(tmp_path / "seed" / "seed.sqlite3")
    try:
        artifacts = Artifacts(store=store)
        ws = artifacts.create("seed", keep_versions=True)
        ws.write_text("user/a.md", "alpha", reason="r")
        ws.write_text("user/a.md", "beta")
        ws.write_bytes("b.bin", b"\x00\x01")
        ws.append({"role": "user", "content": "hi"})
        root = tmp_path / "good"
        export_directory(ws, root)
    finally:
        store.close()
    return root


def _edit_json(file: Path, /, **changes: Any) -> None:
    data = json.loads(file.read_text())
    data.update(changes)
    file.write_text(json.dumps(data, indent=2))


def _version_file(root: Path) -> Path:
    return sorted((root / "versions").rglob("*.txt"))[0]


def _symlink_outside(root: Path) -> None:
    outside = root.parent / "outside-secret.txt"
    outside.write_text("secret")
    (root / "user" / "stolen.md").symlink_to(outside)


def _symlinked_folder(root: Path) -> None:
    outside = root.parent / "outside-dir"
    outside.mkdir()
    (outside / "x.md").write_text("x")
    (root / "linked").symlink_to(outside, target_is_directory=True)


def _symlink_inside(root: Path) -> None:
    (root / "alias.md").symlink_to(root / "user" / "a.md")


def _fifo(root: Path) -> None:
    os.mkfifo(root / "user" / "pipe.md")


def _bad_name(root: Path) -> None:
    fd = os.open(os.fsencode(root / "user") + b"/bad-\xff.md", os.O_CREAT | os.O_WRONLY, 0o600)
    os.close(fd)


def _big_file(root: Path) -> None:
    (root / "huge.bin").write_bytes(b"\0" * (MAX_FILE_BYTES + 1))


def _traversal_version(root: Path) -> None:
    folder = root / "versions" / quote("../../etc/passwd", safe="")
    folder.mkdir()
    stamp = "2025-01-01T00-00-00+00-00"
    (folder / f"{stamp}_{sha('x')}.txt").write_text("x")


def _traversal_meta(root: Path) -> None:
    (root / "meta" / f"{quote('../outside.md', safe='')}.json").write_text(
        json.dumps({"path": "../outside.md"})
    )


def _traversal_audit(root: Path) -> None:
    line = {"ts": "2025-01-01T00:00:00+00:00", "op": "create", "path": "../../etc/passwd"}
    with open(root / AUDIT_LOG_PATH, "a") as log:
        log.write(json.dumps(line) + "\n")


def _traversal_sidecar(root: Path) -> None:
    data = json.loads((root / SIDECAR_PATH).read_text())
    data["versions"][0]["file"] = "../../../etc/passwd"
    (root / SIDECAR_PATH).write_text(json.dumps(data))


def _append_audit(root: Path, text: str) -> None:
    with open(root / AUDIT_LOG_PATH, "a") as log:
        log.write(text + "\n")


HOSTILE: dict[str, tuple[Any, str]] = {
    # path traversal in names
    "traversal in a version folder": (_traversal_version, r"versions/\.\.%2F.*'\.\.'"),
    "traversal in a meta name": (_traversal_meta, r"meta/\.\.%2Foutside\.md\.json.*no file"),
    "traversal in an audit path": (_traversal_audit, r"audit/log\.jsonl line 4.*'\.\.'"),
    "traversal in the sidecar": (
        _traversal_sidecar,
        r"versions\[0\].*'\.\./\.\./\.\./etc/passwd' is not versions/<encoded path>",
    ),
    # links and special files
    "symlink pointing outside": (_symlink_outside, r"user/stolen\.md.*symbolic link"),
    "symlinked folder": (_symlinked_folder, r"linked.*symbolic link"),
    "symlink inside": (_symlink_inside, r"alias\.md.*symbolic link"),
    "fifo": (_fifo, r"user/pipe\.md.*not a regular file"),
    "undecodable name": (_bad_name, r"user/bad-.*Unicode"),
    "oversized file": (_big_file, r"huge\.bin.*larger than"),
    # files in reserved places
    "extra file in audit": (
        lambda r: (r / "audit" / "other.log").write_text("x"),
        r"audit/other\.log.*only audit/log\.jsonl",
    ),
    "folder in meta": (
        lambda r: (r / "meta" / "sub").mkdir() or (r / "meta" / "sub" / "x.json").write_text("{}"),
        r"meta/sub/x\.json.*no folders",
    ),
    "loose file in versions": (
        lambda r: (r / "versions" / "loose.txt").write_text("x"),
        r"versions/loose\.txt",
    ),
    "reserved name in another case": (
        lambda r: (r / "Meta").mkdir() or (r / "Meta" / "x.md").write_text("x"),
        r"Meta/x\.md.*reserved",
    ),
    "file named like a reserved folder": (
        lambda r: (r / "AUDIT").write_text("x"),
        r"AUDIT.*reserved",
    ),
    "messages.json as a folder": (
        lambda r: (r / "MESSAGES.JSON").mkdir() or (r / "MESSAGES.JSON" / "x").write_text("x"),
        r"MESSAGES\.JSON/x.*not a folder",
    ),
    "orphan meta": (
        lambda r: (r / "meta" / "ghost.md.json").write_text("{}"),
        r"meta/ghost\.md\.json.*describes no file",
    ),
    "version folder not canonically encoded": (
        lambda r: _version_file(r).parent.rename(r / "versions" / "user%2fa.md"),
        r"'user%2fa\.md' is not a percent-encoded path",
    ),
    # bad JSON
    "meta not JSON": (
        lambda r: (r / "meta" / "user%2Fa.md.json").write_text("{not json"),
        r"meta/user%2Fa\.md\.json.*not JSON",
    ),
    "meta with a repeated key": (
        lambda r: (r / "meta" / "user%2Fa.md.json").write_text(
            (r / "meta" / "user%2Fa.md.json").read_text().replace("{", '{"bytes": 1,', 1)
        ),
        r"appears twice",
    ),
    "meta with an unknown key": (
        lambda r: _edit_json(r / "meta" / "user%2Fa.md.json", owner="mallory"),
        r"unknown key.*'owner'",
    ),
    "audit line not JSON": (lambda r: _append_audit(r, "{oops"), r"line 4.*not JSON"),
    "audit op unknown": (
        lambda r: _append_audit(
            r, json.dumps({"ts": "2025-01-01T00:00:00+00:00", "op": "rm -rf", "path": "a"})
        ),
        r"line 4.*op must be one of",
    ),
    "audit time without offset": (
        lambda r: _append_audit(
            r, json.dumps({"ts": "2025-01-01T00:00:00", "op": "create", "path": "a"})
        ),
        r"line 4.*no UTC offset",
    ),
    "messages.json not JSON": (
        lambda r: (r / "messages.json").write_text("[{"),
        r"messages\.json.*not JSON",
    ),
    "messages.json not a list": (
        lambda r: (r / "messages.json").write_text('{"role": "user"}'),
        r"messages\.json.*list",
    ),
    "sidecar not JSON": (
        lambda r: (r / SIDECAR_PATH).write_text("nope"),
        r"meta/@workspace\.json.*not JSON",
    ),
    # hostile JSON (issue 34): one line naming the file, before anything recursive runs
    "messages.json 100,000 deep": (
        lambda r: (r / "messages.json").write_text(DEEP),
        r"messages\.json: is nested too deeply \(more than 256 levels",
    ),
    "messages.json with a 5,000-digit integer": (
        lambda r: (r / "messages.json").write_text("[" + "9" * 5000 + "]"),
        r"messages\.json: holds an integer of 5000 digits",
    ),
    "meta 100,000 deep": (
        lambda r: (r / "meta" / "user%2Fa.md.json").write_text('{"path": ' + DEEP + "}"),
        r"meta/user%2Fa\.md\.json: is nested too deeply.*under key 'path'",
    ),
    "audit line 100,000 deep": (lambda r: _append_audit(r, DEEP), r"line 4: is nested too deeply"),
    "sidecar 100,000 deep": (
        lambda r: (r / SIDECAR_PATH).write_text(DEEP),
        r"meta/@workspace\.json: is nested too deeply",
    ),
    "sidecar from the future": (
        lambda r: _edit_json(r / SIDECAR_PATH, format_version=99),
        r"format_version 99",
    ),
    "messages removed after the export": (
        lambda r: (r / "messages.json").write_text("[]"),
        r"messages\.json.*holds 0 message\(s\) but .* dates 1: messages were removed",
    ),
    "sidecar lists a version twice": (
        lambda r: _edit_json(
            r / SIDECAR_PATH, versions=json.loads((r / SIDECAR_PATH).read_text())["versions"] * 2
        ),
        r"versions\[3\].*twice",
    ),
    "message in an unknown format": (
        lambda r: _edit_json(
            r / SIDECAR_PATH, messages=[{"at": "2025-01-01T00:00:00+00:00", "format": "xml"}]
        ),
        r"messages\.json message 0: is not a 'xml' message .*unknown raw_messages format",
    ),
    "not a pydantic-ai message": (
        lambda r: _edit_json(
            r / SIDECAR_PATH,
            messages=[{"at": "2025-01-01T00:00:00+00:00", "format": "pydantic-ai"}],
        ),
        r"messages\.json message 0: is not a 'pydantic-ai' message",
    ),
    "sidecar with a bad kind": (
        lambda r: _edit_json(
            r / SIDECAR_PATH,
            files={"user/a.md": {"kind": "exe", "sha256": sha("beta"), "version": 2}},
        ),
        r"kind must be one of",
    ),
    # sha and size mismatches
    "file changed after its meta": (
        lambda r: (r / "user" / "a.md").write_text("tampered"),
        r"meta/user%2Fa\.md\.json.*sha256 .* does not match 'user/a\.md'",
    ),
    "meta size wrong": (
        lambda r: _edit_json(r / "meta" / "user%2Fa.md.json", bytes=999),
        r"bytes 999",
    ),
    "meta sha malformed": (
        lambda r: _edit_json(r / "meta" / "user%2Fa.md.json", sha256="abc"),
        r"sha256 must be a sha256",
    ),
    "version bytes differ from its name": (
        lambda r: _version_file(r).write_text("not what its name says"),
        r"versions/.*is named for sha256",
    ),
    "meta describing another path": (
        lambda r: _edit_json(r / "meta" / "user%2Fa.md.json", path="user/b.md"),
        r"describes 'user/b\.md', not 'user/a\.md'",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_directory_is_refused_and_writes_nothing(case: str, tmp_path: Path) -> None:
    root = good_export(tmp_path)
    spoil, expected = HOSTILE[case]
    spoil(root)
    store = SQLiteStore(tmp_path / "db" / "target.sqlite3")
    try:
        artifacts = Artifacts(store=store)
        kept = artifacts.create("kept")
        kept.write_text("k.md", "keep me")
        before = kept.export_snapshot()
        with pytest.raises(DirectoryLayoutError, match=expected) as refused:
            import_directory(artifacts, root, key="kept", replace=True)
        assert isinstance(refused.value, EntryValidationError)
        assert "Traceback" not in str(refused.value) and len(str(refused.value)) < 400
        with pytest.raises(DirectoryLayoutError, match=expected):
            import_directory(artifacts, root, key="new")
        assert artifacts.exists("new") is False
        same_snapshot(kept.export_snapshot(), before)
    finally:
        store.close()


async def test_refused_directory_writes_nothing_on_every_store(
    layer_backend: OpenedBackend, mode: str, tmp_path: Path
) -> None:
    root = good_export(tmp_path)
    (root / "user" / "a.md").write_text("tampered")  # its meta's sha no longer holds
    artifacts = Artifacts(store=layer_backend.store, user_id="ann")
    kept = await call(mode, artifacts, "create", "seed", keep_versions=True)
    await call(mode, kept, "write_text", "mine.md", "mine")
    before = await call(mode, kept, "export_snapshot")
    with pytest.raises(DirectoryLayoutError, match="does not match"):
        await import_(mode, artifacts, root, replace=True)
    same_snapshot(await call(mode, kept, "export_snapshot"), before)
    # and a clean copy of it is accepted
    (root / "user" / "a.md").write_text("beta")
    ws = await import_(mode, artifacts, root, replace=True)
    assert await call(mode, ws, "read_text", "user/a.md") == "beta"


def test_import_limits_come_from_the_handle(tmp_path: Path) -> None:
    root = good_export(tmp_path)
    store = SQLiteStore(tmp_path / "db" / "limits.sqlite3")
    try:
        artifacts = Artifacts(store=store)
        with pytest.raises(EntryValidationError, match=r"files\[0\]\.size"):
            import_directory(artifacts, root, key="small", max_bytes=1)
        assert artifacts.exists("small") is False
        with pytest.raises(DirectoryLayoutError, match="not a directory"):
            import_directory(artifacts, root / "messages.json")
        with pytest.raises(DirectoryLayoutError, match="not a directory"):
            read_directory(tmp_path / "missing")
    finally:
        store.close()


# --------------------------------------------------------------------------- safe export targets


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(".firefly-"))


async def test_export_target_rules(store_and_mode: tuple[Any, str], tmp_path: Path) -> None:
    store, mode = store_and_mode
    artifacts = Artifacts(store=store)
    ws = await call(mode, artifacts, "create", "t")
    await call(mode, ws, "write_text", "a.md", "one")
    parent = tmp_path / "exports"

    # a new directory (parents created), then an empty one
    await export(mode, ws, parent / "deep" / "new")
    assert (parent / "deep" / "new" / "a.md").read_text() == "one"
    assert os.stat(parent / "deep" / "new").st_mode & 0o777 == 0o700
    (parent / "empty").mkdir()
    await export(mode, ws, parent / "empty")
    assert (parent / "empty" / "a.md").read_text() == "one"

    # a non-empty export: refused, then replaced with overwrite=True
    await call(mode, ws, "write_text", "a.md", "two")
    with pytest.raises(DirectoryLayoutError, match=r"not empty.*overwrite"):
        await export(mode, ws, parent / "empty")
    assert (parent / "empty" / "a.md").read_text() == "one"
    await export(mode, ws, parent / "empty", overwrite=True)
    assert (parent / "empty" / "a.md").read_text() == "two"

    # a directory that is not a workspace is never replaced, nor a file, nor a link
    home = parent / "home"
    home.mkdir()
    (home / "thesis.tex").write_text("years of work")
    for kwargs in ({}, {"overwrite": True}):
        with pytest.raises(DirectoryLayoutError, match="not empty"):
            await export(mode, ws, home, **kwargs)
    assert tree(home) == {"thesis.tex": b"years of work"}
    (parent / "file").write_text("x")
    with pytest.raises(DirectoryLayoutError, match="not a directory"):
        await export(mode, ws, parent / "file", overwrite=True)
    (parent / "link").symlink_to(parent / "empty", target_is_directory=True)
    with pytest.raises(DirectoryLayoutError, match="symbolic link"):
        await export(mode, ws, parent / "link", overwrite=True)
    assert (parent / "link").is_symlink()
    # a workspace that does not exist
    with pytest.raises(NotFoundError):
        await export(mode, artifacts.workspace("nope"), parent / "nope")
    assert not (parent / "nope").exists()
    assert leftovers(parent) == [] and leftovers(parent / "deep") == []


async def test_unrepresentable_workspace_and_failed_write_leave_nothing(
    store_and_mode: tuple[Any, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, mode = store_and_mode
    artifacts = Artifacts(store=store)
    ws = await call(mode, artifacts, "create", "clash")
    await call(mode, ws, "write_text", "notes", "a file")
    await call(mode, ws, "write_text", "notes/a.md", "and a folder")
    with pytest.raises(
        DirectoryLayoutError, match=r"^notes: is a file and also the folder of 'notes/a\.md'"
    ):
        await export(mode, ws, tmp_path / "clash")
    assert not (tmp_path / "clash").exists()
    deep = "/".join(["segment"] * 40) + "/x.md"  # its metadata name would exceed 255 bytes
    long_ws = await call(mode, artifacts, "create", "long")
    await call(mode, long_ws, "write_text", deep, "deep")
    with pytest.raises(DirectoryLayoutError, match=r"a file name of more than 255 bytes"):
        await export(mode, long_ws, tmp_path / "long")
    assert not (tmp_path / "long").exists()

    # a write that fails half-way: the target is left as it was, no staging directory
    good = await call(mode, artifacts, "create", "good")
    await call(mode, good, "write_text", "a.md", "new")
    target = tmp_path / "target"
    await export(mode, good, target)
    before = tree(target)
    await call(mode, good, "write_text", "a.md", "newer")
    real = flyte_module._write_file
    written: list[str] = []

    def failing(root: Path, rel: str, out: Any) -> None:
        if len(written) == 2:
            raise OSError(28, "No space left on device")
        written.append(rel)
        real(root, rel, out)

    monkeypatch.setattr(flyte_module, "_write_file", failing)
    with pytest.raises(OSError, match="No space left"):
        await export(mode, good, target, overwrite=True)
    assert tree(target) == before
    assert leftovers(tmp_path) == []


def test_write_and_read_directory_without_a_store(tmp_path: Path) -> None:
    snapshot = WorkspaceSnapshot(key="offline")
    write_directory(snapshot, tmp_path / "empty-ws")
    assert tree(tmp_path / "empty-ws") == {
        "messages.json": b"[]",
        "meta": None,
        SIDECAR_PATH: (tmp_path / "empty-ws" / SIDECAR_PATH).read_bytes(),
    }
    again = read_directory(tmp_path / "empty-ws")
    assert (again.key, again.created_at, again.files, again.messages) == (
        "offline",
        snapshot.created_at,
        [],
        [],
    )
    with pytest.raises(EntryValidationError, match="key"):
        read_directory(tmp_path / "empty-ws", key="")
