"""pgvector's ``hnsw.ef_search``: the library's default on each connection, more for large limits.

pgvector's own default (40) found 0.88-0.91 of the exact 10 nearest at 100k
items in bench W8; a store with vectors sets
:data:`~firefly_orm.vector._spec.DEFAULT_EF_SEARCH` on each connection, and a
search of more hits than it serves sets ``limit * EF_SEARCH_PER_HIT`` for
itself and puts the default back (also when the search fails).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from firefly_orm import migrate
from firefly_orm.entry import MemoryEntry
from firefly_orm.sql import PostgreSQLStore
from firefly_orm.sql._vectors import ef_search_for, vector_search
from firefly_orm.uow import unit_of_work_for
from firefly_orm.vector import EmbeddingSpec
from firefly_orm.vector._spec import DEFAULT_EF_SEARCH, MAX_EF_SEARCH, VectorRequest

pytestmark = pytest.mark.pgvector

NS = "long_term:ef"
SPEC = EmbeddingSpec("test:ef", 256)  # an HNSW-indexed size


def test_ef_search_for_a_limit() -> None:
    assert DEFAULT_EF_SEARCH >= 100
    assert ef_search_for(None) is None
    assert ef_search_for(10) is None
    assert ef_search_for(40) is None
    assert ef_search_for(41) == 164
    assert ef_search_for(10_000) == MAX_EF_SEARCH


@pytest.fixture
def store(pgvector_url: str) -> Iterator[PostgreSQLStore]:
    schema = f"v_{uuid.uuid4().hex[:10]}"
    opened = PostgreSQLStore(pgvector_url, schema_name=schema, vectors=True, pool_min_size=0)
    try:
        yield opened
    finally:
        opened.close()
        migrate.downgrade(pgvector_url, "base", schema_name=schema)


def test_a_large_limit_sets_ef_search_for_its_search_alone(store: PostgreSQLStore) -> None:
    vectors = {f"e{n:02d}": [1.0 + n] + [0.0] * 254 + [float(n % 3)] for n in range(50)}
    with unit_of_work_for(store) as uow:
        for entry_id in vectors:
            uow.entries.save(NS, MemoryEntry(entry_id=entry_id, content=entry_id))
        uow.entries.save_vectors(NS, SPEC, vectors)  # type: ignore[attr-defined]
        uow.commit()
    sent: list[tuple[str, Any]] = []

    def capture(_c: Any, _cur: Any, statement: str, params: Any, *_: Any) -> None:
        if "set_config" in statement:
            sent.append((statement, params))

    sa.event.listen(store.engine, "before_cursor_execute", capture)
    try:
        with store.engine.connect() as conn:
            conn = conn.execution_options(schema_translate_map={None: store.schema_name})

            def run(stmt: Any, params: Any) -> Any:
                return conn.execute(stmt, params)

            def setting() -> str:
                return str(conn.exec_driver_sql("SHOW hnsw.ef_search").scalar_one())

            assert setting() == str(DEFAULT_EF_SEARCH)
            query = [1.0] * 256
            assert len(vector_search(run, "postgresql", VectorRequest.build(NS, query, SPEC))) == 10
            assert sent == []  # the default serves a limit of 10
            request = VectorRequest.build(NS, query, SPEC, limit=60)
            assert len(vector_search(run, "postgresql", request)) == 50
            assert [p["ef"] for _, p in sent] == ["240", str(DEFAULT_EF_SEARCH)]
            assert setting() == str(DEFAULT_EF_SEARCH)
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", capture)
