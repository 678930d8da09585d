"""KnowledgeGraph and EntityMemory on SQLite, PostgreSQL and MongoDB (issue 30)."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import forked
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from knowledge_stores import (
    GRAPH_KINDS,
    GRAPH_NAMES,
    SQL_KINDS,
    count_rows,
    open_graph_store,
    open_sql_store,
    place_of,
    record_in_a_process,
)

from firefly_orm.errors import EntryValidationError
from firefly_orm.knowledge import (
    EntityMemory,
    ExtractedEntity,
    Extraction,
    KnowledgeGraph,
    Triple,
)
from firefly_orm.manager import MemoryManager
from firefly_orm.protocols import MemoryStore
from firefly_orm.sql import SQLAlchemyStore, SQLiteStore
from firefly_orm.sql._graph import FACTS, GRAPH_TABLES

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(params=SQL_KINDS)
def sql_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SQLAlchemyStore]:
    yield from open_sql_store(request, tmp_path)


@pytest.fixture(params=GRAPH_KINDS)
def graph_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStore]:
    yield from open_graph_store(request, tmp_path)


def _count(store: SQLAlchemyStore, table: sa.Table, user_id: str | None = None) -> int:
    query = sa.select(sa.func.count()).select_from(table)
    if user_id is not None:
        query = query.where(table.c.user_id == user_id)
    with store.engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


def test_moved_to_berlin_then_munich(graph_store: MemoryStore) -> None:
    """The issue's scenario: one current fact, one superseded with its interval and evidence."""
    graph = KnowledgeGraph(graph_store)
    said_berlin, said_munich = T0, T0 + timedelta(days=30)
    first = graph.add_fact(
        "ann", "user", "lives in", "Berlin", evidence="t1", observed_at=said_berlin
    )
    second = graph.add_fact(
        "ann", "user", "lives_in", "Munich", evidence="t2", observed_at=said_munich
    )
    assert (first.outcome, second.outcome) == ("add", "supersede")
    assert [f.object for f in second.superseded] == ["Berlin"]

    now = graph.facts_about("ann", "user")
    assert [(f.predicate, f.object, f.evidence, f.valid_to) for f in now] == [
        ("lives_in", "Munich", ["t2"], None)
    ]
    between = graph.facts_about("ann", "user", as_of=said_berlin + timedelta(days=1))
    assert len(between) == 1
    berlin = between[0]
    assert (berlin.object, berlin.evidence) == ("Berlin", ["t1"])
    assert (berlin.valid_from, berlin.valid_to) == (said_berlin, said_munich)
    assert graph.facts_about("ann", "user", as_of=said_berlin - timedelta(days=1)) == []
    # Nothing deleted; every change in the history; another user sees nothing.
    assert count_rows(graph_store, "facts", "ann") == 2
    actions = [h["action"] for h in graph.history("ann")]
    assert actions.count("add") == 1 and actions.count("supersede") == 1
    assert graph.facts_about("bob", "user") == []


def test_confirm_update_ignore_and_multi_valued(graph_store: MemoryStore) -> None:
    graph = KnowledgeGraph(graph_store, multi_valued=["likes"], min_confidence=0.3)
    graph.add_fact("ann", "user", "works_at", "Acme", evidence="t1", observed_at=T0)
    again = graph.add_fact("ann", "USER", "works at", "acme", evidence="t2", observed_at=T0)
    assert again.outcome == "confirm" and again.fact is not None
    assert again.fact.evidence == ["t1", "t2"]
    surer = graph.add_fact("ann", "user", "works_at", "Acme", evidence="t3", confidence=0.9)
    assert surer.outcome == "update" and surer.fact is not None
    assert surer.fact.confidence == 0.9
    stale = graph.add_fact(
        "ann", "user", "works_at", "Initech", evidence="t0", observed_at=T0 - timedelta(days=9)
    )
    assert stale.outcome == "ignore"
    weak = graph.add_fact("ann", "user", "works_at", "Globex", confidence=0.1)
    assert (weak.outcome, weak.fact) == ("ignore", None)
    assert [f.object for f in graph.facts_about("ann", "user")] == ["Acme"]
    # A multi-valued predicate keeps both objects; a literal object is a value, not an entity.
    graph.add_fact("ann", "user", "likes", "jazz", object_is_entity=False)
    graph.add_fact("ann", "user", "likes", "chess", object_is_entity=False)
    likes = [f for f in graph.facts_about("ann", "user") if f.predicate == "likes"]
    assert sorted(f.object for f in likes) == ["chess", "jazz"]
    assert not any(f.object_is_entity for f in likes)
    assert graph.entities.get("ann", "jazz") is None


