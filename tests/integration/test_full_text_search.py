"""Full-text search on the SQL stores: the index stays exact, the plans use it, languages.

* A random workload through every write path (upserts that change or keep the
  text, versioned inserts and updates, moves between namespaces, deletes,
  clears, erase_user, cleanup_expired, SQLite's VACUUM) keeps the index exact
  and its answers equal to a tokenised scan of the stored rows.  SQLite: the
  FTS5 external-content index holds exactly the rows with text (FTS5's
  ``integrity-check`` against its content, the rowids); PostgreSQL: every
  row's vector is the search function of its text, NULL without text.
* The plans at 10,000 rows: SQLite reads the FTS5 table and looks rows up by
  rowid; PostgreSQL runs a Bitmap Index Scan on the GIN index (before and after
  ANALYZE).  Deterministic plan assertions, no timing.
* PostgreSQL: per-entry text-search configurations, the largest accepted text,
  a stop-word-only query, an unknown configuration refused with nothing written,
  and a search inside a caller's Session on an engine that knows nothing of the
  store's schema.
"""

from __future__ import annotations

import contextlib
import json
import random
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from dbutil import describe_plan, drop_schema, plan_nodes
from sqlalchemy.orm import Session

from firefly_orm import migrate
from firefly_orm._search import (
    PG_SEARCH_FUNCTION,
    PG_SEARCH_INDEX,
    PG_SEARCH_VECTOR,
    SQLITE_FTS_TABLE,
    SQLITE_FTS_TABLES,
    SearchRequest,
    match_entries,
)
from firefly_orm.entry import MAX_SEARCH_TEXT_LENGTH, MemoryEntry, utcnow
from firefly_orm.errors import StoreError
from firefly_orm.sql import PostgreSQLStore, SQLAlchemyStore, SQLiteStore

PLAN_ROWS = 10_000
NEEDLE_EVERY = 500
#: ``(search options, whether PostgreSQL's plan must read the GIN index)``.
#: Without filters the GIN index is read, with statistics or without; with
#: filters that keep most rows, once ANALYZE has counted them (a table without
#: statistics looks tiny); a selective filter (a thousand keys) may drive the
#: plan through its own B-tree index instead, which is the cheaper plan.  Never
#: a sequential scan.  SQLite always reads the FTS5 table first.
PLAN_CASES: list[tuple[dict[str, Any], bool]] = [
    ({}, True),
    ({"user_id": "u1", "key_prefix": "k", "min_importance": 0.1}, True),
    ({"user_id": "u1", "key_prefix": "k00"}, False),
]
VOCABULARY = [f"w{i}" for i in range(40)]


def _ids(hits: Any) -> set[str]:
    return {hit.entry.entry_id for hit in hits}


def _integrity_check(store: SQLAlchemyStore) -> None:
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            f"INSERT INTO {SQLITE_FTS_TABLE}({SQLITE_FTS_TABLE}, rank) "
            "VALUES ('integrity-check', 1)"
        )


def _assert_index_answers_like_a_scan(store: SQLAlchemyStore, namespaces: list[str]) -> int:
    """Every probe word: the index's matches == a tokenised scan of the live rows."""
    checked = 0
    with store.unit_of_work(read_only=True) as uow:
        for namespace in namespaces:
            rows = store.load(namespace)
            for word in [*VOCABULARY[::4], "absent"]:
                expected = match_entries(rows, SearchRequest.build(namespace, word, limit=None))
                found = uow.entries.search(namespace, word, limit=None)
                assert _ids(found) == _ids(expected), (namespace, word)
                checked += 1
    return checked


def _text(rng: random.Random) -> str | None:
    if rng.random() < 0.2:
        return None
    return " ".join(rng.choice(VOCABULARY) for _ in range(rng.randrange(1, 6)))


