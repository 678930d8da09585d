"""Field-level encryption at rest (issue 34, section 4) on every layer backend, sync and async.

Every layer (conversation turns and the head's summary, working facts,
long-term items, artifacts) is written through ``protect(store,
encryption=...)`` with a marker in every content; the backend's raw storage is
then read *around* the library (raw SQL on SQLite and PostgreSQL, including
the full-text index; raw documents on MongoDB; raw bytes of FileStore's files;
the in-memory store's rows) and must not hold the marker anywhere, while a
control value written to a namespace left out of encryption must be found
there (so the raw read can fail).  Then: everything reads back through the
layers; another store object over the same data with only the new key after
a rotation reads it too; with the wrong key a read fails with
:class:`DecryptionError`.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from modes import call
from store_backends import OpenedBackend, layer_mode_params

from firefly_orm.artifacts import Artifacts
from firefly_orm.conversation import ConversationMemory
from firefly_orm.entry import MemoryEntry
from firefly_orm.long_term import LongTermMemory
from firefly_orm.privacy import (
    DecryptionError,
    EncryptedSearchError,
    Encryption,
    KeyRing,
    async_rotate_keys,
    envelope_key_id,
    generate_key,
    protect,
    rotate_keys,
    store_namespaces,
)
from firefly_orm.working import WorkingMemory

SECRET = "Zebra7741Secret"
CONTROL = "Visible3309Control"
K1, K2 = generate_key(), generate_key()
#: Everything but the control namespace is encrypted.
PREFIXES = ("conversation", "working", "long", "artifacts")


def _encryption(*ring: tuple[str, str], **options: Any) -> Encryption:
    return Encryption(KeyRing(dict(ring)), namespaces=PREFIXES, **options)


def _summarize(turns: Any) -> str:
    return f"summary of {len(turns)} turns mentioning {SECRET}"


def raw_dump(backend: OpenedBackend) -> str:
    """Everything the backend holds, read around firefly_orm, as one text."""
    name, store = backend.name, backend.store
    if name == "sqlite":
        path = str(store.engine.url.database)
        with sqlite3.connect(path) as conn:
            tables = [
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            ]
            return "\n".join(
                repr(row) for t in tables for row in conn.execute(f'SELECT * FROM "{t}"')
            )
    if name in {"postgres", "pgbouncer"}:
        schema = store.schema_name
        with store.engine.connect() as conn:
            rows = conn.execute(
                sa.text(f'SELECT row_to_json(t)::text FROM "{schema}".memory_entries t')
            )
            return "\n".join(r[0] for r in rows)
    if name == "mongo":
        from pymongo import MongoClient

        client: MongoClient[dict[str, Any]] = MongoClient(backend.place.mongo())
        try:
            db = client[backend.place.name]
            return "\n".join(
                repr(doc) for coll in db.list_collection_names() for doc in db[coll].find()
            )
        finally:
            client.close()
    if name == "file":
        root: Path = backend.place.tmp_path / "files"
        return "\n".join(
            p.read_bytes().decode("utf-8", "replace")
            for p in sorted(root.rglob("*"))
            if p.is_file()
        )
    if name == "redis":
        from redis_server import raw_dump as redis_dump

        return redis_dump(backend.place.redis(), backend.place.name)
    assert name == "memory"
    return "\n".join(
        json.dumps(e.to_json_dict()) for ns in store.namespaces for e in store.load(ns)
    )


def mongo_namespaces(backend: OpenedBackend) -> list[str]:
    """The namespaces of the test's MongoDB database, read with pymongo."""
    from pymongo import MongoClient

    client: MongoClient[dict[str, Any]] = MongoClient(backend.place.mongo())
    try:
        return sorted(client[backend.place.name]["entries"].distinct("namespace"))
    finally:
        client.close()


async def _write_everything(store: Any, mode: str) -> str:
    """Write through every layer; return the artifact workspace key."""
    conversation = ConversationMemory(
        store=store, max_tokens=20, summarize_threshold=0, summarizer=_summarize
    )
    for i in range(4):
        await call(
            mode,
            conversation,
            "add_turn",
            "c1",
            f"question {i} {SECRET} one two",
            f"answer {SECRET} three four",
        )
    working = WorkingMemory(store=store, scope_id="s1")
    await call(mode, working, "set", "fact", {"city": f"Paris {SECRET}"})
    long_term = LongTermMemory(store=store, namespace="long-term")
    await call(mode, long_term, "remember", f"Ada Lovelace {SECRET}")
    workspace = await call(mode, Artifacts(store=store), "get_or_create", "w")
    await call(mode, workspace, "write_text", "notes.md", f"body {SECRET}")
    return "w"


