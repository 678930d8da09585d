"""The knowledge graph's traversals are index lookups at every hop (issue 30).

One user owns a graph of a probe cluster (a hub, 5 neighbours, 4 leaves each)
and a background of :data:`BACKGROUND` facts, loaded with the library's bulk
writer (``GraphRows.load``).  ``neighbors(hub, 2)``, ``paths(hub, leaf, 2)``
and ``facts_about(hub)`` run, and every statement they sent is explained by
the database:

* SQLite (no ``ANALYZE``, as the library leaves it): each hop reads
  ``knowledge_facts`` by a MULTI-INDEX OR of the subject and object indexes,
  never by ``ix_knowledge_facts_user`` (every fact of the user) and never by a
  scan; entities are read by key.
* PostgreSQL (after ``ANALYZE``): ``knowledge_facts`` is read by its subject
  and object indexes, never sequentially; with ``enable_seqscan = off`` no
  statement has a Seq Scan left (each entity read can be served by an index
  too: at a few thousand rows the planner may rightly prefer a scan).
* MongoDB: the walk is one ``$graphLookup`` whose ``connectToField`` is
  ``ends``, the first key of an index of the facts collection.

Deterministic plan assertions only; the latency at 10k / 100k / 1M edges is
the W9 bench row (``bench/graph.py``).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from dbutil import CommandRecorder, describe_plan, drop_schema, walk_plan
from pymongo import AsyncMongoClient, MongoClient

from firefly_orm.bridges._loop_thread import shared_loop
from firefly_orm.knowledge import KnowledgeGraph
from firefly_orm.knowledge._mongo import MongoRows
from firefly_orm.knowledge._rows import SqlRows
from firefly_orm.mongo import MongoDBStore
from firefly_orm.sql import PostgreSQLStore, SQLAlchemyStore, SQLiteStore

USER = "plans"
FAN = 5
BACKGROUND = 3_000
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _rows() -> dict[str, list[dict[str, Any]]]:
    """The graph: the cluster around ``hub``, then random facts among other entities."""
    rng = random.Random(30)

    def entity(name: str) -> dict[str, Any]:
        return {
            "entity_id": uuid.UUID(int=rng.getrandbits(128)).hex,
            "user_id": USER,
            "name": name,
            "norm_name": name,
            "entity_type": "thing",
            "attributes": {},
            "aliases": [],
            "mentions": 1,
            "created_at": T0,
            "updated_at": T0,
        }

    def fact(subject: str, obj: str | None, *, closed: bool = False) -> dict[str, Any]:
        start = T0 + timedelta(seconds=rng.randrange(10**6))
        return {
            "fact_id": uuid.UUID(int=rng.getrandbits(128)).hex,
            "user_id": USER,
            "subject_id": subject,
            "predicate": "knows" if obj else "trait",
            "object_id": obj,
            "object_value": None if obj else "value",
            "valid_from": start,
            "valid_to": start + timedelta(days=1) if closed else None,
            "evidence": [],
            "confidence": 1.0,
            "created_at": start,
        }

    hub = entity("hub")
    entities, facts = [hub], [fact(hub["entity_id"], None)]
    for m in range(FAN):
        mid = entity(f"mid {m}")
        entities.append(mid)
        facts.append(fact(hub["entity_id"], mid["entity_id"]))
        for n in range(FAN - 1):
            leaf = entity(f"leaf {m} {n}")
            entities.append(leaf)
            facts.append(fact(mid["entity_id"], leaf["entity_id"]))
    others = [entity(f"entity {n}") for n in range(BACKGROUND // 4)]
    entities.extend(others)
    for _ in range(BACKGROUND):
        subject = others[rng.randrange(len(others))]["entity_id"]
        obj = others[rng.randrange(len(others))]["entity_id"] if rng.random() < 0.8 else None
        facts.append(fact(subject, obj, closed=rng.random() < 0.1))
    return {"entities": entities, "facts": facts, "history": []}


ROWS = _rows()


def _traverse(graph: KnowledgeGraph) -> None:
    """The three traversals, each checked against the cluster."""
    near = graph.neighbors(USER, "hub", 2)
    assert sorted(d for _, d in near) == [1] * FAN + [2] * FAN * (FAN - 1)
    [path] = graph.paths(USER, "hub", "leaf 2 1", 2)
    assert [f.object for f in path] == ["mid 2", "leaf 2 1"]
    assert len(graph.facts_about(USER, "hub")) == FAN + 1


def _load_sql(store: SQLAlchemyStore) -> None:
    store.initialize()
    with store.engine.begin() as conn:
        SqlRows(conn).load(ROWS)


def _captured(store: SQLAlchemyStore) -> list[tuple[str, Any]]:
    """The graph's SELECT statements the traversals sent, with their parameters."""
    seen: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, params: Any, *rest: Any) -> None:
        if "knowledge_" in statement and statement.lstrip().upper().startswith(("SELECT", "WITH")):
            seen.append((statement, params))

    sa.event.listen(store.engine, "before_cursor_execute", capture)
    try:
        _traverse(KnowledgeGraph(store))
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", capture)
    assert sum(s.lstrip().upper().startswith("WITH RECURSIVE") for s, _ in seen) == 2
    return seen


