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
spelled per dialect exactly as the query spells them (SQLite matches an index
expression by its text; its JSON functions are guarded by ``json_valid`` so
that no row write can fail on them).  Neither index is in the SQLAlchemy model
(expression indexes); :func:`firefly_orm.migrate.own_include_name` leaves them
out of comparisons.  Nothing else changes; downgrade drops both.
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
    "sqlite": (
        "COALESCE(CASE WHEN json_valid(content) THEN json_extract(content, '$.archived') END, 0)",
        "COALESCE(CASE WHEN json_valid(content) THEN json_extract(content, '$.updated_at') END, "
        "'')",
    ),
}


def upgrade() -> None:
    schema = revision_schema()
    dialect = op.get_context().dialect.name
    archived, updated = EXPRESSIONS["postgresql" if dialect == "postgresql" else "sqlite"]
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
    for name in (CREATED, UPDATED):
        op.drop_index(name, table_name=TABLE, schema=schema)