def _every_write_path(
    store: SQLAlchemyStore, index_exact: Callable[[], None], vacuum: Callable[[], None]
) -> None:
    """A random workload through every write path; after each phase ``index_exact()``
    and the index's answers == a tokenised scan of the live rows."""
    rng = random.Random(11)
    namespaces = ["ns-a", "ns-b"]
    entries: list[MemoryEntry] = []
    checks = 0
    deadline = utcnow() + timedelta(milliseconds=300)

    def check(phase: str) -> None:
        nonlocal checks
        index_exact()
        checks += _assert_index_answers_like_a_scan(store, namespaces)
        print(f"{phase}: {sum(len(store.load(ns)) for ns in namespaces)} live rows, index exact")

    for i in range(300):
        entry = MemoryEntry(
            key=f"k{i}",
            search_text=_text(rng),
            user_id=rng.choice(["ann", "bob", None]),
            expires_at=deadline if i % 25 == 0 else None,
        )
        store.save(rng.choice(namespaces), entry)
        entries.append(entry)
    check("inserted")
    for entry in rng.sample(entries, 120):  # upserts: new text, same text, text removed
        change = rng.random()
        text = entry.search_text if change < 0.3 else _text(rng)
        store.save(entry.namespace or "ns-a", entry.copy_entry(search_text=text, content=change))
    for entry in rng.sample(entries, 30):  # moves (ON CONFLICT DO UPDATE of the namespace)
        store.save(rng.choice(namespaces), entry.copy_entry(search_text=_text(rng)))
    check("upserted and moved")
    with store.unit_of_work() as uow:
        for namespace in namespaces:
            for current in uow.entries.list(namespace, limit=20):
                uow.entries.save(
                    namespace,
                    current.copy_entry(search_text=_text(rng)),
                    expected_version=current.version,
                )
            uow.entries.save(namespace, MemoryEntry(search_text="w1 w2"), expected_version=0)
        uow.commit()
    check("versioned writes")
    for namespace in namespaces:
        for current in store.load(namespace)[:15]:
            store.delete(namespace, current.entry_id)
    with store.unit_of_work() as uow:
        uow.entries.erase_user("bob")
        uow.commit()
    check("deleted and erased")
    time.sleep(max(0.0, (deadline - utcnow()).total_seconds()) + 0.01)
    assert store.cleanup_expired() > 0
    vacuum()
    check("expired cleaned up, vacuumed")
    store.clear("ns-a")
    check("cleared")
    print(f"{checks} index-vs-scan comparisons")


def test_sqlite_fts_index_stays_exact_through_every_write_path(tmp_path: Path) -> None:
    path = tmp_path / "fts.sqlite3"
    store = SQLiteStore(path)

    def index_exact() -> None:
        _integrity_check(store)  # the index == its content, the rows with text
        with store.engine.connect() as conn:
            docsize = f"SELECT id FROM {SQLITE_FTS_TABLE}_docsize"
            indexed = set(conn.exec_driver_sql(docsize).scalars())
            with_text = set(
                conn.exec_driver_sql(
                    "SELECT rowid FROM memory_entries WHERE search_text IS NOT NULL"
                ).scalars()
            )
        assert indexed == with_text  # rows without text are not in the index

    def vacuum() -> None:
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as raw:
            raw.execute("VACUUM")  # it keeps the rowids the index refers to

    _every_write_path(store, index_exact, vacuum)
    store.close()


@pytest.mark.postgres
def test_postgres_vectors_stay_exact_through_every_write_path(pg_store: PostgreSQLStore) -> None:
    table = f'"{pg_store.schema_name}".memory_entries'
    function = f'"{pg_store.schema_name}".{PG_SEARCH_FUNCTION}'

    def index_exact() -> None:
        with pg_store.engine.connect() as conn:
            wrong = conn.exec_driver_sql(
                f"SELECT count(*) FROM {table} WHERE {PG_SEARCH_VECTOR} "
                f"IS DISTINCT FROM {function}(search_language, search_text)"
            ).scalar_one()
            unindexed = conn.exec_driver_sql(
                f"SELECT count(*) FROM {table} WHERE search_text IS NULL "
                f"AND {PG_SEARCH_VECTOR} IS NOT NULL"
            ).scalar_one()
        assert (wrong, unindexed) == (0, 0)

    _every_write_path(pg_store, index_exact, lambda: None)


# --------------------------------------------------------------------------- plans


