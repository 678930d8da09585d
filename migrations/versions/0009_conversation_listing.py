"""A user's conversation list: two partial indexes over conversation heads.

Revision ID: 0009_conversation_listing
Revises: 0008_knowledge_graph
Create Date: 2026-11-28

``ConversationMemory.list_conversations`` pages a user's conversations with a
keyset (no OFFSET) in one query over the heads (key ``head`` in the
``conversation:<id>`` namespaces), whose content carries ``updated_at``,
``archived``, ``title`` and ``tags`` (:mod:`firefly_orm.conversation._listing`).
Two partial indexes over the heads only (no other row pays for them):

* ``ix_memory_entries_conv_updated (user_id, <archived>, <updated_at>, entry_id)``
  serves the list newest-changed first (or last);
* ``ix_memory_entries_conv_created (user_id, <archived>, created_at, entry_id)``
  serves it by creation time.

``<archived>`` and ``<updated_at>`` are expressions over the JSON content,
spelled exactly as the query spells them.  That is PostgreSQL only: SQLite
does not mark its JSON functions innocuous, so a JSON expression in an index
makes the whole database unreadable ("malformed database schema ... unsafe
use of json_extract()") to any connection with ``PRAGMA trusted_schema = OFF``
(hardened apps, and our own reader of upstream files).  On SQLite the schema
gets only ``ix_memory_entries_conv_created (user_id, created_at, entry_id)``
over the heads, plain columns; the archived flag is checked on the rows the
index gives, and the newest-changed order sorts the user's heads.  Neither
index is in the SQLAlchemy model; :func:`firefly_orm.migrate.own_include_name`
leaves them out of comparisons.  Nothing else changes; downgrade drops them.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from firefly_orm.migrate import revision_schema

revision: str = "0009_conversation_listing"
down_revision: str | Sequence[str] | None = "0008_knowledge_graph"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "memory_entries"
UPDATED = "ix_memory_entries_conv_updated"
CREATED = "ix_memory_entries_conv_created"
HEADS = "key = 'head' AND namespace LIKE 'conversation:%'"
# The same texts as firefly_orm/conversation/_listing_sql.py (kept as they were here).
EXPRESSIONS = {
    "postgresql": (
        "COALESCE(content ->> 'archived', 'false')",
        "COALESCE(content ->> 'updated_at', '')",
    ),
}


def upgrade() -> None:
    schema = revision_schema()
    dialect = op.get_context().dialect.name
    if dialect != "postgresql":
        op.create_index(
            CREATED,
            TABLE,
            ["user_id", "created_at", "entry_id"],
            schema=schema,
            sqlite_where=sa.text(HEADS),
        )
        return
    archived, updated = EXPRESSIONS["postgresql"]
    orders: tuple[tuple[str, str | sa.TextClause], ...] = (
        (UPDATED, sa.text(updated)),
        (CREATED, "created_at"),
    )
    for name, order in orders:
        columns: list[str | sa.TextClause] = ["user_id", sa.text(archived), order, "entry_id"]
        op.create_index(
            name,
            TABLE,
            columns,
            schema=schema,
            postgresql_where=sa.text(HEADS),
            sqlite_where=sa.text(HEADS),
        )


def downgrade() -> None:
    schema = revision_schema()
    postgresql = op.get_context().dialect.name == "postgresql"
    for name in (CREATED, UPDATED) if postgresql else (CREATED,):
        op.drop_index(name, table_name=TABLE, schema=schema)
