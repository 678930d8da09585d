"""Store JSON as TEXT on SQLite.

Revision ID: 0003_sqlite_json_as_text
Revises: 0002_key_index_entry_id
Create Date: 2026-11-23

A SQLite column declared ``JSON`` has NUMERIC affinity: a top-level JSON number
such as ``1.0`` was stored as the integer ``1`` and a large integer as a float.
Declared ``TEXT``, the JSON text is kept verbatim.  PostgreSQL (JSONB) is
unchanged.  Values stored before this revision keep whatever SQLite made of
them.

Offline (``alembic upgrade head --sql``) there is no database to reflect the
table from, so the batch copy is given the table exactly as 0002 left it
(``copy_from``): 0001's columns, primary key, check constraints and indexes,
with 0002's ``(namespace, key)`` index.
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from firefly_orm.migrate import revision_schema

revision: str = "0003_sqlite_json_as_text"
down_revision: str | Sequence[str] | None = "0002_key_index_entry_id"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = ("content", "metadata")


def _table_before(json_type: sa.types.TypeEngine[Any], schema: str | None) -> sa.Table:
    """``memory_entries`` as the revision before this one left it (JSON as ``json_type``)."""
    table = sa.Table(
        "memory_entries",
        sa.MetaData(),
        sa.Column("entry_id", sa.String(64), nullable=False),
        sa.Column("namespace", sa.String(), nullable=False),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("key", sa.String(), nullable=True),
        sa.Column("content", json_type, nullable=False),
        sa.Column("metadata", json_type, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("importance", sa.Float(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("entry_id", name="pk_memory_entries"),
        sa.CheckConstraint(
            "importance >= 0.0 AND importance <= 1.0", name="ck_memory_entries_importance_range"
        ),
        sa.CheckConstraint(
            "scope IN ('conversation', 'working', 'long_term')",
            name="ck_memory_entries_scope_values",
        ),
        schema=schema,
    )
    sa.Index(
        "ix_memory_entries_namespace_created",
        table.c.namespace,
        table.c.created_at,
        table.c.entry_id,
    )
    sa.Index(
        "ix_memory_entries_namespace_key",
        table.c.namespace,
        table.c.key,
        table.c.created_at,
        table.c.entry_id,
        sqlite_where=sa.text("key IS NOT NULL"),
    )
    sa.Index(
        "ix_memory_entries_expires_at",
        table.c.expires_at,
        sqlite_where=sa.text("expires_at IS NOT NULL"),
    )
    return table


def _retype(old: sa.types.TypeEngine[Any], new: sa.types.TypeEngine[Any]) -> None:
    context = op.get_context()
    if context.dialect.name != "sqlite":
        return
    schema = revision_schema()
    # Online the table is reflected; offline it is described (nothing to reflect).
    copy_from = _table_before(old, schema) if context.as_sql else None
    with op.batch_alter_table(
        "memory_entries",
        schema=schema,
        recreate="always",
        naming_convention={"ck": "%(constraint_name)s"},
        copy_from=copy_from,
    ) as batch:
        for column in _COLUMNS:
            batch.alter_column(column, type_=new, existing_type=old, existing_nullable=False)


def upgrade() -> None:
    _retype(sa.JSON(), sa.Text())


def downgrade() -> None:
    _retype(sa.Text(), sa.JSON())
