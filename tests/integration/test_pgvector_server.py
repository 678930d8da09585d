"""The pgvector test server: the fixture's URL has pgvector, and a server without it is named."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from pgvector_server import PgvectorUnavailable, ensure_vector_extension


def test_the_fixture_url_has_pgvector_and_an_hnsw_cosine_index_works(pgvector_url: str) -> None:
    assert sa.make_url(pgvector_url).drivername == "postgresql+psycopg"
    engine = sa.create_engine(pgvector_url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as connection:
            connection.execute(sa.text("CREATE TEMPORARY TABLE probe (id int, v vector(3))"))
            connection.execute(sa.text("CREATE INDEX ON probe USING hnsw (v vector_cosine_ops)"))
            connection.execute(
                sa.text("INSERT INTO probe VALUES (1, '[1,0,0]'), (2, '[0,1,0]'), (3, '[1,0.2,0]')")
            )
            ids = connection.execute(
                sa.text("SELECT id FROM probe ORDER BY v <=> '[1,0,0]' LIMIT 2")
            ).scalars()
            assert list(ids) == [1, 3]
    finally:
        engine.dispose()
    # the check is repeatable (IF NOT EXISTS, under an advisory lock)
    assert ensure_vector_extension(pgvector_url).count(".") >= 1


@pytest.mark.postgres
def test_a_server_without_pgvector_is_refused_with_the_reason(postgres_url: str) -> None:
    """The main test server (Debian's PostgreSQL) has pgvector or not; the check tells."""
    engine = sa.create_engine(postgres_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            available = connection.execute(
                sa.text("SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'")
            ).scalar_one()
    finally:
        engine.dispose()
    if available:
        assert ensure_vector_extension(postgres_url)
    else:
        with pytest.raises(PgvectorUnavailable, match="CREATE EXTENSION vector failed"):
            ensure_vector_extension(postgres_url)
