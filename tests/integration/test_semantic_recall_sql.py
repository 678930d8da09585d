"""Semantic and hybrid recall on the SQL stores: SQLite with sqlite-vec, PostgreSQL with pgvector.

Every test runs on both (``vector_store``): a ``SQLiteStore(vectors=True)`` in
a temporary file, and a ``PostgreSQLStore(vectors=True)`` in a schema of its
own on the pgvector server (``pgvector_url``).  The embedder is the
deterministic :class:`~firefly_orm.testing.embeddings.ConceptEmbeddingModel`,
whose vectors mean something (shared words, stems and concepts).  The main
PostgreSQL of the tests has no pgvector: the last tests check the refusal there.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal, cast

import pytest
import sqlalchemy as sa
from cli_runner import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai.embeddings import Embedder
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from firefly_orm import migrate
from firefly_orm.config import MemorySettings
from firefly_orm.entry import utcnow
from firefly_orm.errors import EntryValidationError, MigrationRequiredError
from firefly_orm.long_term import LongTermMemory
from firefly_orm.manager import MemoryManager
from firefly_orm.protocols import VectorRepository
from firefly_orm.sql import PostgreSQLStore, SQLAlchemyStore, SQLiteStore
from firefly_orm.testing.embeddings import ConceptEmbeddingModel, concept_vector
from firefly_orm.vector import EmbeddingMismatchError, EmbeddingSpec, VectorUnavailableError

CONTACT = "the customer prefers email over phone calls"
OTHERS = ("the invoice is due on Friday", "she lives in Lisbon", "the cat sleeps all day")
QUESTION = "how should we contact her?"
NAMESPACE = "long-term"


def _schema() -> str:
    return f"vec_{uuid.uuid4().hex[:10]}"


@pytest.fixture(params=["sqlite", "pgvector"])
def vector_store(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[SQLAlchemyStore]:
    """A SQL store that keeps vectors, on SQLite and on PostgreSQL with pgvector."""
    if request.param == "sqlite":
        store: SQLAlchemyStore = SQLiteStore(tmp_path / "vectors.sqlite3", vectors=True)
        yield store
        store.close()
        return
    url = request.getfixturevalue("pgvector_url")
    schema = _schema()
    store = PostgreSQLStore(url, schema_name=schema, vectors=True, pool_min_size=0)
    try:
        yield store
    finally:
        store.close()
        migrate.downgrade(url, "base", schema_name=schema)


def _memory(store: SQLAlchemyStore, **kwargs: Any) -> LongTermMemory:
    return LongTermMemory(store=store, embedder=ConceptEmbeddingModel(), **kwargs)


def _vector_rows(store: SQLAlchemyStore) -> int:
    table = sa.table("memory_vectors", schema=store.schema_name)
    with store.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())


@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
def test_recalled_by_meaning(
    vector_store: SQLAlchemyStore, mode: Literal["semantic", "hybrid"]
) -> None:
    ltm = _memory(vector_store, user_id="ada")
    for text in (*OTHERS, CONTACT):
        ltm.remember(text)
    # No word of the question is in the item: text recall cannot find it.
    assert [r.item.text for r in ltm.recall(QUESTION, mode="text")] == []
    found = ltm.recall(QUESTION, mode=mode, limit=2)
    assert found[0].item.text == CONTACT
    assert ltm.recall(QUESTION)[0].item.text == CONTACT  # hybrid is the default


def test_async_forms_embed_and_recall(vector_store: SQLAlchemyStore) -> None:
    ltm = _memory(vector_store, user_id="ada")

    async def scenario() -> list[str]:
        for text in (*OTHERS, CONTACT):
            await ltm.async_remember(text)
        return [r.item.text for r in await ltm.async_recall(QUESTION, mode="semantic", limit=1)]

    assert asyncio.run(scenario()) == [CONTACT]


def test_hybrid_ranks_a_word_match_and_a_meaning_match(vector_store: SQLAlchemyStore) -> None:
    ltm = _memory(vector_store)
    ltm.remember("call the supplier about the late invoice")
    ltm.remember("the customer prefers email over phone calls")
    ltm.remember("lunch is at noon")
    texts = [r.item.text for r in ltm.recall("phone the supplier", limit=3)]
    # Both the item sharing words and the one sharing the concept outrank lunch.
    assert texts[-1] == "lunch is at noon"
    fused = ltm.recall("phone the supplier", limit=3)
    assert [r.score for r in fused] == sorted((r.score for r in fused), reverse=True)


def test_filters_apply_inside_the_scan(vector_store: SQLAlchemyStore) -> None:
    ltm = _memory(vector_store)
    # Twenty nearer items of another user and kind: a filter after a LIMIT would find none.
    for i in range(20):
        ltm.remember(f"{CONTACT} {i}", user_id="bob", tags=["crm"])
    ltm.remember("reach her by e-mail, never by phone", user_id="ada", tags=["crm", "vip"])
    ltm.remember("the phone bill is paid", user_id="ada", tags=["bills"], kind="episodic")
    for mode in ("semantic", "hybrid"):
        found = ltm.recall(QUESTION, mode=mode, limit=1, user_id="ada", tags=["vip"])
        assert [r.item.text for r in found] == ["reach her by e-mail, never by phone"]
        episodic = ltm.recall(QUESTION, mode=mode, limit=5, user_id="ada", kind="episodic")
        assert [r.item.text for r in episodic] == ["the phone bill is paid"]
        assert ltm.recall(QUESTION, mode=mode, user_id="ada", min_importance=0.9) == []


HOSTILE = (
    "'; DROP TABLE memory_vectors; --",
    '" OR 1=1 --',
    "$1 :q ::vector <=> ?",
    "json_each(content) ') OR ('1'='1",
    "\\'\\\" %s %(q)s",
)


def test_hostile_queries_and_filters_stay_values(vector_store: SQLAlchemyStore) -> None:
    ltm = _memory(vector_store)
    ltm.remember(OTHERS[0], tags=["plain"])
    for hostile in HOSTILE:
        ltm.remember(CONTACT, tags=[hostile], key=hostile)
    for hostile in (*HOSTILE, "\x00 nul"):
        for mode in ("text", "semantic", "hybrid"):
            ltm.recall(hostile, mode=mode)
    for hostile in HOSTILE:
        found = ltm.recall(QUESTION, mode="semantic", tags=[hostile])
        assert [r.item.key for r in found] == [hostile]
        assert ltm.recall(QUESTION, mode="hybrid", kind="episodic", tags=[hostile]) == []
    assert _vector_rows(vector_store) == 1 + len(HOSTILE)


@pytest.fixture(scope="module")
def sqlite_vectors(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path_factory.mktemp("hostile") / "v.sqlite3", vectors=True)
    yield store
    store.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    query=st.text(max_size=40),
    tag=st.text(min_size=1, max_size=30).filter(lambda t: "\x00" not in t),
)
def test_any_query_and_tag_stay_values(sqlite_vectors: SQLiteStore, query: str, tag: str) -> None:
    ltm = _memory(sqlite_vectors, namespace="hostile")
    ltm.clear()
    ltm.remember(CONTACT, tags=[tag], key="tagged")
    ltm.remember(OTHERS[0], tags=[tag + "x"])
    for mode in ("text", "semantic", "hybrid"):
        ltm.recall(query, mode=mode)
    found = ltm.recall(QUESTION, mode="semantic", tags=[tag])
    assert [r.item.key for r in found] == ["tagged"]


def test_deletes_leave_no_vector_behind(vector_store: SQLAlchemyStore) -> None:
    ltm = _memory(vector_store)
    forgotten = ltm.remember(CONTACT, user_id="ada")
    ltm.remember(OTHERS[0], user_id="ada")
    ltm.remember(OTHERS[1], user_id="bob")
    ltm.remember(OTHERS[2], user_id="cy", expires_at=utcnow() + timedelta(milliseconds=1))
    other = _memory(vector_store, namespace="long-term-2")
    other.remember(CONTACT)
    assert _vector_rows(vector_store) == 5
    assert ltm.forget(forgotten, user_id="ada")
    assert _vector_rows(vector_store) == 4
    ltm.clear(user_id="ada")
    assert _vector_rows(vector_store) == 3
    with vector_store.unit_of_work() as uow:
        uow.entries.erase_user("bob")
        uow.commit()
    assert _vector_rows(vector_store) == 2
    assert vector_store.cleanup_expired() == 1
    assert _vector_rows(vector_store) == 1
    other.clear()
    assert _vector_rows(vector_store) == 0


def test_changed_text_is_embedded_again(vector_store: SQLAlchemyStore) -> None:
    ltm = _memory(vector_store, user_id="ada")
    ltm.remember(OTHERS[0], key="note")
    ltm.remember(CONTACT, key="note")  # an upsert: the old vector goes, the new one is stored
    assert _vector_rows(vector_store) == 1
    assert ltm.recall(QUESTION, mode="semantic")[0].item.text == CONTACT
    # A writer without an embedder changes the text: the stale vector goes with it.
    LongTermMemory(store=vector_store, user_id="ada").remember(OTHERS[1], key="note")
    assert _vector_rows(vector_store) == 0
    assert ltm.recall(QUESTION, mode="semantic") == []
    assert [r.item.text for r in ltm.recall("Lisbon")] == [OTHERS[1]]


def test_mixing_models_is_refused(vector_store: SQLAlchemyStore) -> None:
    ltm = _memory(vector_store)
    ltm.remember(CONTACT)
    other = LongTermMemory(
        store=vector_store, embedder=ConceptEmbeddingModel(model_name="another-model")
    )
    with pytest.raises(EmbeddingMismatchError, match="another-model") as refused:
        other.remember(OTHERS[0])
    assert refused.value.stored.model.endswith(ConceptEmbeddingModel().model_name)
    assert ltm.count() == 1  # nothing written: neither the item nor its vector
    with pytest.raises(EmbeddingMismatchError):
        other.recall(QUESTION, mode="semantic")
    smaller = LongTermMemory(store=vector_store, embedder=ConceptEmbeddingModel(dimensions=64))
    with pytest.raises(EmbeddingMismatchError, match="64 dimensions"):
        smaller.import_items([{"text": OTHERS[1]}])
    assert ltm.count() == 1 and _vector_rows(vector_store) == 1


def test_import_embeds_in_batches(vector_store: SQLAlchemyStore) -> None:
    ltm = _memory(vector_store)
    items = [{"text": f"{OTHERS[i % 3]} {i}"} for i in range(70)] + [{"text": CONTACT}]
    ids = ltm.import_items(items)  # 71 texts: two embedding requests of at most 64
    assert len(ids) == 71 and _vector_rows(vector_store) == 71
    assert ltm.recall(QUESTION, mode="semantic", limit=1)[0].item.text == CONTACT


def test_analyze_refreshes_the_vector_tables_statistics(pgvector_url: str) -> None:
    """After a bulk import the planner must not take the vector table for empty."""
    schema = _schema()
    store = PostgreSQLStore(pgvector_url, schema_name=schema, vectors=True, pool_min_size=0)
    try:
        _memory(store).import_items([{"text": f"{OTHERS[i % 3]} {i}"} for i in range(30)])
        count = sa.text(
            "SELECT analyze_count + autoanalyze_count FROM pg_stat_user_tables "
            "WHERE schemaname = :schema AND relname = :table"
        )

        def analyzed(table: str) -> int:
            with store.engine.connect() as conn:
                found = conn.execute(count, {"schema": schema, "table": table}).scalar_one()
                return int(found)

        before = analyzed("memory_vectors")
        assert store.analyze() is True
        assert analyzed("memory_vectors") == before + 1
        assert asyncio.run(store.async_analyze()) is True
        assert analyzed("memory_vectors") == before + 2
    finally:
        store.close()
        migrate.downgrade(pgvector_url, "base", schema_name=schema)


def test_the_manager_passes_its_embedder(vector_store: SQLAlchemyStore) -> None:
    manager = MemoryManager(store=vector_store, embedder=ConceptEmbeddingModel())
    ada = manager.for_user("ada")
    ada.long_term.remember(CONTACT)
    assert ada.long_term.recall(QUESTION, mode="semantic")[0].item.text == CONTACT


def test_vector_migration_down_and_up(vector_store: SQLAlchemyStore) -> None:
    vector_store.initialize()
    url, schema = vector_store.engine.url, vector_store.schema_name
    with vector_store.engine.connect() as conn:
        assert migrate.vectors_current(conn, schema_name=schema) == migrate.vector_head()
        assert sa.inspect(conn).has_table("memory_vectors", schema=schema)
    vector_store.close()
    engine = sa.create_engine(url.render_as_string(hide_password=False), poolclass=sa.pool.NullPool)
    try:
        migrate.downgrade_vectors(engine, "base", schema_name=schema)
        with engine.connect() as conn:
            assert migrate.vectors_current(conn, schema_name=schema) is None
            inspector = sa.inspect(conn)
            assert not inspector.has_table("memory_vectors", schema=schema)
            assert not inspector.has_table("firefly_orm_vector_alembic_version", schema=schema)
        assert migrate.current(engine, schema_name=schema) == migrate.head()  # entries stay
        # A store that may not migrate refuses, and says how to migrate.
        refusing = SQLAlchemyStore(engine=engine, schema_name=schema, vectors=True)
        with pytest.raises(MigrationRequiredError, match="migrate --vectors"):
            refusing.initialize()
        migrate.upgrade_vectors(engine, schema_name=schema)
        assert migrate.vectors_current(engine, schema_name=schema) == migrate.vector_head()
    finally:
        engine.dispose()


def test_a_store_without_vectors_refuses_an_embedder(tmp_path: Any) -> None:
    store = SQLiteStore(tmp_path / "plain.sqlite3")
    try:
        ltm = _memory(store)
        with pytest.raises(VectorUnavailableError, match="vectors=True"):
            ltm.remember(CONTACT)
        assert LongTermMemory(store=store).count() == 0  # nothing written
        with pytest.raises(EntryValidationError, match="needs an embedder"):
            LongTermMemory(store=store).recall(QUESTION, mode="semantic")
    finally:
        store.close()


def test_from_config_with_an_embedding_model(tmp_path: Any) -> None:
    settings = MemorySettings(
        backend="sqlite",
        sqlite_path=str(tmp_path / "configured.sqlite3"),
        embedding_model="openai:text-embedding-3-small",
    )
    manager = MemoryManager.from_config(settings)
    store = manager.store
    assert isinstance(store, SQLAlchemyStore)
    try:
        assert store.vectors
        assert migrate.vectors_current(store.engine) == migrate.vector_head()
        embedder = manager.long_term.embedder
        assert isinstance(embedder, Embedder) and embedder.model == settings.embedding_model

        async def offline() -> str:
            # The configured model stands in for the network one (pydantic-ai's override).
            with embedder.override(model=ConceptEmbeddingModel()):
                await manager.long_term.async_remember(CONTACT)
                found = await manager.long_term.async_recall(QUESTION, mode="semantic")
            return found[0].item.text

        assert asyncio.run(offline()) == CONTACT
    finally:
        store.close()


def test_cli_migrates_the_vector_tables(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'cli.sqlite3'}"
    done = run_cli("migrate", "--vectors", "--url", url)
    assert done.returncode == 0, done.stderr
    assert f"vector tables upgraded (none) -> {migrate.vector_head()}" in done.stdout
    undone = run_cli("downgrade", "--vectors", "base", "--url", url)
    assert undone.returncode == 0, undone.stderr
    assert migrate.vectors_current(url) is None and migrate.current(url) == migrate.head()


def test_pgvector_walks_the_hnsw_index_and_fills_a_filtered_limit(pgvector_url: str) -> None:
    """A 384-dimension model's search can walk its HNSW index; iterative scans fill the limit."""
    schema = _schema()
    store = PostgreSQLStore(pgvector_url, schema_name=schema, vectors=True, pool_min_size=0)
    try:
        ltm = LongTermMemory(store=store, embedder=ConceptEmbeddingModel(dimensions=384))
        # Sixty of bob's items nearer the question than ada's only one (about a cat).
        items = [{"text": f"{CONTACT} {i}", "user_id": "bob"} for i in range(60)]
        ltm.import_items([*items, {"text": OTHERS[2], "user_id": "ada"}])
        spec = EmbeddingSpec(f"firefly_orm:{ConceptEmbeddingModel().model_name}", 384)
        vector = concept_vector(QUESTION, 384)
        seen: list[tuple[str, Any]] = []

        def capture(conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
            if "memory_vectors" in statement and "ORDER BY" in statement:
                seen.append((statement, params))

        sa.event.listen(store.engine, "before_cursor_execute", capture)

        def search(iterative: str) -> tuple[list[str], str]:
            with store.unit_of_work() as uow:
                conn = cast(Connection, uow.target)
                # The planner may pick the exact scan on a table this small; make it walk.
                for setting in ("enable_seqscan", "enable_bitmapscan", "enable_sort"):
                    conn.execute(sa.text(f"SET LOCAL {setting} = off"))
                conn.execute(sa.text(f"SET LOCAL hnsw.iterative_scan = {iterative}"))
                conn.execute(sa.text("SET LOCAL hnsw.ef_search = 10"))
                entries = cast(VectorRepository, uow.entries)
                hits = entries.vector_search(NAMESPACE, vector, spec, limit=1, user_id="ada")
                statement, params = seen[-1]
                plan = conn.exec_driver_sql("EXPLAIN " + statement, params).scalars().all()
            return [hit.entry.user_id or "" for hit in hits], "\n".join(plan)

        # The store sets iterative scans on each of its connections (sync and async).
        with store.engine.connect() as conn:
            assert conn.execute(sa.text("SHOW hnsw.iterative_scan")).scalar() == "strict_order"

        async def shown() -> Any:
            async with store.async_engine.connect() as conn:
                return (await conn.execute(sa.text("SHOW hnsw.iterative_scan"))).scalar()

        assert asyncio.run(shown()) == "strict_order"
        found, plan = search("strict_order")
        assert "ix_memory_vectors_hnsw_384" in plan, plan
        assert found == ["ada"]
        # Without iterative scans the walk stops at ef_search (10) rows, all bob's: lost.
        lost, plan = search("off")
        assert lost == [], plan
    finally:
        store.close()
        migrate.downgrade(pgvector_url, "base", schema_name=schema)


def test_a_session_bound_store_keeps_vectors_in_the_callers_transaction(
    pgvector_url: str,
) -> None:
    schema = _schema()
    store = PostgreSQLStore(pgvector_url, schema_name=schema, vectors=True, pool_min_size=0)
    engine = sa.create_engine(pgvector_url, poolclass=sa.pool.NullPool)
    try:
        store.initialize()
        with Session(engine) as session:
            joined = store.bind_session(session)
            ltm = LongTermMemory(store=joined, embedder=ConceptEmbeddingModel())
            ltm.remember(CONTACT)
            assert ltm.recall(QUESTION, mode="semantic")[0].item.text == CONTACT
            session.rollback()  # the caller's rollback takes the item and its vector
        assert LongTermMemory(store=store).count() == 0
        assert _vector_rows(store) == 0
    finally:
        engine.dispose()
        store.close()
        migrate.downgrade(pgvector_url, "base", schema_name=schema)


def test_the_indexed_sizes_are_the_migrations() -> None:
    from firefly_orm.vector._spec import HNSW_DIMENSIONS

    revision = Path(migrate.script_location()) / "vector_versions" / "v002_hnsw_indexes.py"
    assert f"SIZES = {HNSW_DIMENSIONS!r}" in revision.read_text(encoding="utf-8")


# --------------------------------------------------------------------------- no pgvector


def test_postgres_without_pgvector_says_how_and_the_rest_works(postgres_url: str) -> None:
    """The main test server has no pgvector: the vector migration is refused, nothing else."""
    schema = _schema()
    store = PostgreSQLStore(postgres_url, schema_name=schema, vectors=True, pool_min_size=0)
    plain = PostgreSQLStore(postgres_url, schema_name=schema, pool_min_size=0)
    try:
        with pytest.raises(VectorUnavailableError, match="pgvector") as refused:
            store.initialize()
        assert "install pgvector" in str(refused.value)
        assert migrate.vectors_current(postgres_url, schema_name=schema) is None
        with plain.engine.connect() as conn:
            assert not sa.inspect(conn).has_table("memory_vectors", schema=schema)
        text_only = LongTermMemory(store=plain, user_id="ada")
        text_only.remember(CONTACT)
        assert [r.item.text for r in text_only.recall("phone calls")] == [CONTACT]
        done = run_cli("migrate", "--vectors", "--url", postgres_url, "--schema", schema)
        assert done.returncode != 0 and "pgvector" in done.stderr
    finally:
        store.close()
        plain.close()
        migrate.downgrade(postgres_url, "base", schema_name=schema)


def test_embedding_spec_is_checked() -> None:
    with pytest.raises(EntryValidationError):
        EmbeddingSpec("", 3)
    with pytest.raises(EntryValidationError):
        EmbeddingSpec("m", 0)
