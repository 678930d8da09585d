"""The knowledge graph's tables (internal; the API is :mod:`firefly_orm.knowledge`).

Four tables beside ``memory_entries``, created by migration
``0008_knowledge_graph`` and, like the entries, without a schema of their own:
the store's ``schema_translate_map`` places them.

* ``knowledge_entities``: one row per entity a user's conversations mention
  (``name`` as first seen, ``norm_name`` its case-folded form, unique per user,
  so two writers extracting the same entity cannot create two rows);
* ``knowledge_facts``: ``subject --predicate--> object`` where the object is
  an entity or a literal, valid from ``valid_from`` until ``valid_to`` (NULL:
  still true), with the turns that taught it (``evidence``) and a confidence;
* ``knowledge_history``: every change (who, what, when), never updated;
* ``knowledge_pending``: extractions whose model call failed, kept for retry
  (``conversation_id``: migration ``0011``);
* ``knowledge_scopes`` (migration ``0011_knowledge_scopes``): which
  conversation mentioned an entity or taught a fact (one row per user,
  conversation and item), so a graph can be read per conversation.

Every row carries ``user_id``, so ``erase_user`` (:data:`ERASE_USER_GRAPH`)
removes a user's graph with their entries.
"""

from __future__ import annotations

import sqlalchemy as sa

from firefly_orm.entry import JSONValue, UTCDateTime

__all__ = [
    "ENTITIES",
    "ERASE_USER_GRAPH",
    "FACTS",
    "GRAPH_TABLES",
    "HISTORY",
    "PENDING",
    "SCOPES",
    "graph_metadata",
]

#: The graph tables' own metadata (the entries' stays one table for host apps' filters).
graph_metadata = sa.MetaData(naming_convention={"pk": "pk_%(table_name)s"})

ENTITIES = sa.Table(
    "knowledge_entities",
    graph_metadata,
    sa.Column("entity_id", sa.String(32), primary_key=True),
    sa.Column("user_id", sa.String(), nullable=False),
    sa.Column("name", sa.String(), nullable=False),
    sa.Column("norm_name", sa.String(), nullable=False),
    sa.Column("entity_type", sa.String(), nullable=False),
    sa.Column("attributes", JSONValue(), nullable=False),
    sa.Column("aliases", JSONValue(), nullable=False),
    sa.Column("mentions", sa.Integer(), nullable=False),
    sa.Column("created_at", UTCDateTime(), nullable=False),
    sa.Column("updated_at", UTCDateTime(), nullable=False),
    sa.UniqueConstraint("user_id", "norm_name", name="uq_knowledge_entities_user_name"),
)

FACTS = sa.Table(
    "knowledge_facts",
    graph_metadata,
    sa.Column("fact_id", sa.String(32), primary_key=True),
    sa.Column("user_id", sa.String(), nullable=False),
    sa.Column("subject_id", sa.String(32), nullable=False),
    sa.Column("predicate", sa.String(), nullable=False),
    sa.Column("object_id", sa.String(32), nullable=True),
    sa.Column("object_value", sa.String(), nullable=True),
    sa.Column("valid_from", UTCDateTime(), nullable=False),
    sa.Column("valid_to", UTCDateTime(), nullable=True),
    sa.Column("evidence", JSONValue(), nullable=False),
    sa.Column("confidence", sa.Float(), nullable=False),
    sa.Column("created_at", UTCDateTime(), nullable=False),
    sa.Index("ix_knowledge_facts_subject", "subject_id", "predicate", "valid_to"),
    sa.Index("ix_knowledge_facts_object", "object_id"),
    sa.Index("ix_knowledge_facts_user", "user_id"),
)

HISTORY = sa.Table(
    "knowledge_history",
    graph_metadata,
    sa.Column("change_id", sa.Integer(), primary_key=True, autoincrement=True),
    sa.Column("user_id", sa.String(), nullable=False),
    sa.Column("action", sa.String(), nullable=False),
    sa.Column("actor", sa.String(), nullable=False),
    sa.Column("entity_id", sa.String(32), nullable=True),
    sa.Column("fact_id", sa.String(32), nullable=True),
    sa.Column("detail", JSONValue(), nullable=False),
    sa.Column("at", UTCDateTime(), nullable=False),
    sa.Index("ix_knowledge_history_user", "user_id", "at"),
)

PENDING = sa.Table(
    "knowledge_pending",
    graph_metadata,
    sa.Column("pending_id", sa.String(32), primary_key=True),
    sa.Column("user_id", sa.String(), nullable=False),
    sa.Column("turn_ref", sa.String(), nullable=False),
    sa.Column("text", sa.Text(), nullable=False),
    sa.Column("observed_at", UTCDateTime(), nullable=False),
    sa.Column("attempts", sa.Integer(), nullable=False),
    sa.Column("status", sa.String(), nullable=False),
    sa.Column("last_error", sa.Text(), nullable=True),
    sa.Column("updated_at", UTCDateTime(), nullable=False),
    sa.Column("conversation_id", sa.String(), nullable=True),
    sa.Index("ix_knowledge_pending_status", "status", "updated_at"),
    sa.Index("ix_knowledge_pending_user", "user_id"),
)

SCOPES = sa.Table(
    "knowledge_scopes",
    graph_metadata,
    sa.Column("user_id", sa.String(), primary_key=True),
    sa.Column("conversation_id", sa.String(), primary_key=True),
    sa.Column("item_id", sa.String(32), primary_key=True),
    sa.Column("kind", sa.String(), nullable=False),
    sa.Column("first_at", UTCDateTime(), nullable=False),
    sa.Index("ix_knowledge_scopes_item", "item_id"),
)

#: Every graph table, children first (the order a user's rows are deleted in).
GRAPH_TABLES = (HISTORY, SCOPES, PENDING, FACTS, ENTITIES)

#: One DELETE per table, removing everything of ``:uid`` (each by an index on user_id).
ERASE_USER_GRAPH = tuple(
    sa.delete(table).where(table.c.user_id == sa.bindparam("uid")) for table in GRAPH_TABLES
)
