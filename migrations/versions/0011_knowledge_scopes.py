"""The knowledge graph per conversation: ``knowledge_scopes`` and the pending queue's conversation.

Revision ID: 0011_knowledge_scopes
Revises: 0010_conversation_list_columns

* ``knowledge_scopes``: one row per user, conversation and item (an entity
  or a fact id) the conversation mentioned or taught, with when it first did
  (``kind``: ``entity`` or ``fact``); indexed by item for forgetting and
  merging;
* ``knowledge_pending.conversation_id`` (nullable): the conversation a queued
  extraction's turn belongs to, so it is scoped when it is drained.

Existing rows need nothing: a graph written before has no conversation scope.
Downgrade drops both (the scopes are lost; the graph itself stays).
"""

import sqlite3
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from firefly_orm.migrate import revision_schema

revision: str = "0011_knowledge_scopes"
down_revision: str | Sequence[str] | None = "0010_conversation_list_columns"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _table_schema() -> str | None:
    # ADD/DROP COLUMN do not follow schema_translate_map: name the schema (as 0010 does).
    return revision_schema() or op.get_context().version_table_schema


def upgrade() -> None:
    schema = revision_schema()
    op.create_table(
        "knowledge_scopes",
        sa.Column("user_id", sa.String(), nullable=False),
        sa.Column("conversation_id", sa.String(), nullable=False),
        sa.Column("item_id", sa.String(32), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("first_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(
            "user_id", "conversation_id", "item_id", name="pk_knowledge_scopes"
        ),
        schema=schema,
    )
    op.create_index("ix_knowledge_scopes_item", "knowledge_scopes", ["item_id"], schema=schema)
    op.add_column(
        "knowledge_pending",
        sa.Column("conversation_id", sa.String(), nullable=True),
        schema=_table_schema(),
    )


def downgrade() -> None:
    schema = revision_schema()
    if op.get_context().dialect.name == "sqlite":
        if sqlite3.sqlite_version_info < (3, 35):
            raise RuntimeError("downgrading 0011 needs SQLite 3.35 or newer (DROP COLUMN)")
        op.execute("ALTER TABLE knowledge_pending DROP COLUMN conversation_id")
    else:
        op.drop_column("knowledge_pending", "conversation_id", schema=_table_schema())
    op.drop_index("ix_knowledge_scopes_item", table_name="knowledge_scopes", schema=schema)
    op.drop_table("knowledge_scopes", schema=schema)
