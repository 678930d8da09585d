"""Migration 0007: rows without ``search_text`` stay out of the full-text index.

On SQLite and PostgreSQL (a schema of its own per test), with rows written at
0006 (with and without text) in place:

* 0006 -> 0007 -> 0006 -> 0007 keeps every search answer; the index holds
  exactly the rows with text at 0007 (SQLite: FTS5 documents, checked by FTS5's
  own ``integrity-check`` against its content; PostgreSQL: a vector equal to
  ``firefly_orm_search_vector(language, text)`` on those rows, NULL on the
  others), and 0006's objects come back on the downgrade;
* after the upgrade, writes that set, change or clear the text, deletes of
  rows with and without text (also rows 0006 indexed as empty documents),
  rowid changes (SQLite), language changes and hand-written vectors
  (PostgreSQL) keep the index exact and the answers right;
* a row without text never reaches the index: SQLite counts one changed row
  per statement (0006: the FTS5 writes too), PostgreSQL never calls the
  trigger function;
* the same upgrade and downgrade as offline SQL scripts (``alembic --sql``).

No timing here: the cost figures are measured outside the test suite.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from dbutil import drop_schema

from firefly_orm import migrate
from firefly_orm._search import (
    PG_SEARCH_FUNCTION,
    PG_SEARCH_INDEX,
    PG_SEARCH_TRIGGER_FUNCTION,
    PG_SEARCH_VECTOR,
    SQLITE_FTS_CONTENT_VIEW,
    SQLITE_FTS_TABLE,
    SearchRequest,
)
from firefly_orm.entry import MemoryEntry
from firefly_orm.entry._model import HEAD_ARCHIVED_COLUMN, HEAD_UPDATED_COLUMN
from firefly_orm.sql import _ops as ops
from firefly_orm.sql import _statements as st

REPO = Path(__file__).resolve().parents[2]
BEFORE = "0006_full_text_search"
AFTER = "0007_search_skips_null_text"
#: Entries with text (key -> text, language); the others have none.
TEXTS: dict[str, tuple[str, str | None]] = {
    "t-kiwi": ("kiwi apple", None),
    "t-fruit": ("kiwi banana cherry kiwi", None),
    "t-pie": ("apple pie recipe with a long list of further words", None),
    "t-run": ("the runners were running", "english"),
    "t-empty": ("", None),
}
UNSEARCHABLE = [f"n{i}" for i in range(6)]
#: (query, language) pairs whose answers must not change across the migrations.
QUERIES: list[tuple[str, str | None]] = [
    ("kiwi", None),
    ("apple", None),
    ("banana", None),
    ("kiwi apple", None),
    ("recipe cherry", None),
    ("runs", "english"),
    ("elsewhere", None),
    ("absent", None),
]


@dataclass
class Db:
    """A migrated database: its URL, schema (PostgreSQL) and an engine reaching our table."""

    url: str
    schema: str | None
    engine: sa.Engine

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def migrate_to(self, revision: str) -> None:
        kwargs: dict[str, Any] = {"schema_name": self.schema} if self.schema else {}
        current = migrate.current(self.url, **kwargs)
        order = [None, BEFORE, AFTER]
        if order.index(current) < order.index(revision):
            migrate.upgrade(self.url, revision=revision, **kwargs)
        else:
            migrate.downgrade(self.url, revision, **kwargs)
        assert migrate.current(self.url, **kwargs) == revision


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'search.sqlite3'}"
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        try:
            yield Db(url, None, engine)
        finally:
            engine.dispose()
        return
    url = str(request.getfixturevalue("postgres_url"))
    schema = "fts7_" + uuid.uuid4().hex[:10]
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool).execution_options(
        schema_translate_map={None: schema}
    )
    try:
        yield Db(url, schema, engine)
    finally:
        engine.dispose()
        drop_schema(url, schema)


# --------------------------------------------------------------------------- writes at 0006/0007

#: ``memory_entries`` as 0006 and 0007 left it: without migration 0010's conversation-list
#: columns, which today's store statements always name. The rows here are written with
#: the same statement shapes (insert, upsert on ``entry_id``, compare-and-set update) on
#: that table, so what is tested is the search index's triggers at those revisions.
_LIST_COLUMNS = (HEAD_UPDATED_COLUMN, HEAD_ARCHIVED_COLUMN)
_OLD_TABLE = sa.Table(
    st.TABLE.name,
    sa.MetaData(),
    *(column._copy() for column in st.TABLE.columns if column.name not in _LIST_COLUMNS),
)


def _old_values(namespace: str, entry: MemoryEntry) -> dict[str, Any]:
    values = st.insert_values(namespace, entry)
    for name in _LIST_COLUMNS:
        values.pop(name, None)
    return values


def _save(conn: sa.Connection, namespace: str, entry: MemoryEntry) -> None:
    """``ops.save`` on the 0006/0007 table."""
    dialects = {"postgresql": sa.dialects.postgresql, "sqlite": sa.dialects.sqlite}
    insert = dialects[conn.dialect.name].insert(_OLD_TABLE)
    columns = _OLD_TABLE.c
    update: dict[str, Any] = {
        column.key: insert.excluded[column.key]
        for column in columns
        if column.key not in ("entry_id", "version")
    }
    update["version"] = columns.version + 1
    statement = insert.on_conflict_do_update(index_elements=[columns.entry_id], set_=update)
    conn.execute(statement, _old_values(namespace, entry))


def _save_versioned(
    conn: sa.Connection, namespace: str, entry: MemoryEntry, expected_version: int
) -> None:
    """``ops.save_versioned``'s compare-and-set update on the 0006/0007 table."""
    columns = _OLD_TABLE.c
    values = {**_old_values(namespace, entry), "version": expected_version + 1}
    values.setdefault("search_text", None)
    values.setdefault("search_language", None)
    values.setdefault("user_id", None)
    entry_id = values.pop("entry_id")
    statement = (
        sa.update(_OLD_TABLE)
        .where(
            columns.entry_id == entry_id,
            columns.namespace == namespace,
            columns.version == expected_version,
        )
        .values(values)
    )
    assert conn.execute(statement).rowcount == 1