def test_aliases_match_subjects(graph_store: MemoryStore) -> None:
    graph = KnowledgeGraph(graph_store)
    graph.record(
        "ann",
        Extraction(entities=[ExtractedEntity(name="Robert Smith", type="person", aliases=["Bob"])]),
    )
    graph.add_fact("ann", "bob", "lives_in", "Paris", observed_at=T0)
    change = graph.add_fact("ann", "Robert  smith", "lives_in", "Rome")
    assert change.outcome == "supersede"
    entity = graph.entities.get("ann", "BOB")
    assert entity is not None and entity.name == "Robert Smith"
    assert entity.entity_type == "person" and entity.mentions == 3
    assert count_rows(graph_store, "entities", "ann") == 3  # Robert Smith, Paris, Rome


def test_neighbors_and_paths(graph_store: MemoryStore) -> None:
    graph = KnowledgeGraph(graph_store, multi_valued=["knows"])
    for subject, obj in [("ann", "bea"), ("bea", "cal"), ("cal", "dan"), ("ann", "cal")]:
        graph.add_fact("u", subject, "knows", obj)
    graph.add_fact("u", "dan", "lives_in", "Oslo", observed_at=T0)
    graph.add_fact("u", "dan", "lives_in", "Bergen")  # Oslo is no longer a current neighbour
    one = graph.neighbors("u", "ann", 1)
    assert [(e.name, d) for e, d in one] == [("bea", 1), ("cal", 1)]
    two = graph.neighbors("u", "ann", 2)
    assert [(e.name, d) for e, d in two] == [("bea", 1), ("cal", 1), ("dan", 2)]
    assert ("Oslo", 3) not in [(e.name, d) for e, d in graph.neighbors("u", "ann", 3)]
    paths = graph.paths("u", "ann", "dan", 3)
    hops = [[(f.subject, f.object) for f in path] for path in paths]
    assert hops == [
        [("ann", "cal"), ("cal", "dan")],
        [("ann", "bea"), ("bea", "cal"), ("cal", "dan")],
    ]
    assert graph.paths("u", "ann", "dan", 1) == []
    # As of a day after T0: only Oslo was known (the other facts are from today).
    then = T0 + timedelta(days=1)
    assert [(e.name, d) for e, d in graph.neighbors("u", "dan", 2, as_of=then)] == [("Oslo", 1)]
    assert graph.paths("u", "ann", "dan", 3, as_of=then) == []
    oslo = graph.paths("u", "dan", "oslo", 2, as_of=then)
    assert [[(f.subject, f.object, f.valid_to is not None) for f in p] for p in oslo] == [
        [("dan", "Oslo", True)]
    ]
    with pytest.raises(KeyError):
        graph.neighbors("u", "nobody", 1)


def test_merge_and_forget(graph_store: MemoryStore) -> None:
    graph = KnowledgeGraph(graph_store)
    memory = EntityMemory(graph_store)
    graph.add_fact("ann", "NYC", "located_in", "USA")
    graph.add_fact("ann", "user", "lives_in", "New York City")
    merged = memory.merge("ann", "New York City", "NYC")
    assert merged.aliases == ["NYC"] and merged.mentions == 2
    assert memory.get("ann", "nyc") == merged
    facts = graph.facts_about("ann", "New York City")
    assert sorted((f.subject, f.object) for f in facts) == [
        ("New York City", "USA"),
        ("user", "New York City"),
    ]
    assert [e.name for e in memory.search("ann", "yc")] == ["New York City"]
    assert {e.name for e in memory.list("ann")} == {"New York City", "USA", "user"}
    with pytest.raises(EntryValidationError):
        memory.merge("ann", "NYC", "New York City")
    assert memory.forget("ann", "New York City") == 2
    assert memory.get("ann", "NYC") is None
    assert count_rows(graph_store, "facts", "ann") == 0
    assert graph.history("ann")[0]["action"] == "forget"


