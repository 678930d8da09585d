"""The knowledge graph: entities, facts with validity intervals, their history, pending extractions.

Revision ID: 0008_knowledge_graph
Revises: 0007_search_skips_null_text
Create Date: 2026-11-28

Four new tables (:mod:`firefly_orm.knowledge`), nothing changed in
``memory_entries``:

* ``knowledge_entities``: unique ``(user_id, norm_name)``, so two writers
  extracting the same entity at once get one row;
* ``knowledge_facts``: ``subject --predicate--> object`` valid from
  ``valid_from`` until ``valid_to``; ``ix_knowledge_facts_subject (subject_id,
  predicate, valid_to)`` serves the update rule and each outward hop of a
  traversal, ``ix_knowledge_facts_object (object_id)`` each inward hop;
* ``knowledge_history``: one row per change;
* ``knowledge_pending``: extractions to retry.

Every table has ``user_id`` first in an index (``erase_user`` deletes by it).
Downgrade drops the four tables (and their rows).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from firefly_orm.migrate import revision_schema

revision: str = "0008_knowledge_graph"
down_revision: str | Sequence[str] | None = "0007_search_skips_null_text"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# As 0003 left the entries' JSON columns: TEXT on SQLite, JSONB on PostgreSQL.
_JSON = sa.Text().with_variant(postgresql.JSONB(), "postgresql")
_TIME = sa.DateTime(timezone=True)

_INDEXES: dict[str, tuple[str, list[str]]] = {
    "ix_knowledge_facts_subject": ("knowledge_facts", ["subject_id", "predicate", "valid_to"]),
    "ix_knowledge_facts_object": ("knowledge_facts", ["object_id"]),
    "ix_knowledge_facts_user": ("knowledge_facts", ["user_id"]),
    "ix_knowledge_history_user": ("knowledge_history", ["user_id", "at"]),
    "ix_knowledge_pending_status": ("knowledge_pending", ["status", "updated_at"]),
    "ix_knowledge_pending_user": ("knowledge_pending", ["user_id"]),
}
_TABLES = ("knowledge_entities", "knowledge_facts", "knowledge_history", "knowledge_pending")


def upgrade() -> None:
    schema = revision_schema()
    op.create_table(
        "knowledge_entities",
        sa.Column("entity_id", sa.String(32), nullable=False),
        sa.Column("user_id", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("norm_name", sa.String(), nullable=False),
        sa.Column("entity_type", sa.String(), nullable=False),
        sa.Column("attributes", _JSON, nullable=False),
        sa.Column("aliases", _JSON, nullable=False),
        sa.Column("mentions", sa.Integer(), nullable=False),
        sa.Column("created_at", _TIME, nullable=False),
        sa.Column("updated_at", _TIME, nullable=False),
        sa.PrimaryKeyConstraint("entity_id", name="pk_knowledge_entities"),
        sa.UniqueConstraint("user_id", "norm_name", name="uq_knowledge_entities_user_name"),
        schema=schema,
    )
    op.create_table(
        "knowledge_facts",
        sa.Column("fact_id", sa.String(32), nullable=False),
        sa.Column("user_id", sa.String(), nullable=False),
        sa.Column("subject_id", sa.String(32), nullable=False),
        sa.Column("predicate", sa.String(), nullable=False),
        sa.Column("object_id", sa.String(32), nullable=True),
        sa.Column("object_value", sa.String(), nullable=True),
        sa.Column("valid_from", _TIME, nullable=False),
        sa.Column("valid_to", _TIME, nullable=True),
        sa.Column("evidence", _JSON, nullable=False),
        sa.Column("confidence", sa.Float(), nullable=False),
        sa.Column("created_at", _TIME, nullable=False),
        sa.PrimaryKeyConstraint("fact_id", name="pk_knowledge_facts"),
        schema=schema,
    )
    op.create_table(
        "knowledge_history",
        sa.Column("change_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("user_id", sa.String(), nullable=False),
        sa.Column("action", sa.String(), nullable=False),
        sa.Column("actor", sa.String(), nullable=False),
        sa.Column("entity_id", sa.String(32), nullable=True),
        sa.Column("fact_id", sa.String(32), nullable=True),
        sa.Column("detail", _JSON, nullable=False),
        sa.Column("at", _TIME, nullable=False),
        sa.PrimaryKeyConstraint("change_id", name="pk_knowledge_history"),
        schema=schema,
    )
    op.create_table(
        "knowledge_pending",
        sa.Column("pending_id", sa.String(32), nullable=False),
        sa.Column("user_id", sa.String(), nullable=False),
        sa.Column("turn_ref", sa.String(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("observed_at", _TIME, nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("updated_at", _TIME, nullable=False),
        sa.PrimaryKeyConstraint("pending_id", name="pk_knowledge_pending"),
        schema=schema,
    )
    for name, (table, columns) in _INDEXES.items():
        op.create_index(name, table, columns, schema=schema)


def downgrade() -> None:
    schema = revision_schema()
    for name, (table, _) in _INDEXES.items():
        op.drop_index(name, table_name=table, schema=schema)
    for table in reversed(_TABLES):
        op.drop_table(table, schema=schema)