# --------------------------------------------------------------------------- SQLite


@pytest.fixture(scope="module")
def sqlite_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SQLiteStore]:
    path: Path = tmp_path_factory.mktemp("graph") / "plans.sqlite3"
    store = SQLiteStore(path)
    _load_sql(store)
    yield store
    store.close()


def test_sqlite_hops_search_the_subject_and_object_indexes(sqlite_store: SQLiteStore) -> None:
    seen = _captured(sqlite_store)
    with sqlite_store.engine.connect() as conn:
        for statement, params in seen:
            plan = [
                str(r[-1]) for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params)
            ]
            print(f"\n{statement.split(chr(10))[0][:60]}...: {plan}")
            facts = [line for line in plan if " knowledge_facts " in f"{line} "]
            assert not any(line.startswith("SCAN knowledge_") for line in plan), plan
            assert not any("ix_knowledge_facts_user" in line for line in plan), plan
            if statement.lstrip().upper().startswith("WITH RECURSIVE"):
                assert "MULTI-INDEX OR" in plan, plan
                assert any("ix_knowledge_facts_subject (subject_id=?)" in line for line in facts)
                assert any("ix_knowledge_facts_object (object_id=?)" in line for line in facts)


# --------------------------------------------------------------------------- PostgreSQL


@pytest.fixture(scope="module")
def pg_store(postgres_url: str) -> Iterator[PostgreSQLStore]:
    schema = "graph_" + uuid.uuid4().hex[:10]
    store = PostgreSQLStore(postgres_url, schema_name=schema)
    try:
        _load_sql(store)
        with store.engine.begin() as conn:
            conn.exec_driver_sql(
                f'ANALYZE "{schema}".knowledge_entities, "{schema}".knowledge_facts'
            )
        yield store
    finally:
        store.close()
        drop_schema(postgres_url, schema)


def _pg_plan(store: PostgreSQLStore, statement: str, params: Any, *, seqscan: bool) -> list[Any]:
    with store.engine.connect() as conn, conn.begin() as transaction:
        if not seqscan:
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
        plan = conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + statement, params).scalar_one()
        transaction.rollback()
    return walk_plan(plan)


@pytest.mark.postgres
def test_postgres_hops_use_the_subject_and_object_indexes(pg_store: PostgreSQLStore) -> None:
    for statement, params in _captured(pg_store):
        nodes = _pg_plan(pg_store, statement, params, seqscan=True)
        print(f"\n{statement.split(chr(10))[0][:60]}...: {describe_plan(nodes)}")
        on_facts = [n for n in nodes if n.get("Relation Name") == "knowledge_facts"]
        if "knowledge_facts" in statement:
            assert on_facts and not any(n["Node Type"] == "Seq Scan" for n in on_facts)
        used = {n.get("Index Name") for n in nodes}
        if statement.lstrip().upper().startswith("WITH RECURSIVE"):
            assert {"ix_knowledge_facts_subject", "ix_knowledge_facts_object"} <= used, used
        assert "ix_knowledge_facts_user" not in used
        forced = _pg_plan(pg_store, statement, params, seqscan=False)
        assert not any(n["Node Type"] == "Seq Scan" for n in forced), describe_plan(forced)


# --------------------------------------------------------------------------- MongoDB


@pytest.mark.mongo
def test_mongo_graph_lookup_connects_on_an_indexed_field(mongo_url: str) -> None:
    aggregates = CommandRecorder("aggregate")

    async def new_client() -> AsyncMongoClient[dict[str, Any]]:
        return AsyncMongoClient(mongo_url, tz_aware=True, event_listeners=[aggregates])

    client = shared_loop().call(new_client())  # born on the loop the store runs its I/O on
    database = "t_" + uuid.uuid4().hex[:10]
    store = MongoDBStore(client=client, database=database)
    raw: MongoClient[dict[str, Any]] = MongoClient(mongo_url, tz_aware=True)
    try:
        store.initialize()
        cluster = 1 + FAN * FAN  # the hub's cluster: as many entities as facts
        small = {**ROWS, "entities": ROWS["entities"][:cluster], "facts": ROWS["facts"][:cluster]}
        MongoRows(store).load(small)
        _traverse(KnowledgeGraph(store))
        lookups = [
            stage["$graphLookup"]
            for command in aggregates.sent
            for stage in command["pipeline"]
            if "$graphLookup" in stage
        ]
        assert len(lookups) == 2  # neighbors and paths
        facts = raw[database][f"{store.collection_name}.kg_facts"]
        first_keys = {next(iter(index["key"])) for index in facts.list_indexes()}
        for lookup in lookups:
            assert lookup["from"] == facts.name
            assert lookup["connectToField"] == "ends" and "ends" in first_keys, first_keys
    finally:
        store.close()
        shared_loop().call(client.close())
        raw.drop_database(database)
        raw.close()