def test_bad_input_writes_nothing(graph_store: MemoryStore) -> None:
    graph = KnowledgeGraph(graph_store)
    bad_calls: list[Callable[[], object]] = [
        lambda: graph.add_fact("ann", "", "p", "o"),
        lambda: graph.add_fact("ann", "s", "  ", "o"),
        lambda: graph.add_fact("ann", "s", "p", "o", confidence=1.5),
        lambda: graph.add_fact("ann", "s", "p", "o", observed_at=datetime(2026, 1, 1)),
        lambda: graph.add_fact("", "s", "p", "o"),
        lambda: graph.neighbors("ann", "s", 0),
    ]
    for call in bad_calls:
        with pytest.raises(EntryValidationError):
            call()
    assert sum(count_rows(graph_store, name) for name in GRAPH_NAMES) == 0
    with pytest.raises(EntryValidationError):
        KnowledgeGraph(MemoryManager().store)


def test_erase_user_removes_the_graph(graph_store: MemoryStore) -> None:
    """MemoryManager.erase_user (the store's erase_user) leaves nothing of the user's graph."""
    manager = MemoryManager(store=graph_store)
    graph = KnowledgeGraph(graph_store)
    for user in ("ann", "bob"):
        manager.add_turn(f"c-{user}", "user", "I moved to Berlin", user_id=user)
        graph.add_fact(user, "user", "lives_in", "Berlin", evidence="t1")
    assert count_rows(graph_store, "history", "ann") > 0
    manager.erase_user("ann")
    for name in GRAPH_NAMES:
        assert count_rows(graph_store, name, "ann") == 0, name
    assert [f.object for f in graph.facts_about("bob", "user")] == ["Berlin"]


def test_concurrent_writers_create_one_entity(graph_store: MemoryStore) -> None:
    """Two threads record the same new entities at once: one row each, mentions counted."""
    names = [f"Place {i}" for i in range(6)]
    extraction = Extraction(entities=[ExtractedEntity(name=n) for n in names])
    graph = KnowledgeGraph(graph_store)
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def write() -> None:
        try:
            barrier.wait()
            graph.record("ann", extraction)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=write) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert count_rows(graph_store, "entities", "ann") == len(names)
    assert {e.mentions for e in graph.entities.list("ann")} == {2}


def test_async_twins(graph_store: MemoryStore) -> None:
    graph = KnowledgeGraph(graph_store)

    async def scenario() -> list[str]:
        await graph.async_add_fact("ann", "user", "lives_in", "Berlin", observed_at=T0)
        await graph.async_record(
            "ann",
            Extraction(triples=[Triple(subject="user", predicate="lives_in", object="Munich")]),
            evidence="t2",
        )
        facts = await graph.async_facts_about("ann", "user")
        entity = await graph.entities.async_get("ann", "munich")
        assert entity is not None
        return [f.object for f in facts]

    assert asyncio.run(scenario()) == ["Munich"]


def test_nul_in_a_name_is_refused(sql_store: SQLAlchemyStore) -> None:
    graph = KnowledgeGraph(sql_store)
    for call in (
        lambda: graph.add_fact("ann", "a\x00b", "p", "o"),
        lambda: graph.add_fact("ann", "s", "p\x00", "o"),
        lambda: graph.record(
            "ann", Extraction(entities=[ExtractedEntity(name="x", aliases=["\x00"])])
        ),
    ):
        with pytest.raises(EntryValidationError):
            call()
    assert sum(_count(sql_store, table) for table in GRAPH_TABLES) == 0


