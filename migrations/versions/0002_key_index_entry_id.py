"""Add entry_id to the (namespace, key) index.

Revision ID: 0002_key_index_entry_id
Revises: 0001_memory_entries
Create Date: 2026-11-23

``load_by_key`` orders by ``(created_at, entry_id)`` and listing by key prefix
orders by ``(key, created_at, entry_id)``.  With ``entry_id`` in the index both
are served in index order; without it SQLite preferred walking the namespace's
rows by creation time, so a head lookup grew with the conversation's length.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from firefly_orm.migrate import revision_schema

revision: str = "0002_key_index_entry_id"
down_revision: str | Sequence[str] | None = "0001_memory_entries"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _create(columns: list[str]) -> None:
    op.create_index(
        "ix_memory_entries_namespace_key",
        "memory_entries",
        columns,
        postgresql_where=sa.text("key IS NOT NULL"),
        sqlite_where=sa.text("key IS NOT NULL"),
        schema=revision_schema(),
    )


def upgrade() -> None:
    op.drop_index(
        "ix_memory_entries_namespace_key", table_name="memory_entries", schema=revision_schema()
    )
    _create(["namespace", "key", "created_at", "entry_id"])


def downgrade() -> None:
    op.drop_index(
        "ix_memory_entries_namespace_key", table_name="memory_entries", schema=revision_schema()
    )
    _create(["namespace", "key", "created_at"])