# --------------------------------------------------------------------------- helpers


def _entry(key: str, text: str | None = None, language: str | None = None) -> MemoryEntry:
    return MemoryEntry(key=key, content={"key": key}, search_text=text, search_language=language)


def _fill(db: Db) -> dict[str, MemoryEntry]:
    """The data set, written at the current revision; entries by key."""
    entries = {key: _entry(key, text, language) for key, (text, language) in TEXTS.items()}
    entries.update({key: _entry(key) for key in UNSEARCHABLE})
    with db.engine.begin() as conn:
        for entry in entries.values():
            _save(conn, "ns", entry)
        _save(conn, "other", _entry("o-text", "kiwi elsewhere"))
        _save(conn, "other", _entry("o-none"))
    return entries


def _search(db: Db, query: str, language: str | None = None, ns: str = "ns") -> list[str | None]:
    """The keys found, best first."""
    request = SearchRequest.build(ns, query, limit=None, language=language)
    with db.engine.connect() as conn:
        return [hit.entry.key for hit in ops.search(conn, request)]


Answers = dict[tuple[str, str, str | None], list[str | None]]


def _answers(db: Db) -> Answers:
    """Every query of QUERIES in both namespaces: ``(namespace, query, language) -> keys``."""
    return {
        (ns, query, language): _search(db, query, language, ns)
        for query, language in QUERIES
        for ns in ("ns", "other")
    }


def _comparable(answers: Answers, dialect: str) -> dict[tuple[str, str, str | None], Any]:
    """The answers as they must stay equal across 0006 and 0007.

    PostgreSQL's ``ts_rank`` reads only the row's vector: the lists, in order.
    SQLite's ``bm25`` weighs the words of a query by the row count and the
    average length of the index, which 0007 no longer inflates with empty
    documents: which rows match stays, the order of rows matching different
    words may not, so for queries of several words the sets.
    """
    if dialect == "postgresql":
        return dict(answers)
    return {
        question: keys if len(question[1].split()) == 1 else set(keys)
        for question, keys in answers.items()
    }


def _expected_answers(texts: dict[str, str | None]) -> dict[str, set[str]]:
    """Per word of the texts: the keys whose text holds it (the English row left out:
    PostgreSQL indexes its stems, without its stop words)."""
    found: dict[str, set[str]] = {}
    for key, text in texts.items():
        for word in (text or "").split() if key != "t-run" else ():
            found.setdefault(word, set()).add(key)
    return found


