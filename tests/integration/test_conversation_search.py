"""Searching past conversations (issue 29) on every store that keeps vectors.

Memory, files, MongoDB, SQLite (sqlite-vec) and PostgreSQL (pgvector), with
:class:`~firefly_orm.testing.embeddings.ConceptEmbeddingModel`, a test
embedder whose vectors mean something: a fact told in an earlier conversation
is found from a new one by a question that shares none of its words; text and
hybrid search find turns by their words (also turns added without an
embedder); a user never finds another user's turns; no vector outlives its
turn (eviction, delete, clear, erase).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from vector_stores import VECTOR_STORES, vector_store

from firefly_orm import ConversationMemory, MemoryManager
from firefly_orm.conversation import ConversationTurn, TurnMatch, conversation_namespace
from firefly_orm.errors import EntryValidationError
from firefly_orm.mongo import MongoDBStore
from firefly_orm.sql import SQLAlchemyStore
from firefly_orm.testing.embeddings import ConceptEmbeddingModel
from firefly_orm.vector import EmbeddingSpec

FACT = "Noted: the customer prefers email over phone calls."
QUESTION = "how should we contact her?"


@pytest.fixture(params=VECTOR_STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A store that keeps vectors."""
    with vector_store(request, tmp_path) as opened:
        yield opened


def _vector_ids(store: Any, conversation_id: str) -> set[str]:
    """The entry ids holding a stored vector in the conversation's namespace, read raw."""
    namespace = conversation_namespace(conversation_id)
    if isinstance(store, SQLAlchemyStore):
        table = sa.table(
            "memory_vectors",
            sa.column("entry_id"),
            sa.column("namespace"),
            schema=store.schema_name,
        )
        with store.engine.connect() as conn:
            query = sa.select(table.c.entry_id).where(table.c.namespace == namespace)
            return {str(row[0]) for row in conn.execute(query)}
    reads: Any = store._reads if isinstance(store, MongoDBStore) else store  # committed vectors
    ids: set[str] = reads.read_vector_ids(namespace)
    return ids


def _where(found: list[TurnMatch]) -> list[tuple[str, int]]:
    return [(m.conversation_id, m.turn_id) for m in found]


def test_a_fact_told_earlier_is_found_from_a_new_conversation(store: Any) -> None:
    memory = ConversationMemory(store=store, embedder=ConceptEmbeddingModel())
    ada, bob = memory.for_user("ada"), memory.for_user("bob")
    earlier = ada.new_conversation()
    ada.add_turns(
        earlier,
        [
            ConversationTurn(user_prompt="Mrs Lee ordered a red bicycle", assistant_response="OK."),
            ConversationTurn(user_prompt="Remember this about her", assistant_response=FACT),
            ConversationTurn(user_prompt="What is the weather?", assistant_response="Sunny."),
        ],
    )
    # Added by a memory without an embedder: no vector, still found by its words.
    plain = ConversationMemory(store=store).for_user("ada")
    plain.add_turn(earlier, "And her invoices?", "She wants invoices by email as well.")
    theirs = bob.new_conversation()
    bob.add_turn(theirs, "My customer", "prefers email over phone calls too")
    current = ada.new_conversation()
    ada.add_turn(current, QUESTION, "Let me check.")

    by_meaning = ada.search_conversations(QUESTION, mode="semantic", exclude=[current], limit=3)
    assert _where(by_meaning)[0] == (earlier, 1)
    assert by_meaning[0].turn.assistant_response == FACT
    assert by_meaning[0].score > by_meaning[-1].score
    hybrid = ada.search_conversations(QUESTION, exclude=[current], limit=3)  # hybrid by default
    assert _where(hybrid)[0] == (earlier, 1)
    assert (earlier, 3) not in _where(by_meaning)  # no vector: not found by meaning...
    by_words = ada.search_conversations("email", mode="text")
    assert set(_where(by_words)) == {(earlier, 1), (earlier, 3)}  # ...but by its words
    assert (earlier, 3) in _where(ada.search_conversations("invoices email", limit=10))
    only = ada.search_conversations(QUESTION, mode="semantic", conversation_ids=[current])
    assert {m.conversation_id for m in only} == {current}

    # Owner isolation: Ada never reaches Bob's turn, whatever she asks for.
    for mode in ("text", "semantic", "hybrid"):
        for ids in (None, [theirs]):
            found = ada.search_conversations(
                "customer email phone calls", mode=mode, limit=20, conversation_ids=ids
            )
            assert theirs not in {m.conversation_id for m in found}
    assert _where(bob.search_conversations("email", mode="text")) == [(theirs, 0)]
    with pytest.raises(EntryValidationError):
        ada.search_conversations("email", user_id="bob")
    assert {m.conversation_id for m in memory.search_conversations("email", user_id="bob")} == {
        theirs
    }

    # An edited turn is embedded again: found by its new meaning, no longer by its old one.
    def fact_score() -> float:
        found = ada.search_conversations(QUESTION, mode="semantic", limit=10, exclude=[current])
        return next(m.score for m in found if (m.conversation_id, m.turn_id) == (earlier, 1))

    before = fact_score()
    ada.update_turn(earlier, 1, assistant_response="Noted: she rides a red bicycle.")
    assert fact_score() < before - 0.1
    ada.update_turn(earlier, 1, assistant_response=FACT)
    assert fact_score() == pytest.approx(before)
    async_found = asyncio.run(
        ada.async_search_conversations(QUESTION, mode="semantic", limit=1, exclude=[current])
    )
    assert _where(async_found) == [(earlier, 1)]


