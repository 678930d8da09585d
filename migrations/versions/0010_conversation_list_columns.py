"""The conversation list on plain columns: a head's update time and archived flag.

Revision ID: 0010_conversation_list_columns
Revises: 0009_conversation_listing
Create Date: 2026-11-28

Migration 0009 indexed a user's conversation heads through expressions over
their JSON content.  SQLite could not have them: it does not mark its JSON
functions innocuous, so such an index makes the file unreadable to a
connection with ``PRAGMA trusted_schema = OFF``; there the newest-changed
order sorted every head of the user, and the archived flag was checked row by
row.  This revision gives both databases the same layout, over plain columns:

* ``head_updated_at`` (text): a conversation head's ``updated_at`` (the same
  ISO-8601 string as its content, ``''`` when it has none); NULL on every
  other row.
* ``head_archived`` (boolean): the head's ``archived`` flag; NULL elsewhere.

The SQL store writes both from the head's content in the statement that
writes the head (:func:`firefly_orm.sql._statements.entry_values`, and the
one-statement turn appends), so they never need a statement of their own.
Two partial indexes over the heads (``WHERE head_updated_at IS NOT NULL``:
no other row pays for them), now in the SQLAlchemy model:

* ``ix_memory_entries_head_updated (user_id, head_archived, head_updated_at, entry_id)``
* ``ix_memory_entries_head_created (user_id, head_archived, created_at, entry_id)``

PostgreSQL takes the same columns rather than keeping 0009's expression
indexes: one statement and one layout for both dialects, no index expression
that must match the query's text, and the columns are written there anyway.
0009's indexes are dropped.  Existing heads are backfilled from their content
(one ``UPDATE`` of the heads).

Downgrade drops the new indexes and columns (SQLite: ``ALTER TABLE ... DROP
COLUMN``, SQLite 3.35 or newer, which keeps the full-text triggers that a
table copy would drop) and recreates 0009's indexes.
"""

import sqlite3
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from firefly_orm.migrate import revision_schema

revision: str = "0010_conversation_list_columns"
down_revision: str | Sequence[str] | None = "0009_conversation_listing"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "memory_entries"
UPDATED_COLUMN = "head_updated_at"
ARCHIVED_COLUMN = "head_archived"
UPDATED = "ix_memory_entries_head_updated"
CREATED = "ix_memory_entries_head_created"
HEADS = "key = 'head' AND namespace LIKE 'conversation:%'"
#: The backfill's values per dialect: (updated_at as text or '', archived as a boolean).
BACKFILL = {
    "postgresql": (
        "CASE WHEN jsonb_typeof(content -> 'updated_at') = 'string' "
        "THEN content ->> 'updated_at' ELSE '' END",
        "COALESCE(content -> 'archived' = 'true'::jsonb, false)",
    ),
    # Nested: the JSON functions see valid JSON only (they raise on anything else).
    "sqlite": (
        "COALESCE(CASE WHEN json_valid(content) THEN CASE WHEN "
        "json_type(content, '$.updated_at') = 'text' THEN json_extract(content, '$.updated_at') "
        "END END, '')",
        "COALESCE(CASE WHEN json_valid(content) THEN CASE WHEN "
        "json_type(content, '$.archived') = 'true' THEN 1 END END, 0)",
    ),
}
# Migration 0009's indexes, recreated by the downgrade (as 0009 made them).
OLD_UPDATED = "ix_memory_entries_conv_updated"
OLD_CREATED = "ix_memory_entries_conv_created"
OLD_ARCHIVED = "COALESCE(content ->> 'archived', 'false')"
OLD_UPDATED_AT = "COALESCE(content ->> 'updated_at', '')"


def _table_schema() -> str | None:
    # ADD/DROP COLUMN do not follow schema_translate_map: name the schema.
    return revision_schema() or op.get_context().version_table_schema


def upgrade() -> None:
    dialect = op.get_context().dialect.name
    schema = revision_schema()
    op.add_column(
        TABLE, sa.Column(UPDATED_COLUMN, sa.Text(), nullable=True), schema=_table_schema()
    )
    op.add_column(
        TABLE,
        sa.Column(ARCHIVED_COLUMN, sa.Boolean(create_constraint=False), nullable=True),
        schema=_table_schema(),
    )
    if dialect in BACKFILL:
        updated, archived = BACKFILL[dialect]
        # Named with its schema, like ADD COLUMN (a raw UPDATE is not translated).
        table = sa.table(
            TABLE, sa.column(UPDATED_COLUMN), sa.column(ARCHIVED_COLUMN), schema=_table_schema()
        )
        op.execute(
            table.update()
            .where(sa.text(HEADS))
            .values({UPDATED_COLUMN: sa.text(updated), ARCHIVED_COLUMN: sa.text(archived)})
        )
    for name in (OLD_CREATED, OLD_UPDATED) if dialect == "postgresql" else (OLD_CREATED,):
        op.drop_index(name, table_name=TABLE, schema=schema)
    for name, order in ((UPDATED, UPDATED_COLUMN), (CREATED, "created_at")):
        op.create_index(
            name,
            TABLE,
            ["user_id", ARCHIVED_COLUMN, order, "entry_id"],
            schema=schema,
            postgresql_where=sa.text(f"{UPDATED_COLUMN} IS NOT NULL"),
            sqlite_where=sa.text(f"{UPDATED_COLUMN} IS NOT NULL"),
        )


def downgrade() -> None:
    dialect = op.get_context().dialect.name
    schema = revision_schema()
    for name in (CREATED, UPDATED):
        op.drop_index(name, table_name=TABLE, schema=schema)
    if dialect == "sqlite":
        if sqlite3.sqlite_version_info < (3, 35):
            raise RuntimeError("downgrading 0010 needs SQLite 3.35 or newer (DROP COLUMN)")
        for column in (ARCHIVED_COLUMN, UPDATED_COLUMN):
            op.execute(f"ALTER TABLE {TABLE} DROP COLUMN {column}")
        op.create_index(
            OLD_CREATED,
            TABLE,
            ["user_id", "created_at", "entry_id"],
            schema=schema,
            sqlite_where=sa.text(HEADS),
        )
        return
    for column in (ARCHIVED_COLUMN, UPDATED_COLUMN):
        op.drop_column(TABLE, column, schema=_table_schema())
    orders: tuple[tuple[str, str | sa.TextClause], ...] = (
        (OLD_UPDATED, sa.text(OLD_UPDATED_AT)),
        (OLD_CREATED, "created_at"),
    )
    for name, order in orders:
        columns: list[str | sa.TextClause] = ["user_id", sa.text(OLD_ARCHIVED), order, "entry_id"]
        op.create_index(name, TABLE, columns, schema=schema, postgresql_where=sa.text(HEADS))