def _sqlite_state(db: Db) -> tuple[set[int], set[int], set[int]]:
    """(rowids the FTS5 index holds, rowids of rows with text, every rowid); checks FTS5."""
    with db.engine.begin() as conn:
        fts = SQLITE_FTS_TABLE
        conn.exec_driver_sql(f"INSERT INTO {fts}({fts}, rank) VALUES ('integrity-check', 1)")
        indexed = set(conn.exec_driver_sql(f"SELECT id FROM {SQLITE_FTS_TABLE}_docsize").scalars())
        with_text = set(
            conn.exec_driver_sql(
                "SELECT rowid FROM memory_entries WHERE search_text IS NOT NULL"
            ).scalars()
        )
        every = set(conn.exec_driver_sql("SELECT rowid FROM memory_entries").scalars())
    return indexed, with_text, every


def _pg_vectors(db: Db) -> dict[str, tuple[bool, bool]]:
    """Per key: (vector is NULL, vector equals the function of the row's text and language)."""
    function = f'"{db.schema}".{PG_SEARCH_FUNCTION}'
    with db.engine.connect() as conn:
        rows = conn.exec_driver_sql(
            f"SELECT key, {PG_SEARCH_VECTOR} IS NULL, {PG_SEARCH_VECTOR} IS NOT DISTINCT FROM "
            f'{function}(search_language, search_text) FROM "{db.schema}".memory_entries'
        ).all()
    return {key: (is_null, equal) for key, is_null, equal in rows}


def _pg_catalog(db: Db) -> dict[str, Any]:
    with db.engine.connect() as conn:
        generated = conn.execute(
            sa.text(
                "SELECT attgenerated FROM pg_attribute WHERE attrelid = CAST(:t AS regclass) "
                "AND attname = :c AND NOT attisdropped"
            ),
            {"t": f'"{db.schema}".memory_entries', "c": PG_SEARCH_VECTOR},
        ).scalar()
        triggers = set(
            conn.execute(
                sa.text(
                    "SELECT tgname FROM pg_trigger WHERE tgrelid = CAST(:t AS regclass) "
                    "AND NOT tgisinternal"
                ),
                {"t": f'"{db.schema}".memory_entries'},
            ).scalars()
        )
        functions = set(
            conn.execute(
                sa.text(
                    "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                    "WHERE n.nspname = :s"
                ),
                {"s": db.schema},
            ).scalars()
        )
        index = conn.execute(
            sa.text("SELECT indexdef FROM pg_indexes WHERE schemaname = :s AND indexname = :i"),
            {"s": db.schema, "i": PG_SEARCH_INDEX},
        ).scalar()
    return {"generated": generated, "triggers": triggers, "functions": functions, "index": index}


def _assert_index_exact(db: Db, revision: str) -> None:
    """The index holds the rows it should at ``revision`` (and nothing else)."""
    if db.dialect == "sqlite":
        indexed, with_text, every = _sqlite_state(db)
        assert indexed == (with_text if revision == AFTER else every)
        return
    vectors = _pg_vectors(db)
    assert all(equal for _, equal in vectors.values()), vectors
    with db.engine.connect() as conn:
        without_text = set(
            conn.exec_driver_sql(
                f'SELECT key FROM "{db.schema}".memory_entries WHERE search_text IS NULL'
            ).scalars()
        )
    assert {key for key, (is_null, _) in vectors.items() if is_null} == without_text