def test_no_turn_vector_outlives_its_turn(store: Any) -> None:
    memory = ConversationMemory(
        store=store, embedder=ConceptEmbeddingModel(), max_tokens=60
    ).for_user("ada")
    evicting = memory.new_conversation()
    for i in range(6):
        memory.add_turn(evicting, f"question {i} about email", f"answer {i} about phone calls")
    kept = memory.get_turns(evicting)
    assert 0 < len(kept) < 6
    with store.unit_of_work() as uow:
        rows = uow.entries.list(conversation_namespace(evicting), key_prefix="turn:")
    assert _vector_ids(store, evicting) == {row.entry_id for row in rows}
    found = memory.search_conversations("email phone", mode="semantic", limit=10)
    assert {m.turn_id for m in found} == {t.turn_id for t in kept}

    deleted = memory.new_conversation()
    memory.add_turns(deleted, [ConversationTurn(user_prompt="a", assistant_response="email")] * 2)
    assert memory.delete_turn(deleted, 0)
    assert len(_vector_ids(store, deleted)) == 1
    memory.clear(deleted)
    assert _vector_ids(store, deleted) == set()

    erased = memory.new_conversation()
    memory.add_turn(erased, "call me", "by email")
    memory.erase_user("ada")
    assert _vector_ids(store, erased) == _vector_ids(store, evicting) == set()
    assert memory.search_conversations("email", mode="hybrid") == []


def test_a_turn_rewritten_without_search_text_loses_its_vector(store: Any) -> None:
    """``text_search=False`` (no embedder allowed with it): a turn with a vector that such
    a memory rewrites leaves the text index and its vector with it, so no vector is
    left beside a row without ``search_text``; the other turns keep theirs."""
    memory = ConversationMemory(store=store, embedder=ConceptEmbeddingModel(), max_tokens=None)
    quiet = ConversationMemory(store=store, max_tokens=None, text_search=False)
    cid = memory.new_conversation()
    for i in range(3):
        memory.add_turn(cid, f"question {i} about email", f"answer {i}")
    with store.unit_of_work() as uow:
        rows = uow.entries.list(conversation_namespace(cid), key_prefix="turn:")
    assert _vector_ids(store, cid) == {row.entry_id for row in rows}
    quiet.update_turn(cid, 1, metadata={"seen": True})
    quiet.pop_turn(cid, keep=lambda t: (t.user_prompt, "shorter", []))
    assert _vector_ids(store, cid) == {rows[0].entry_id}
    found = memory.search_conversations("email", mode="semantic", limit=10)
    assert [m.turn_id for m in found] == [0]
    with pytest.raises(EntryValidationError, match="text_search"):
        ConversationMemory(store=store, embedder=ConceptEmbeddingModel(), text_search=False)


@pytest.fixture(params=["memory", "sqlite"])
def small_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A store that keeps vectors, for what the layers above the stores add (every store
    is covered by the tests above)."""
    with vector_store(request, tmp_path) as opened:
        yield opened


def test_manager_embeds_turns_and_searches_both_memories(small_store: Any) -> None:
    store = small_store
    manager = MemoryManager(store=store, embedder=ConceptEmbeddingModel()).for_user("ada")
    earlier = manager.new_conversation()
    manager.add_turn(earlier, "Remember this about Mrs Lee", FACT)
    current = manager.new_conversation()
    manager.add_turn(current, QUESTION, "Let me check.")
    found = manager.conversation.search_conversations(QUESTION, exclude=[current], limit=1)
    assert _where(found) == [(earlier, 0)]
    context = manager.assemble_context(current, query=QUESTION, past_turns=2)
    texts = [m["content"] for m in context if isinstance(m, dict) and m["role"] == "system"]
    assert any(FACT in text for text in texts)
    manager.remember("Mrs Lee lives in Lyon", importance=0.9)
    both = manager.search_memory(QUESTION, limit=4, exclude_conversations=[current])
    assert [hit.source for hit in both[:2]] == ["long_term", "conversation"]  # one of each first
    assert both[1].turn is not None and both[1].turn.conversation_id == earlier
    assert both[1].text.endswith(FACT) and both[0].text == "Mrs Lee lives in Lyon"
    spec = EmbeddingSpec(f"firefly_orm:{ConceptEmbeddingModel().model_name}", 256)
    with store.unit_of_work() as uow:
        assert uow.entries.embedding_spec(conversation_namespace(earlier)) == spec


async def test_the_agent_tool_searches_the_users_past_conversations() -> None:
    pytest.importorskip("pydantic_ai")
    from helpers.long_term_agent import call_tool, results

    from firefly_orm.long_term.tools import long_term_toolset

    manager = MemoryManager(embedder=ConceptEmbeddingModel())
    ada, bob = manager.for_user("ada"), manager.for_user("bob")
    earlier = await ada.async_new_conversation()
    await ada.async_add_turn(earlier, "Remember this about Mrs Lee", FACT)
    await bob.async_add_turn(await bob.async_new_conversation(), "Bob's customer", FACT)
    tools = long_term_toolset(ada, conversations=ada.conversation)
    found = results(await call_tool(tools, "search_conversations", query=QUESTION, limit=5))
    assert [(f["conversation_id"], f["turn_id"], f["assistant_response"]) for f in found] == [
        (earlier, 0, FACT)
    ]
    assert "search_conversations" not in long_term_toolset(ada).tools
    with pytest.raises(EntryValidationError):
        long_term_toolset(ada, conversations=bob.conversation)
