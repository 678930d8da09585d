"""The knowledge graph's collections on MongoDB (internal; the API is :mod:`firefly_orm.knowledge`).

Five collections beside the entries' collection ``<c>``, one document per row
of the SQL tables (:mod:`firefly_orm.sql._graph`), keyed by their id in ``_id``:

* ``<c>.kg_entities``: unique per ``(user_id, norm_name)`` (so two writers
  extracting the same entity cannot create two documents); ``norm_aliases``
  (the aliases normalised) is indexed for lookups by alias;
* ``<c>.kg_facts``: ``subject_id --predicate--> object_id`` or
  ``object_value``, valid from ``valid_from`` until ``valid_to`` (null: still
  true); ``ends`` holds both entity ids, so one multikey index serves
  ``$graphLookup`` in either direction;
* ``<c>.kg_history``: every change, never updated;
* ``<c>.kg_pending``: extractions whose model call failed, kept for retry;
* ``<c>.kg_scopes``: which conversation mentioned an entity or taught a fact
  (unique per user, conversation and item, no ``_id`` of ours).

Every document carries ``user_id``: :func:`erase_graph_users` removes a
user's graph (``MongoDBStore``'s ``erase_user`` commit calls it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from firefly_orm.mongo._driver import AsyncCollection, IndexModel

__all__ = ["GraphCollections", "erase_graph_users", "graph_collections"]

Docs = AsyncCollection[dict[str, Any]]


@dataclass(frozen=True)
class GraphCollections:
    """The collections of the graph beside one entries collection."""

    entities: Docs
    facts: Docs
    history: Docs
    pending: Docs
    scopes: Docs

    def all(self) -> tuple[Docs, ...]:
        """Every collection, children first (the order a user's documents are deleted in)."""
        return (self.history, self.scopes, self.pending, self.facts, self.entities)


def graph_collections(database: Any, collection_name: str) -> GraphCollections:
    """The graph's collections beside ``collection_name`` in ``database``."""
    return GraphCollections(
        entities=database[f"{collection_name}.kg_entities"],
        facts=database[f"{collection_name}.kg_facts"],
        history=database[f"{collection_name}.kg_history"],
        pending=database[f"{collection_name}.kg_pending"],
        scopes=database[f"{collection_name}.kg_scopes"],
    )


#: The indexes of each collection (created once per store by the graph).
INDEXES: dict[str, list[IndexModel]] = {
    "kg_entities": [
        IndexModel([("user_id", 1), ("norm_name", 1)], unique=True, name="user_name"),
        IndexModel([("user_id", 1), ("norm_aliases", 1)], name="user_alias"),
        IndexModel([("user_id", 1), ("mentions", -1), ("name", 1)], name="user_mentions"),
    ],
    "kg_facts": [
        IndexModel(
            [("subject_id", 1), ("predicate", 1), ("valid_to", 1)], name="subject_predicate"
        ),
        IndexModel([("ends", 1), ("user_id", 1)], name="ends"),
        IndexModel([("user_id", 1)], name="user"),
    ],
    "kg_history": [IndexModel([("user_id", 1), ("at", -1), ("_id", -1)], name="user_at")],
    "kg_pending": [
        IndexModel([("status", 1), ("updated_at", 1)], name="status"),
        IndexModel([("user_id", 1)], name="user"),
    ],
    # One document per user, conversation and item (an entity's or a fact's id).
    "kg_scopes": [
        IndexModel(
            [("user_id", 1), ("conversation_id", 1), ("item_id", 1)], unique=True, name="scope"
        ),
        IndexModel([("item_id", 1)], name="item"),
    ],
}


async def create_graph_indexes(collections: GraphCollections) -> None:
    """Create the graph's indexes (idempotent)."""
    for collection in collections.all():
        await collection.create_indexes(INDEXES[collection.name.rsplit(".", 1)[1]])


async def erase_graph_users(database: Any, collection_name: str, user_ids: Iterable[str]) -> None:
    """Delete every graph document of ``user_ids`` (one indexed ``delete_many`` per collection)."""
    users = sorted(user_ids)
    if not users:
        return
    for collection in graph_collections(database, collection_name).all():
        await collection.delete_many({"user_id": {"$in": users}})
