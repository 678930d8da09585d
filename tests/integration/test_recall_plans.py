"""``LongTermMemory.recall`` is an index lookup on every database store (issue 11).

2,000 long-term items are imported through ``LongTermMemory.import_items`` (the
real write path); then ``recall`` runs, sync and async, plain and with each of its
filters, and the very statement or aggregation it sent is explained by the
database:

* SQLite: ``EXPLAIN QUERY PLAN`` reads the FTS5 table first, then one row per
  match by rowid; ``memory_entries`` is never scanned.
* PostgreSQL: ``EXPLAIN`` has a Bitmap Index Scan of the GIN index and no
  sequential scan.
* MongoDB (the SecantusDB test server, or whatever ``mongo_url`` finds): the
  winning plan is an ``IXSCAN`` of the ``(namespace, search_words)`` index, no
  ``COLLSCAN``, and the server examines only the documents of the namespace
  that hold a query word (``executionStats.totalDocsExamined``), however many
  other documents there are.

Deterministic plan and counter assertions only; the latency at 1k / 10k / 100k
entries is the W6 bench row (``bench/recall.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from dbutil import CommandRecorder, describe_plan, drop_schema, plan_nodes
from pymongo import AsyncMongoClient, MongoClient

from firefly_orm._search import PG_SEARCH_INDEX, SQLITE_FTS_TABLE, query_terms, text_terms
from firefly_orm.bridges._loop_thread import shared_loop
from firefly_orm.errors import MissingEngineError
from firefly_orm.long_term import LongTermMemory, Recalled
from firefly_orm.mongo import MongoDBStore
from firefly_orm.mongo._document import SEARCH_INDEX
from firefly_orm.sql import PostgreSQLStore, SQLAlchemyStore, SQLiteStore

NS = "recall-plans"
ITEMS = 2_000
#: Every NEEDLE_EVERY-th item holds the word "needle".
NEEDLE_EVERY = 400
GROUPS = 50
USERS = 3
#: Items of another namespace holding the same words (never part of NS's lookup).
ELSEWHERE = 60


@dataclass(frozen=True)
class Case:
    """One recall: its query and options."""

    query: str
    options: dict[str, Any]


#: ``id -> recall``: plain, each filter, and a query whose word 40 items hold.
CASES = {
    "plain": Case("needle absent", {"limit": 10}),
    "user": Case("needle absent", {"limit": 10, "user_id": "u0"}),
    "importance": Case("needle", {"limit": 10, "min_importance": 0.4}),
    "tags": Case("needle", {"limit": 3, "tags": ["even"]}),
    "group": Case("group7 absent", {"limit": 5}),
}


def _item(i: int) -> dict[str, Any]:
    return {
        "text": f"common item{i} group{i % GROUPS}" + (" needle" if i % NEEDLE_EVERY == 0 else ""),
        "user_id": f"u{i % USERS}",
        "importance": round((i // NEEDLE_EVERY % 7) / 7 + (i % NEEDLE_EVERY) / 10_000, 4),
        "tags": ["even"] if i % 2 == 0 else ["odd"],
    }


DATA = [_item(i) for i in range(ITEMS)]


def _holders(query: str) -> list[dict[str, Any]]:
    """The items of NS holding at least one word of ``query``."""
    words = set(query_terms(query))
    return [item for item in DATA if words & text_terms(item["text"])]


def _expected(case: Case) -> int:
    """How many results ``case`` must return (computed from DATA)."""
    options = case.options
    found = [
        item
        for item in _holders(case.query)
        if options.get("user_id") in (None, item["user_id"])
        and item["importance"] >= options.get("min_importance", 0.0)
        and all(tag in item["tags"] for tag in options.get("tags", ()))
    ]
    return min(len(found), int(options["limit"]))


def _fill(store: Any) -> None:
    LongTermMemory(store=store, namespace=NS).import_items(DATA)
    LongTermMemory(store=store, namespace="elsewhere").import_items(
        [{"text": "needle group7 common"} for _ in range(ELSEWHERE)]
    )


def _recall(store: Any, mode: str, case: Case) -> list[Recalled]:
    memory = LongTermMemory(store=store, namespace=NS)
    if mode == "sync":
        return memory.recall(case.query, **case.options)
    return asyncio.run(memory.async_recall(case.query, **case.options))


# --------------------------------------------------------------------------- SQL


def _captured_recalls(store: SQLAlchemyStore, mode: str, case: Case) -> tuple[list[Any], int]:
    """Run the recall; return the search statements it executed (with parameters) and the hits."""
    marker = "bm25" if store.engine.dialect.name == "sqlite" else "ts_rank"
    engine = store.engine
    if mode == "async":
        with contextlib.suppress(MissingEngineError):  # none: async work runs on store.engine
            engine = store.async_engine.sync_engine
    seen: list[tuple[str, Any]] = []
    executed: list[str] = []

    def capture(conn: Any, cursor: Any, statement: str, params: Any, *rest: Any) -> None:
        executed.append(statement)
        if marker in statement:
            seen.append((statement, params))

    sa.event.listen(engine, "before_cursor_execute", capture)
    try:
        found = _recall(store, mode, case)
    finally:
        sa.event.remove(engine, "before_cursor_execute", capture)
    # The recall is the search statement alone (a filter on tags may add a
    # larger window; none of these cases needs one).
    assert [s for s in executed if s.lstrip().upper().startswith("SELECT")] == [s for s, _ in seen]
    assert len(seen) == 1, executed
    return seen, len(found)


@pytest.fixture(scope="module")
def sqlite_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SQLiteStore]:
    path: Path = tmp_path_factory.mktemp("recall") / "plans.sqlite3"
    store = SQLiteStore(path)
    _fill(store)
    yield store
    store.close()


@pytest.mark.parametrize("case_id", list(CASES))
def test_sqlite_recall_reads_the_fts_index(
    sqlite_store: SQLiteStore, mode: str, case_id: str
) -> None:
    case = CASES[case_id]
    [(statement, params)], hits = _captured_recalls(sqlite_store, mode, case)
    with sqlite_store.engine.connect() as conn:
        plan = [r[-1] for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params)]
    print(f"\nsqlite {mode} recall {case}: {hits} results, plan {plan}")
    assert hits == _expected(case) > 0
    assert plan[0].startswith(f"SCAN {SQLITE_FTS_TABLE} VIRTUAL TABLE INDEX ")
    assert plan[1] == "SEARCH memory_entries USING INTEGER PRIMARY KEY (rowid=?)"
    assert not any(line.split()[:2] == ["SCAN", "memory_entries"] for line in plan)


@pytest.fixture(scope="module")
def pg_store(postgres_url: str) -> Iterator[PostgreSQLStore]:
    schema = "recall_" + uuid.uuid4().hex[:10]
    store = PostgreSQLStore(postgres_url, schema_name=schema)
    try:
        _fill(store)  # import_items refreshes the planner statistics (ANALYZE)
        yield store
    finally:
        store.close()
        drop_schema(postgres_url, schema)


@pytest.mark.postgres
@pytest.mark.parametrize("case_id", list(CASES))
def test_postgres_recall_runs_a_bitmap_scan_of_the_gin_index(
    pg_store: PostgreSQLStore, mode: str, case_id: str
) -> None:
    case = CASES[case_id]
    [(statement, params)], hits = _captured_recalls(pg_store, mode, case)
    nodes = plan_nodes(pg_store.engine, statement, params)
    print(f"\npostgres {mode} recall {case}: {hits} results, plan {describe_plan(nodes)}")
    assert hits == _expected(case) > 0
    assert not any(n["Node Type"] == "Seq Scan" for n in nodes)
    assert any(
        n["Node Type"] == "Bitmap Index Scan" and n.get("Index Name") == PG_SEARCH_INDEX
        for n in nodes
    )


# --------------------------------------------------------------------------- MongoDB


@dataclass
class MongoSetup:
    store: MongoDBStore
    aggregates: CommandRecorder
    raw: MongoClient[dict[str, Any]]
    database: str


@pytest.fixture(scope="module")
def mongo(mongo_url: str) -> Iterator[MongoSetup]:
    aggregates = CommandRecorder("aggregate")

    async def new_client() -> AsyncMongoClient[dict[str, Any]]:
        return AsyncMongoClient(mongo_url, tz_aware=True, event_listeners=[aggregates])

    client = shared_loop().call(new_client())  # born on the loop the store runs its I/O on
    database = "t_" + uuid.uuid4().hex[:10]
    store = MongoDBStore(client=client, database=database)
    raw: MongoClient[dict[str, Any]] = MongoClient(mongo_url, tz_aware=True)
    try:
        _fill(store)
        yield MongoSetup(store, aggregates, raw, database)
    finally:
        store.close()
        shared_loop().call(client.close())
        raw.drop_database(database)
        raw.close()


def _winning_plans(explained: Any) -> list[dict[str, Any]]:
    """Every ``winningPlan`` in an explain answer (rejected plans left out)."""
    found: list[dict[str, Any]] = []
    pending = [explained]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            for name, value in node.items():
                if name == "winningPlan" and isinstance(value, dict):
                    found.append(value)
                elif name != "rejectedPlans":
                    pending.append(value)
        elif isinstance(node, list):
            pending.extend(node)
    return found


def _stages(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """A plan's stages, outermost first (``inputStage`` / ``inputStages``)."""
    stages = [plan]
    for child in [plan.get("inputStage"), *plan.get("inputStages", [])]:
        if isinstance(child, dict):
            stages.extend(_stages(child))
    return stages


