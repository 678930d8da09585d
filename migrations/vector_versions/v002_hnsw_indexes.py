"""PostgreSQL: HNSW indexes (cosine) on ``memory_vectors``, one per common vector size.

Revision ID: v002_hnsw_indexes
Revises: v001_memory_vectors
Create Date: 2026-11-28

An HNSW index needs vectors of one fixed size, and ``memory_vectors`` holds
every namespace's vectors, of the sizes their models make.  So one partial
expression index per size: ``ix_memory_vectors_hnsw_<n>`` on
``(embedding::vector(<n>)) vector_cosine_ops WHERE dimensions = <n>``, for
the sizes of :data:`SIZES` (:data:`firefly_orm.vector._spec.HNSW_DIMENSIONS`
names the same ones for the searches, which cast to ``vector(<n>)`` to match
the index).  An empty partial index costs nothing; a write updates only the
index of its size.  Vectors of another size are searched exactly.

The searches rely on pgvector's iterative index scans (0.8.0 and later:
``hnsw.iterative_scan = strict_order``, set on each connection of a store
built with ``vectors=True``), so a filtered search keeps scanning the index
until the limit is filled instead of returning fewer hits than exist; this
revision refuses an older pgvector (``ALTER EXTENSION vector UPDATE``).

SQLite: nothing (sqlite-vec has no approximate index; the scan is exact).
"""

from collections.abc import Sequence

from alembic import op

from firefly_orm.migrate._vectors import require_pgvector_version, vector_schema
from firefly_orm.vector._spec import VECTOR_TABLE

revision: str = "v002_hnsw_indexes"
down_revision: str | Sequence[str] | None = "v001_memory_vectors"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The indexed sizes (literal: a revision never changes; a later one adds sizes).
SIZES = (256, 384, 512, 768, 1024, 1536)


def _quoted(name: str) -> str:
    preparer = op.get_context().dialect.identifier_preparer
    schema = vector_schema()
    quoted = preparer.quote(name)
    return quoted if schema is None else f"{preparer.quote_schema(schema)}.{quoted}"


def upgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    extension = require_pgvector_version(op.get_bind(), (0, 8, 0))
    for size in SIZES:
        op.execute(
            f"CREATE INDEX ix_memory_vectors_hnsw_{size} ON {_quoted(VECTOR_TABLE)} "
            f"USING hnsw ((embedding::{extension}.vector({size})) "
            f"{extension}.vector_cosine_ops) WHERE dimensions = {size}"
        )


def downgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    for size in SIZES:
        op.execute(f"DROP INDEX {_quoted(f'ix_memory_vectors_hnsw_{size}')}")