async def _read_everything(store: Any, mode: str) -> None:
    conversation = ConversationMemory(store=store, max_tokens=20, summarize_threshold=0)
    context = await call(mode, conversation, "get_context", "c1")
    assert any(SECRET in str(m.get("content")) for m in context)
    summary = await call(mode, conversation, "get_summary", "c1")
    assert summary is not None and SECRET in summary
    working = WorkingMemory(store=store, scope_id="s1")
    assert await call(mode, working, "get", "fact") == {"city": f"Paris {SECRET}"}
    items = await call(mode, LongTermMemory(store=store, namespace="long-term"), "list")
    assert [i.text for i in items] == [f"Ada Lovelace {SECRET}"]
    workspace = await call(mode, Artifacts(store=store), "get_or_create", "w")
    assert await call(mode, workspace, "read_text", "notes.md") == f"body {SECRET}"


async def test_no_plaintext_at_rest_and_every_layer_round_trips(
    layer_backend: OpenedBackend, mode: str
) -> None:
    protected = protect(layer_backend.store, encryption=_encryption(("k1", K1)))
    await _write_everything(protected, mode)
    control = MemoryEntry(key="ctl", content={"note": CONTROL})
    await call(mode, protected, "save", "plain:control", control)

    raw = raw_dump(layer_backend)
    assert CONTROL in raw  # the raw read sees what is not encrypted
    assert SECRET not in raw  # ...and nothing of what is

    await _read_everything(protected, mode)
    # Another store object over the same data (what another process sees).
    await _read_everything(
        protect(layer_backend.reopen(), encryption=_encryption(("k1", K1))), mode
    )

    wrong = protect(layer_backend.reopen(), encryption=_encryption(("k1", K2)))
    with pytest.raises(DecryptionError):
        await call(mode, WorkingMemory(store=wrong, scope_id="s1"), "get", "fact")


# One async rotation per kind of unit of work (SQL, MongoDB) is enough.
@pytest.mark.parametrize(
    ("layer_backend", "mode"), layer_mode_params({"sqlite", "postgres", "mongo"}), indirect=True
)
async def test_rotation_moves_every_row_to_the_new_key(
    layer_backend: OpenedBackend, mode: str
) -> None:
    store = layer_backend.store
    await _write_everything(protect(store, encryption=_encryption(("k1", K1))), mode)
    both = _encryption(("k2", K2), ("k1", K1))
    namespaces = None
    if layer_backend.name == "mongo":  # MongoDB cannot list its namespaces: name them
        namespaces = mongo_namespaces(layer_backend)
    if mode == "sync":
        report = rotate_keys(store, both, namespaces=namespaces, batch_size=2)
    else:
        report = await async_rotate_keys(store, both, namespaces=namespaces, batch_size=2)
    assert report.key_id == "k2" and report.rotated == report.examined > 0
    assert report.batches >= report.rotated // 2
    again = rotate_keys(store, both, namespaces=namespaces)
    assert (again.rotated, again.batches) == (0, 0)

    raw = raw_dump(layer_backend)
    assert SECRET not in raw
    names = namespaces if namespaces is not None else store_namespaces(store)
    kids = {envelope_key_id(e.content) for ns in names for e in store.load(ns)}
    assert kids == {"k2"}
    await _read_everything(
        protect(layer_backend.reopen(), encryption=_encryption(("k2", K2))), mode
    )


# --------------------------------------------------------------------------- search


# The search rule is the same code on every store: sync covers them, async runs on SQL.
@pytest.mark.parametrize(
    ("layer_backend", "mode"), layer_mode_params({"sqlite", "postgres"}), indirect=True
)
async def test_encrypted_search_refuses_unless_kept_in_clear(
    layer_backend: OpenedBackend, mode: str
) -> None:
    store = layer_backend.store
    hidden = LongTermMemory(
        store=protect(store, encryption=_encryption(("k1", K1))), namespace="long-a"
    )
    await call(mode, hidden, "remember", f"Grace Hopper {SECRET}")
    with pytest.raises(EncryptedSearchError, match="searchable"):
        await call(mode, hidden, "recall", "Hopper")

    clear = _encryption(("k1", K1), searchable=["long-b"])
    shown = LongTermMemory(store=protect(store, encryption=clear), namespace="long-b")
    await call(mode, shown, "remember", "Grace Hopper compilers")
    found = await call(mode, shown, "recall", "Hopper")
    assert [r.item.text for r in found] == ["Grace Hopper compilers"]

    raw = raw_dump(layer_backend)
    assert SECRET not in raw  # the unsearchable namespace's search text was never stored
    assert "compilers" in raw  # the searchable one's is, in clear, by the explicit choice
