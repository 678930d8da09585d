"""A user's graph read per conversation (issue 30): the scope filters (one graph per user,
one update rule), merge and forget keep it, erase deletes it, export / import carry it;
migration 0011.  SQLite, PostgreSQL and MongoDB."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from knowledge_stores import GRAPH_KINDS, count_rows, open_graph_store

from firefly_orm import migrate
from firefly_orm.errors import EntryValidationError
from firefly_orm.knowledge import Entity, ExtractedEntity, Extraction, KnowledgeGraph, Triple
from firefly_orm.manager import MemoryManager
from firefly_orm.protocols import MemoryStore

T0 = datetime(2026, 3, 1, tzinfo=UTC)
DAY = timedelta(days=1)


@pytest.fixture(params=GRAPH_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStore]:
    yield from open_graph_store(request, tmp_path)


def _names(entities: list[Entity]) -> set[str]:
    return {e.name for e in entities}


def test_a_conversation_lists_what_it_taught(store: MemoryStore) -> None:
    graph = KnowledgeGraph(store)
    people = graph.entities
    graph.add_fact("ann", "user", "lives in", "Berlin", observed_at=T0, conversation_id="c1")
    graph.record(
        "ann",
        Extraction(
            entities=[ExtractedEntity(name="Acme", type="company")],
            triples=[Triple(subject="user", predicate="works_at", object="Acme")],
        ),
        observed_at=T0 + DAY,
        conversation_id="c2",
    )
    # One graph: said in c2, it supersedes what c1 taught.
    moved = graph.add_fact(
        "ann", "user", "lives in", "Munich", observed_at=T0 + 2 * DAY, conversation_id="c2"
    )
    assert moved.outcome == "supersede"
    graph.add_fact("ann", "Acme", "based_in", "Munich", observed_at=T0 + 2 * DAY)  # no scope

    assert _names(people.list("ann", conversation_id="c1")) == {"user", "Berlin"}
    assert _names(people.list("ann", conversation_id="c2")) == {"user", "Acme", "Munich"}
    assert _names(people.list("ann")) == {"user", "Berlin", "Acme", "Munich"}
    ranked = people.list("ann", conversation_id="c2")
    assert [e.mentions for e in ranked] == sorted((e.mentions for e in ranked), reverse=True)
    assert people.list("ann", conversation_id="c2", limit=1) == ranked[:1]
    assert people.list("ann", conversation_id="c9") == []
    assert people.search("ann", "mun", conversation_id="c1") == []
    assert _names(people.search("ann", "MUN", conversation_id="c2")) == {"Munich"}

    assert graph.facts_about("ann", "user", conversation_id="c1") == []  # Berlin is closed
    (then,) = graph.facts_about("ann", "user", as_of=T0, conversation_id="c1")
    assert then.object == "Berlin"
    now = graph.facts_about("ann", "user", conversation_id="c2")
    assert sorted(f.object for f in now) == ["Acme", "Munich"]
    assert len(graph.facts_about("ann", "Munich")) == 2
    assert len(graph.facts_about("ann", "Munich", conversation_id="c2")) == 1

    # Merging moves the absorbed entity's conversations; forgetting drops them.
    graph.add_fact("ann", "Bobby", "likes", "tea", object_is_entity=False, conversation_id="c3")
    graph.add_fact("ann", "bob", "age", "40", object_is_entity=False)
    people.merge("ann", "bob", "Bobby")
    assert _names(people.list("ann", conversation_id="c3")) == {"bob"}
    people.forget("ann", "Acme")
    assert _names(people.list("ann", conversation_id="c2")) == {"user", "Munich"}

    with pytest.raises(EntryValidationError, match="conversation_id"):
        people.list("ann", conversation_id="")
    with pytest.raises(EntryValidationError, match="conversation_id"):
        graph.add_fact("ann", "user", "likes", "tea", conversation_id="a\x00b")

    # Export carries the scopes; erase deletes them; import brings them back.
    exported = graph.export_user("ann")
    assert {s["conversation_id"] for s in exported["conversations"]} == {"c1", "c2", "c3"}
    assert count_rows(store, "scopes", "ann") == len(exported["conversations"])
    MemoryManager(store=store).erase_user("ann")
    assert count_rows(store, "scopes", "ann") == 0
    assert people.list("ann", conversation_id="c2") == []
    graph.import_user(exported)
    assert graph.export_user("ann") == exported
    assert _names(people.list("ann", conversation_id="c2")) == {"user", "Munich"}

    # A scope naming no known item is refused before anything is written.
    MemoryManager(store=store).erase_user("ann")
    broken = {**exported, "conversations": [{**exported["conversations"][0], "item_id": "x"}]}
    with pytest.raises(EntryValidationError, match=r"conversations\[0\]"):
        graph.import_user(broken)
    assert count_rows(store, "entities", "ann") == 0
    older = {k: v for k, v in exported.items() if k != "conversations"}  # an older file
    graph.import_user(older)
    assert people.list("ann", conversation_id="c2") == []


def test_a_deferred_extraction_keeps_its_conversation(store: MemoryStore) -> None:
    from pydantic_ai.models.test import TestModel

    from firefly_orm.knowledge import KnowledgeExtractor

    answer = {"triples": [{"subject": "user", "predicate": "lives_in", "object": "Rome"}]}
    extractor = KnowledgeExtractor(KnowledgeGraph(store), TestModel(custom_output_args=answer))

    queued = extractor.extract_from_turn(
        "ann", "I live in Rome", turn_ref="c7:0", defer=True, conversation_id="c7"
    )
    assert queued.pending_id is not None
    assert extractor.process_pending().recorded == 1
    people = extractor.graph.entities
    assert _names(people.list("ann", conversation_id="c7")) == {"user", "Rome"}
    (fact,) = extractor.graph.facts_about("ann", "user", conversation_id="c7")
    assert fact.object == "Rome" and fact.evidence == ["c7:0"]


def _layout(url: str) -> tuple[bool, bool]:
    """Whether the scopes table and the pending queue's conversation column exist."""
    engine = sa.create_engine(url)
    try:
        found = sa.inspect(engine)
        pending = {c["name"] for c in found.get_columns("knowledge_pending")}
        return found.has_table("knowledge_scopes"), "conversation_id" in pending
    finally:
        engine.dispose()


def _migration_round_trip(url: str, schema: str | None) -> None:
    migrate.upgrade(url, schema_name=schema)
    assert _layout(url) == (True, True)
    migrate.downgrade(url, "0010_conversation_list_columns", schema_name=schema)
    assert migrate.current(url, schema_name=schema) == "0010_conversation_list_columns"
    assert _layout(url) == (False, False)
    migrate.upgrade(url, schema_name=schema)
    assert migrate.current(url, schema_name=schema) == migrate.head()
    assert _layout(url) == (True, True)


def test_migration_0011_on_sqlite(tmp_path: Path) -> None:
    """(On PostgreSQL, test_knowledge_migration's round trip goes through 0011 too.)"""
    _migration_round_trip(f"sqlite:///{tmp_path / 'scopes.sqlite3'}", None)
