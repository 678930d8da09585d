"""``ConversationMemory(text_search=False)``: turns written without full-text index entries.

On every memory-layer backend (conftest's ``layer_backend``), sync everywhere
and async on two: every way a memory writes a turn row (an append: on SQL the
one-statement append, and the general path an eviction takes; a batch, an
import, a copy, a branch, an edit, a popped remainder) leaves the row without
``search_text``,
so text search finds none of them; a default memory's turns are found beside
them, and a default memory's edit of an unindexed turn indexes it.  On SQLite
and PostgreSQL the index itself is read: no FTS5 document and no ``tsvector``
is written for an unindexed turn.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from modes import call
from store_backends import OpenedBackend, layer_mode_params

from firefly_orm import MemoryManager
from firefly_orm._search import PG_SEARCH_VECTOR, SQLITE_FTS_TABLE
from firefly_orm.config import MemorySettings
from firefly_orm.conversation import (
    ConversationMemory,
    ConversationTurn,
    conversation_namespace,
    turn_key,
)
from firefly_orm.errors import EntryValidationError
from firefly_orm.sql import SQLAlchemyStore
from firefly_orm.testing.embeddings import ConceptEmbeddingModel

#: A word no turn of these tests holds but those that say it.
WORD = "zeppelin"


def _search_text(store: Any, conversation_id: str, turn_id: int) -> str | None:
    row = store.load_by_key(conversation_namespace(conversation_id), turn_key(turn_id))
    assert row is not None, (conversation_id, turn_id)
    text: str | None = row.search_text
    return text


def _indexed_rows(store: SQLAlchemyStore) -> int:
    """How many rows the database's full-text index holds (FTS5 documents, tsvectors)."""
    if store.engine.dialect.name == "sqlite":
        query: Any = sa.text(f"SELECT count(*) FROM {SQLITE_FTS_TABLE}_docsize")
    else:  # through the engine's schema translation
        table = sa.table("memory_entries", sa.column(PG_SEARCH_VECTOR), schema=store.schema_name)
        query = sa.select(sa.func.count()).where(table.c[PG_SEARCH_VECTOR].is_not(None))
    with store.engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


async def _found(mode: str, memory: ConversationMemory) -> set[tuple[str, int]]:
    matches = await call(mode, memory, "search_conversations", WORD)  # no embedder: by words
    return {(m.conversation_id, m.turn_id) for m in matches}


@pytest.mark.parametrize(
    ("layer_backend", "mode"), layer_mode_params(async_on=["memory", "postgres"]), indirect=True
)
async def test_no_turn_row_of_an_unindexed_memory_is_in_the_text_index(
    layer_backend: OpenedBackend, mode: str
) -> None:
    store = layer_backend.store
    quiet = ConversationMemory(store=store, max_tokens=None, text_search=False)
    indexed = ConversationMemory(store=store, max_tokens=None)
    sql = isinstance(store, SQLAlchemyStore)
    cid: str = await call(mode, quiet, "new_conversation")
    before = _indexed_rows(store) if sql else 0  # (a store makes its table on first use)
    for n in range(4):  # (on SQL: the one-statement append)
        await call(mode, quiet, "add_turn", cid, f"{WORD} question {n}", f"{WORD} answer {n}")
    await call(
        mode,
        quiet,
        "add_turns",
        cid,
        [ConversationTurn(user_prompt=f"{WORD} batch", assistant_response="yes")],
    )
    exported = await call(mode, indexed, "export_conversation", cid)
    imported: str = await call(
        mode, quiet, "import_conversation", exported, conversation_id="imported"
    )
    copied: str = await call(mode, quiet, "copy_conversation", cid)
    branched: str = await call(mode, quiet, "branch", cid, 2)
    await call(mode, quiet, "update_turn", cid, 1, assistant_response=f"{WORD} edited")
    await call(mode, quiet, "pop_turn", cid, keep=lambda t: (t.user_prompt, f"{WORD} kept", []))
    # An append that evicts: the general path (on SQL too).
    evicting = ConversationMemory(store=store, max_messages=2, text_search=False)
    trimmed: str = await call(mode, evicting, "new_conversation")
    for n in range(2):
        await call(mode, evicting, "add_turn", trimmed, f"{WORD} evicting {n}", "ok")
    assert [t.turn_id for t in await call(mode, evicting, "get_turns", trimmed)] == [1]
    assert len({cid, imported, copied, branched, trimmed}) == 5
    written = {(c, n) for c in (cid, imported, copied) for n in range(5)}
    written |= {(branched, n) for n in range(3)} | {(trimmed, 1)}
    assert all(_search_text(store, c, n) is None for c, n in written)
    if sql:
        assert _indexed_rows(store) == before

    shown: str = await call(mode, indexed, "new_conversation")
    await call(mode, indexed, "add_turn", shown, f"{WORD} indexed", "found")
    assert await _found(mode, quiet) == {(shown, 0)}
    # A default memory's rewrite of an unindexed turn indexes it.
    await call(mode, indexed, "update_turn", cid, 2, user_prompt=f"{WORD} now indexed")
    assert await _found(mode, indexed) == {(shown, 0), (cid, 2)}
    assert _search_text(store, cid, 2) == f"{WORD} now indexed\n{WORD} answer 2"
    if sql:
        assert _indexed_rows(store) == before + 2


def test_the_setting_is_checked_shown_and_carried() -> None:
    memory = ConversationMemory(text_search=False)
    assert memory.text_search is False
    assert ConversationMemory().text_search is True
    assert "text_search=False" in repr(memory)
    assert memory.config()["text_search"] is False
    # The default is left out: releases before the setting refuse the key.
    assert "text_search" not in ConversationMemory().config()
    assert memory.for_user("ada").text_search is False
    cid = memory.new_conversation()
    memory.add_turn(cid, "q", "a")
    restored = ConversationMemory.from_dict(memory.to_dict(cid))
    assert restored.text_search is False
    with pytest.raises(EntryValidationError, match=r"text_search.*must be a bool"):
        ConversationMemory(text_search="no")  # type: ignore[arg-type]
    data = {**memory.to_dict(cid), "config": {"text_search": "no"}}
    with pytest.raises(EntryValidationError, match="text_search"):
        ConversationMemory.from_dict(data)
    # Vectors are kept only beside search_text: no embedder with text_search=False.
    with pytest.raises(EntryValidationError, match=r"text_search.*embedder"):
        ConversationMemory(embedder=ConceptEmbeddingModel(), text_search=False)
    with pytest.raises(EntryValidationError, match=r"text_search.*embedder"):
        MemoryManager(embedder=ConceptEmbeddingModel(), conversation_text_search=False)
    # From the environment's settings (FIREFLY_AGENTIC_MEMORY_CONVERSATION_TEXT_SEARCH).
    configured = MemoryManager.from_config(settings=MemorySettings(conversation_text_search=False))
    assert configured.conversation.text_search is False
    assert MemoryManager.from_config(settings=MemorySettings()).conversation.text_search


@pytest.mark.parametrize("text_search", [True, False])
def test_a_managers_setting_reaches_its_clones_copy(text_search: bool) -> None:
    manager = MemoryManager(conversation_text_search=text_search)
    assert manager.conversation.text_search is text_search
    assert manager.fork(working_scope_id="other").conversation.text_search is text_search
    cid = manager.new_conversation()
    manager.add_turn(cid, f"{WORD}?", "yes")
    clone = manager.clone_for_isolation(conversation_id=cid)
    assert clone.conversation.text_search is text_search
    found = manager.conversation.search_conversations(WORD)
    assert len(found) == (2 if text_search else 0)  # the turn and its copy