def _docs_examined(explained: Any) -> list[int]:
    """Every ``totalDocsExamined`` figure of the answer's execution statistics."""
    figures: list[int] = []
    pending = [explained]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            if isinstance(node.get("totalDocsExamined"), int):
                figures.append(node["totalDocsExamined"])
            pending.extend(v for k, v in node.items() if k != "rejectedPlans")
        elif isinstance(node, list):
            pending.extend(node)
    return figures


@pytest.mark.mongo
@pytest.mark.parametrize("case_id", list(CASES))
def test_mongo_recall_is_an_index_lookup(mongo: MongoSetup, mode: str, case_id: str) -> None:
    case = CASES[case_id]
    mongo.aggregates.sent.clear()
    hits = len(_recall(mongo.store, mode, case))
    assert hits == _expected(case) > 0
    [sent] = mongo.aggregates.sent  # one aggregation per recall
    explained = mongo.raw[mongo.database].command(
        "explain",
        {"aggregate": sent["aggregate"], "pipeline": sent["pipeline"], "cursor": {}},
        verbosity="executionStats",
    )
    plans = _winning_plans(explained)
    stages = [stage for plan in plans for stage in _stages(plan)]
    examined = _docs_examined(explained)
    holders = len(_holders(case.query))
    print(
        f"\nmongo {mode} recall {case}: {hits} results; winning plan stages "
        f"{[s.get('stage') for s in stages]} on {[s.get('indexName') for s in stages]}; "
        f"documents examined {examined} (holding a query word: {holders} of {ITEMS + ELSEWHERE})"
    )
    assert plans, "the server's explain has no winning plan"
    assert not any(s.get("stage") == "COLLSCAN" for s in stages)
    assert any(s.get("stage") == "IXSCAN" and s.get("indexName") == SEARCH_INDEX for s in stages)
    # The deterministic cost: the documents of NS holding a word, not the collection.
    assert examined and max(examined) == holders