def _assert_objects(db: Db, revision: str) -> None:
    """The search objects of ``revision`` are there, those of the other revision are not."""
    if db.dialect == "sqlite":
        with db.engine.connect() as conn:
            rows = conn.exec_driver_sql(
                "SELECT type, name, sql FROM sqlite_master WHERE type IN ('view', 'trigger') "
                f"OR name = '{SQLITE_FTS_TABLE}'"
            ).all()
        names = {(kind, name) for kind, name, _ in rows if kind != "table"}
        fts_sql = next(sql for _, name, sql in rows if name == SQLITE_FTS_TABLE)
        triggers = {("trigger", f"{SQLITE_FTS_TABLE}_{e}") for e in ("insert", "delete", "update")}
        if revision == AFTER:
            assert names == {("view", SQLITE_FTS_CONTENT_VIEW), *triggers}
            assert f"content='{SQLITE_FTS_CONTENT_VIEW}'" in fts_sql
            assert all("WHEN" in sql for kind, _, sql in rows if kind == "trigger")
        else:
            assert names == triggers
            assert "content='memory_entries'" in fts_sql
        return
    found = _pg_catalog(db)
    assert "USING gin (search_vector) WITH (fastupdate=off) WHERE (search_vector IS NOT NULL)" in (
        found["index"] or ""
    )
    if revision == AFTER:
        assert found["generated"] == ""
        assert found["triggers"] == {"memory_entries_search_insert", "memory_entries_search_update"}
        assert found["functions"] == {PG_SEARCH_FUNCTION, PG_SEARCH_TRIGGER_FUNCTION}
    else:
        assert found["generated"] == "s"
        assert found["triggers"] == set()
        assert found["functions"] == {PG_SEARCH_FUNCTION}


# --------------------------------------------------------------------------- round trip


def test_round_trip_with_data_keeps_search_answers(db: Db) -> None:
    db.migrate_to(BEFORE)
    _fill(db)
    _assert_objects(db, BEFORE)
    _assert_index_exact(db, BEFORE)
    before = _answers(db)
    assert before[("ns", "kiwi", None)] == ["t-fruit", "t-kiwi"]  # two occurrences first
    assert before[("other", "kiwi", None)] == ["o-text"]
    if db.dialect == "postgresql":
        assert before[("ns", "runs", "english")] == ["t-run"]  # stemmed with the row's language
    print(f"{db.dialect} at 0006: {before}")

    for revision in (AFTER, BEFORE, AFTER):
        db.migrate_to(revision)
        _assert_objects(db, revision)
        _assert_index_exact(db, revision)
        answers = _answers(db)
        if revision == BEFORE:
            assert answers == before  # 0006's index again, scores and all
        else:
            assert _comparable(answers, db.dialect) == _comparable(before, db.dialect)


def test_writes_after_the_upgrade_keep_the_index_exact(db: Db) -> None:
    db.migrate_to(BEFORE)
    entries = _fill(db)  # 0006 indexed the rows without text as empty documents
    db.migrate_to(AFTER)
    texts: dict[str, str | None] = {key: entry.search_text for key, entry in entries.items()}

    def check(step: str) -> None:
        _assert_index_exact(db, AFTER)
        for word, keys in _expected_answers(texts).items():
            assert set(_search(db, word)) == keys, (step, word)
        print(f"{db.dialect}: {step}: index exact")

    with db.engine.begin() as conn:  # an upsert gives a row without text its first text
        _save(conn, "ns", entries["n0"].copy_entry(search_text="zebra kiwi"))
        texts["n0"] = "zebra kiwi"
        current = entries["n1"]  # a compare-and-set UPDATE does too
        _save_versioned(conn, "ns", current.copy_entry(search_text="quokka"), 1)
        texts["n1"] = "quokka"
    check("text set")
    assert _search(db, "zebra") == ["n0"] and _search(db, "quokka") == ["n1"]

    with db.engine.begin() as conn:  # new text; text removed; the empty text removed
        _save(conn, "ns", entries["t-kiwi"].copy_entry(search_text="mango"))
        _save(conn, "ns", entries["t-fruit"].copy_entry(search_text=None))
        _save(conn, "ns", entries["t-empty"].copy_entry(search_text=None))
        texts.update({"t-kiwi": "mango", "t-fruit": None, "t-empty": None})
    check("text changed and cleared")
    assert _search(db, "kiwi") == ["n0"]
    assert _search(db, "banana") == [] and _search(db, "mango") == ["t-kiwi"]

    with db.engine.begin() as conn:  # deletes with and without text; a namespace cleared
        ops.delete(conn, "ns", [entries[k].entry_id for k in ("t-pie", "n2", "n3")])
        ops.clear(conn, "other")
        for key in ("t-pie", "n2", "n3"):
            del texts[key]
    check("deleted")
    assert _search(db, "apple") == [] and _search(db, "elsewhere", ns="other") == []

    if db.dialect == "sqlite":
        with db.engine.begin() as conn:  # rowids rewritten by hand: every row moves
            conn.exec_driver_sql("UPDATE memory_entries SET rowid = rowid + 1000")
        check("rowids moved")
    else:
        _pg_hand_written_vectors(db, entries)
        check("vectors written by hand")

    with db.engine.begin() as conn:  # text back on a row that lost it
        _save(conn, "ns", entries["t-fruit"].copy_entry(search_text="banana"))
        texts["t-fruit"] = "banana"
    check("text set again")
    assert _search(db, "banana") == ["t-fruit"]