def _fill(store: SQLAlchemyStore) -> None:
    """PLAN_ROWS rows over two namespaces; every NEEDLE_EVERY-th has the word "needle"."""
    rng = random.Random(5)
    with store.unit_of_work() as uow:
        for i in range(PLAN_ROWS):
            words = " ".join(f"word{rng.randrange(2000)}" for _ in range(8))
            uow.entries.save(
                "ns" if i % 2 else "other",
                MemoryEntry(
                    key=f"k{i:05d}",
                    search_text=words + (" needle" if i % NEEDLE_EVERY == 1 else ""),
                    user_id="u1" if i % 3 else None,
                ),
            )
        uow.commit()


def _expected_hits(options: dict[str, Any]) -> int:
    """How many rows of "ns" hold "needle" and pass the filters of ``options``."""
    prefix = options.get("key_prefix", "")
    return sum(
        1
        for i in range(PLAN_ROWS)
        if i % NEEDLE_EVERY == 1
        and i % 2
        and (i % 3 or "user_id" not in options)
        and f"k{i:05d}".startswith(prefix)
    )


def _captured_search(store: SQLAlchemyStore, **options: Any) -> tuple[str, Any, int]:
    """Run a search; return the statement and parameters it executed, and the hit count."""
    seen: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, params: Any, *rest: Any) -> None:
        if "needle" in json.dumps(params, default=str):
            seen.append((statement, params))

    sa.event.listen(store.engine, "before_cursor_execute", capture)
    try:
        with store.unit_of_work(read_only=True) as uow:
            hits = uow.entries.search("ns", "needle", limit=None, **options)
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", capture)
    [(statement, params)] = seen
    return statement, params, len(hits)


def test_sqlite_search_reads_the_fts_index(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "plan.sqlite3")
    _fill(store)
    for analyzed in (False, True):
        if analyzed:
            with store.engine.begin() as conn:
                conn.exec_driver_sql("ANALYZE")
        for options, _ in PLAN_CASES:
            statement, params, hits = _captured_search(store, **options)
            with store.engine.connect() as conn:
                plan = [
                    r[-1] for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params)
                ]
            print(f"sqlite, {PLAN_ROWS} rows, analyzed={analyzed}, {options}: {hits} hits, {plan}")
            assert hits == _expected_hits(options) > 0
            # Always the FTS5 table first (CROSS JOIN), then one rowid lookup per match.
            assert plan[0].startswith(f"SCAN {SQLITE_FTS_TABLE} VIRTUAL TABLE INDEX ")
            assert plan[1] == "SEARCH memory_entries USING INTEGER PRIMARY KEY (rowid=?)"
            assert not any(line.split()[:2] == ["SCAN", "memory_entries"] for line in plan)
    store.close()


@pytest.fixture
def pg_store(postgres_url: str) -> Iterator[PostgreSQLStore]:
    schema = "fts_" + uuid.uuid4().hex[:10]
    store = PostgreSQLStore(postgres_url, schema_name=schema)
    try:
        yield store
    finally:
        store.close()
        drop_schema(postgres_url, schema)


@pytest.mark.postgres
def test_postgres_search_runs_a_bitmap_scan_of_the_gin_index(pg_store: PostgreSQLStore) -> None:
    _fill(pg_store)
    for analyzed in (False, True):
        if analyzed:
            assert pg_store.analyze()
        for options, text_index_drives in PLAN_CASES:
            statement, params, hits = _captured_search(pg_store, **options)
            nodes = plan_nodes(pg_store.engine, statement, params)
            print(f"postgres, {PLAN_ROWS} rows, analyzed={analyzed}, {options}: {hits} hits")
            print(f"  {describe_plan(nodes)}")
            assert hits == _expected_hits(options) > 0
            assert not any(n["Node Type"] == "Seq Scan" for n in nodes)
            if text_index_drives and (analyzed or not options):
                assert any(
                    n["Node Type"] == "Bitmap Index Scan" and n.get("Index Name") == PG_SEARCH_INDEX
                    for n in nodes
                )


# --------------------------------------------------------------------------- PostgreSQL specifics


def _keys(store: SQLAlchemyStore, query: str, **options: Any) -> list[str | None]:
    with store.unit_of_work(read_only=True) as uow:
        return [hit.entry.key for hit in uow.entries.search("ns", query, **options)]


