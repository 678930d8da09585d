"""Create memory_entries.

Revision ID: 0001_memory_entries
Revises:
Create Date: 2026-11-23

Tables are created without a schema; the migration environment applies the
store's schema with ``schema_translate_map``, so the same revision serves every
schema name (and SQLite, which has none).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from firefly_orm.migrate import revision_schema

revision: str = "0001_memory_entries"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = ("firefly_orm",)
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    schema = revision_schema()
    if schema is not None:
        op.execute(sa.schema.CreateSchema(schema, if_not_exists=True))
    op.create_table(
        "memory_entries",
        sa.Column("entry_id", sa.String(64), nullable=False),
        sa.Column("namespace", sa.String(), nullable=False),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("key", sa.String(), nullable=True),
        sa.Column("content", _JSON, nullable=False),
        sa.Column("metadata", _JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("importance", sa.Float(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("entry_id", name="pk_memory_entries"),
        sa.CheckConstraint(
            "importance >= 0.0 AND importance <= 1.0",
            name=op.f("ck_memory_entries_importance_range"),
        ),
        sa.CheckConstraint(
            "scope IN ('conversation', 'working', 'long_term')",
            name=op.f("ck_memory_entries_scope_values"),
        ),
        schema=schema,
    )
    op.create_index(
        "ix_memory_entries_namespace_created",
        "memory_entries",
        ["namespace", "created_at", "entry_id"],
        schema=schema,
    )
    op.create_index(
        "ix_memory_entries_namespace_key",
        "memory_entries",
        ["namespace", "key", "created_at"],
        postgresql_where=sa.text("key IS NOT NULL"),
        sqlite_where=sa.text("key IS NOT NULL"),
        schema=schema,
    )
    op.create_index(
        "ix_memory_entries_expires_at",
        "memory_entries",
        ["expires_at"],
        postgresql_where=sa.text("expires_at IS NOT NULL"),
        sqlite_where=sa.text("expires_at IS NOT NULL"),
        schema=schema,
    )


def downgrade() -> None:
    schema = revision_schema()
    for index in (
        "ix_memory_entries_expires_at",
        "ix_memory_entries_namespace_key",
        "ix_memory_entries_namespace_created",
    ):
        op.drop_index(index, table_name="memory_entries", schema=schema)
    op.drop_table("memory_entries", schema=schema)