def _pg_hand_written_vectors(db: Db, entries: dict[str, MemoryEntry]) -> None:
    """A vector written by hand is recomputed; a language change re-indexes the row."""
    table = f'"{db.schema}".memory_entries'
    bogus = "to_tsvector('simple', 'bogus')"
    with db.engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE {table} SET {PG_SEARCH_VECTOR} = {bogus}")
        conn.exec_driver_sql(
            f"INSERT INTO {table} (entry_id, namespace, scope, content, metadata, created_at, "
            f"importance, version, {PG_SEARCH_VECTOR}) VALUES ('raw', 'raw', 'working', '1', "
            f"'{{}}', now(), 0.5, 1, {bogus})"
        )
    assert _search(db, "bogus") == [] and _search(db, "bogus", ns="raw") == []
    with db.engine.begin() as conn:
        conn.exec_driver_sql(f"DELETE FROM {table} WHERE entry_id = 'raw'")
    assert _search(db, "runs", "english") == ["t-run"]
    with db.engine.begin() as conn:  # "simple" keeps "running" as it is: "runs" misses it
        _save(conn, "ns", entries["t-run"].copy_entry(search_language=None))
    assert _search(db, "runs", "english") == []
    with db.engine.begin() as conn:
        _save(conn, "ns", entries["t-run"])
    assert _search(db, "runs", "english") == ["t-run"]


# --------------------------------------------------------------------------- no index work


def _sqlite_changes(db: Db, statement: Any) -> int:
    """Rows changed by ``statement(conn)``, counting the writes its triggers make."""
    with db.engine.begin() as conn:
        raw = conn.connection.dbapi_connection
        assert isinstance(raw, sqlite3.Connection)
        before = raw.total_changes
        statement(conn)
        return raw.total_changes - before


def _sqlite_write_costs(db: Db) -> dict[str, int]:
    key = "c-" + uuid.uuid4().hex[:6]
    entry = _entry(key)
    return {
        "insert": _sqlite_changes(db, lambda c: _save(c, "ns", entry)),
        "upsert": _sqlite_changes(db, lambda c: _save(c, "ns", entry.copy_entry(content=2))),
        "delete": _sqlite_changes(db, lambda c: ops.delete(c, "ns", [entry.entry_id])),
        "insert with text": _sqlite_changes(db, lambda c: _save(c, "ns", _entry(key, "kiwi"))),
    }


def test_sqlite_rows_without_text_never_reach_the_fts_table(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'changes.sqlite3'}"
    db = Db(url, None, sa.create_engine(url, poolclass=sa.pool.NullPool))
    try:
        db.migrate_to(BEFORE)
        at_0006 = _sqlite_write_costs(db)
        db.migrate_to(AFTER)
        at_0007 = _sqlite_write_costs(db)
    finally:
        db.engine.dispose()
    print(f"rows changed per statement: 0006 {at_0006}, 0007 {at_0007}")
    assert at_0006["insert"] > 1 and at_0006["delete"] > 1  # 0006 wrote empty documents
    assert at_0007 == {**at_0007, "insert": 1, "upsert": 1, "delete": 1}
    assert at_0007["insert with text"] == at_0006["insert with text"] > 1