@pytest.mark.postgres
def test_postgres_indexes_each_entry_with_its_language(pg_store: PostgreSQLStore) -> None:
    pg_store.save(
        "ns", MemoryEntry(key="en", search_text="She was running", search_language="english")
    )
    pg_store.save("ns", MemoryEntry(key="simple", search_text="She was running"))
    pg_store.save("ns", MemoryEntry(key="de", search_text="Die Häuser", search_language="german"))
    assert _keys(pg_store, "runs", language="english") == ["en"]  # stemmed: run
    assert _keys(pg_store, "runs") == []  # simple: "runs" is not "running"
    assert set(_keys(pg_store, "running")) == {"simple"}  # simple query: "running" as it is
    assert _keys(pg_store, "Haus", language="german") == ["de"]
    assert _keys(pg_store, "the was", language="english") == []  # only stop words: no error


@pytest.mark.postgres
def test_postgres_refuses_an_unknown_configuration(pg_store: PostgreSQLStore) -> None:
    with pytest.raises(StoreError, match="klingon"):
        pg_store.save("ns", MemoryEntry(key="k", search_text="x", search_language="klingon"))
    assert pg_store.load("ns") == []
    pg_store.save("ns", MemoryEntry(key="k", search_text="qapla"))
    with (
        pytest.raises(StoreError, match="klingon"),
        pg_store.unit_of_work(read_only=True) as uow,
    ):
        uow.entries.search("ns", "qapla", language="klingon")
    assert _keys(pg_store, "qapla") == ["k"]


@pytest.mark.postgres
def test_postgres_indexes_the_largest_text_of_distinct_four_byte_words(
    pg_store: PostgreSQLStore,
) -> None:
    # Distinct one-letter words of CJK Extension B (4 bytes each in UTF-8): the
    # largest tsvector an accepted search_text can produce.
    words = [chr(0x20000 + i) for i in range(MAX_SEARCH_TEXT_LENGTH // 2)]
    text = " ".join(words) + "."
    assert len(text) == MAX_SEARCH_TEXT_LENGTH
    pg_store.save("ns", MemoryEntry(key="big", search_text=text))
    with pg_store.engine.connect() as conn:
        table = f'"{pg_store.schema_name}".memory_entries'
        size = conn.exec_driver_sql(f"SELECT pg_column_size(search_vector) FROM {table}").scalar()
    print(
        f"postgres: {len(text)} characters, {len(set(text.split()))} words -> tsvector {size} bytes"
    )
    assert size is not None and size < 1_048_576
    assert _keys(pg_store, words[-1]) == ["big"]


@pytest.mark.postgres
def test_postgres_search_in_a_callers_session(postgres_url: str, pg_store: PostgreSQLStore) -> None:
    pg_store.save("ns", MemoryEntry(key="k", search_text="shared transaction"))
    engine = sa.create_engine(postgres_url, poolclass=sa.pool.NullPool)  # no schema map
    try:
        with Session(engine) as session:
            with pg_store.unit_of_work(session=session) as uow:
                uow.entries.save("ns", MemoryEntry(key="mine", search_text="shared session"))
                assert {h.entry.key for h in uow.entries.search("ns", "shared")} == {"k", "mine"}
                uow.commit()
            session.rollback()  # the caller's rollback undoes the unit of work
        assert _keys(pg_store, "shared") == ["k"]
    finally:
        engine.dispose()


# --------------------------------------------------------------------------- host autogenerate


def test_host_autogenerate_ignores_the_fts_tables(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'host.sqlite3'}"
    migrate.upgrade(url)
    host = sa.MetaData()
    sa.Table("host_orders", host, sa.Column("id", sa.Integer, primary_key=True))
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            for option, hook in (
                ("include_name", migrate.include_name),
                ("include_object", migrate.include_object),
            ):
                ctx = MigrationContext.configure(conn, opts={option: hook})
                diff = compare_metadata(ctx, host)
                assert [op[0] for op in diff] == ["add_table"], diff
            unfiltered = repr(compare_metadata(MigrationContext.configure(conn), host))
    finally:
        engine.dispose()
    assert all(name in unfiltered for name in SQLITE_FTS_TABLES)
    for name in SQLITE_FTS_TABLES:
        assert migrate.include_name(name, "table", {}) is False
    assert migrate.include_name("memory_entries_fts_extra", "table", {}) is True