_NAMES = st.text(
    st.characters(codec="utf-8", exclude_characters="\x00"),
    min_size=1,
    max_size=20,
).filter(lambda s: s.strip() != "")


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(name=_NAMES)
def test_any_name_is_found_again_whatever_its_case_and_spacing(tmp_path: Path, name: str) -> None:
    """Names are open-ended text: stored as given (trimmed), matched case-folded."""
    store = SQLiteStore(tmp_path / f"{uuid.uuid4().hex}.sqlite3")
    try:
        graph = KnowledgeGraph(store)
        first = graph.add_fact("ann", name, "is", "thing", observed_at=T0)
        again = graph.add_fact("ann", f"  {name.casefold()} ", "is", "thing", observed_at=T0)
        assert first.fact is not None and again.fact is not None
        assert again.outcome == "confirm" and again.fact.fact_id == first.fact.fact_id
        found = graph.entities.get("ann", name.casefold())
        assert found is not None and found.name == name.strip() and found.mentions == 2
    finally:
        store.close()


def test_a_callers_session_decides(sql_store: SQLAlchemyStore) -> None:
    """Through ``bind_session`` the graph's writes join the caller's transaction (and schema)."""
    from sqlalchemy.orm import Session

    for commit in (False, True):
        with Session(sql_store.engine) as session:
            graph = KnowledgeGraph(sql_store.bind_session(session))
            graph.add_fact("ann", "user", "lives_in", "Berlin", evidence=f"t-{commit}")
            assert [f.object for f in graph.facts_about("ann", "user")] == ["Berlin"]
            if commit:
                session.commit()
            else:
                session.rollback()
        assert _count(sql_store, FACTS, "ann") == int(commit)


def test_two_processes_create_one_entity_each(
    graph_store: MemoryStore, request: pytest.FixtureRequest
) -> None:
    """Another process and this one record the same new entities at once: no duplicate."""
    names = [f"Town {i}" for i in range(4)]
    url, place = place_of(graph_store, request)
    context = forked.context()
    barrier = context.Barrier(2)
    worker = context.Process(target=record_in_a_process, args=(url, place, names, barrier))
    worker.start()
    try:
        record_in_a_process(url, place, names, barrier)
    finally:
        worker.join(timeout=120)
    assert worker.exitcode == 0
    assert count_rows(graph_store, "entities", "ann") == len(names)
    assert {e.mentions for e in KnowledgeGraph(graph_store).entities.list("ann")} == {2}


def test_export_import_round_trip(graph_store: MemoryStore) -> None:
    """A user's graph survives export, erase_user and import: ids, intervals, evidence, history."""
    graph = KnowledgeGraph(graph_store, multi_valued=["likes"])
    said_berlin, said_munich = T0, T0 + timedelta(days=30)
    graph.record(
        "ann",
        Extraction(entities=[ExtractedEntity(name="Munich", type="city", aliases=["München"])]),
        observed_at=said_berlin,
    )
    graph.add_fact("ann", "user", "lives_in", "Berlin", evidence="t1", observed_at=said_berlin)
    graph.add_fact("ann", "user", "lives_in", "Munich", evidence="t2", observed_at=said_munich)
    graph.add_fact("ann", "user", "likes", "jazz", object_is_entity=False, observed_at=said_munich)
    exported = json.loads(json.dumps(graph.export_user("ann")))
    before = graph.history("ann")
    assert graph.users() == ["ann"]

    MemoryManager(store=graph_store).erase_user("ann")
    assert graph.users() == [] and graph.export_user("ann")["facts"] == []
    broken = json.loads(json.dumps(exported))
    broken["facts"][0]["subject_id"] = "nobody"
    with pytest.raises(EntryValidationError, match=r"facts\[0\]"):
        graph.import_user(broken)
    assert count_rows(graph_store, "entities", "ann") == 0  # nothing written

    assert graph.import_user(exported) == 3
    assert graph.export_user("ann") == exported
    (berlin,) = graph.facts_about("ann", "user", as_of=said_berlin + timedelta(days=1))
    assert (berlin.object, berlin.evidence) == ("Berlin", ["t1"])
    assert (berlin.valid_from, berlin.valid_to) == (said_berlin, said_munich)
    munich = graph.entities.get("ann", "münchen")
    assert munich is not None and munich.entity_type == "city"
    assert [(h["action"], h["at"]) for h in graph.history("ann")] == [
        (h["action"], h["at"]) for h in before
    ]
    with pytest.raises(EntryValidationError, match="already"):
        graph.import_user(exported)
    assert count_rows(graph_store, "facts", "ann") == 3