@pytest.mark.postgres
def test_postgres_rows_without_text_never_call_the_trigger_function(postgres_url: str) -> None:
    schema = "fts7_" + uuid.uuid4().hex[:10]
    engine = sa.create_engine(postgres_url, poolclass=sa.pool.NullPool).execution_options(
        schema_translate_map={None: schema}
    )
    db = Db(postgres_url, schema, engine)
    try:
        db.migrate_to(AFTER)
        calls = []
        for text in (None, None, "kiwi", None):
            with engine.begin() as conn:
                conn.exec_driver_sql("SET LOCAL track_functions = 'pl'")
                entry = _entry("k" + uuid.uuid4().hex[:6], text)
                _save(conn, "ns", entry)  # an insert
                _save(conn, "ns", entry.copy_entry(content=2))  # an upsert
                ops.delete(conn, "ns", [entry.entry_id])
                calls.append(
                    conn.execute(
                        sa.text(
                            "SELECT COALESCE(sum(calls), 0) FROM pg_stat_xact_user_functions "
                            "WHERE schemaname = :s AND funcname = :f"
                        ),
                        {"s": schema, "f": PG_SEARCH_TRIGGER_FUNCTION},
                    ).scalar_one()
                )
        # With text: the insert, and the upsert's proposed row (BEFORE INSERT
        # triggers run before the conflict is found; the update keeps the text).
        assert [int(n) for n in calls] == [0, 0, 2, 0]
    finally:
        engine.dispose()
        drop_schema(postgres_url, schema)


@pytest.mark.postgres
def test_postgres_trigger_works_under_any_search_path(postgres_url: str) -> None:
    """Migrated without a schema name (objects in the session's schema), written to from
    sessions whose search_path does not name that schema."""
    schema = "fts7_" + uuid.uuid4().hex[:10]
    drop_schema(postgres_url, schema)
    url = sa.engine.make_url(postgres_url).update_query_dict({"options": f"-csearch_path={schema}"})
    elsewhere = sa.create_engine(postgres_url, poolclass=sa.pool.NullPool).execution_options(
        schema_translate_map={None: schema}
    )
    try:
        with elsewhere.begin() as conn:
            conn.execute(sa.schema.CreateSchema(schema))
        migrate.upgrade(url.render_as_string(hide_password=False))
        db = Db(postgres_url, schema, elsewhere)
        with elsewhere.begin() as conn:
            assert conn.exec_driver_sql("SHOW search_path").scalar() != schema
            _save(conn, "ns", _entry("k", "kiwi"))
        assert _search(db, "kiwi") == ["k"]
        _assert_objects(db, AFTER)
        _assert_index_exact(db, AFTER)
    finally:
        elsewhere.dispose()
        drop_schema(postgres_url, schema)


# --------------------------------------------------------------------------- offline


def _offline_script(url: str, schema: str | None, *args: str) -> str:
    exe = Path(sys.executable).with_name("alembic")
    x_args = ["-x", f"url={url}"] + (["-x", f"schema={schema}"] if schema else [])
    result = subprocess.run(
        [str(exe), *x_args, *args, "--sql"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("FIREFLY_AGENTIC_")},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _run_script(db: Db, script: str) -> None:
    """Run an offline script as a DBA would (its own BEGIN/COMMIT)."""
    if db.dialect == "sqlite":
        path = sa.engine.make_url(db.url).database
        assert path is not None
        raw = sqlite3.connect(path, isolation_level=None)
        try:
            raw.executescript(script)
        finally:
            raw.close()
        return
    import psycopg

    conninfo = sa.engine.make_url(db.url).set(drivername="postgresql")
    with psycopg.connect(conninfo.render_as_string(hide_password=False), autocommit=True) as conn:
        conn.execute(script.encode())


def test_offline_scripts_upgrade_and_downgrade(db: Db) -> None:
    db.migrate_to(BEFORE)
    _fill(db)
    before = _answers(db)
    up = _offline_script(db.url, db.schema, "upgrade", f"{BEFORE}:{AFTER}")
    down = _offline_script(db.url, db.schema, "downgrade", f"{AFTER}:{BEFORE}")
    if db.schema is not None:
        assert "ALTER TABLE memory_entries" not in up + down  # the schema is always named
    _run_script(db, up)
    kwargs: dict[str, Any] = {"schema_name": db.schema} if db.schema else {}
    assert migrate.current(db.url, **kwargs) == AFTER
    _assert_objects(db, AFTER)
    _assert_index_exact(db, AFTER)
    assert _comparable(_answers(db), db.dialect) == _comparable(before, db.dialect)
    _run_script(db, down)
    assert migrate.current(db.url, **kwargs) == BEFORE
    _assert_objects(db, BEFORE)
    _assert_index_exact(db, BEFORE)
    assert _answers(db) == before
