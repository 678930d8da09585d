"""A user's graph read per conversation (internal).

The conversation scope **filters**, it does not partition: a user has one
graph, one entity per name and one update rule across all conversations
("Munich" learned in ``c1`` and mentioned again in ``c2`` is one entity, and a
fact said in ``c2`` supersedes one said in ``c1``).  Each write that names a
``conversation_id`` also records, once per conversation, that it mentioned
the entities and taught (added, confirmed, updated or superseded) the fact
(:meth:`GraphRows.add_scope <firefly_orm.knowledge._backend.GraphRows.add_scope>`).
Reading with ``conversation_id=`` keeps only those items.  Forgetting an
entity drops its scopes with it, merging moves them to the kept entity,
``erase_user`` deletes them, and export / import carry them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from firefly_orm.conversation._model import check_conversation_id
from firefly_orm.knowledge._backend import GraphRows, normalize
from firefly_orm.knowledge._model import Entity, Fact

__all__ = ["check_scope", "entities_in", "facts_about_in", "search_in"]


def check_scope(conversation_id: Any) -> str | None:
    """``None`` (the whole graph) or a checked conversation id."""
    return None if conversation_id is None else check_conversation_id(conversation_id)


def _ranked(entities: list[Entity], limit: int) -> list[Entity]:
    """Most mentioned first, then by name (the order of ``list_entities``)."""
    return sorted(entities, key=lambda e: (-e.mentions, e.name))[:limit]


def entities_in(
    rows: GraphRows, user_id: str, limit: int, conversation_id: str | None
) -> list[Entity]:
    """The user's entities (of the conversation), most mentioned first."""
    if conversation_id is None:
        return rows.list_entities(user_id, limit)
    ids = rows.scoped_ids(user_id, conversation_id, "entity")
    return _ranked(rows.entities_by_ids(user_id, ids), limit)


def search_in(
    rows: GraphRows, user_id: str, needle: str, limit: int, conversation_id: str | None
) -> list[Entity]:
    """The user's entities (of the conversation) whose name or an alias contains
    ``needle`` (normalised)."""
    if conversation_id is None:
        return rows.search_entities(user_id, needle, limit)
    ids = rows.scoped_ids(user_id, conversation_id, "entity")
    found = [
        e
        for e in rows.entities_by_ids(user_id, ids)
        if needle in normalize(e.name) or any(needle in normalize(a) for a in e.aliases)
    ]
    return _ranked(found, limit)


def facts_about_in(
    rows: GraphRows, user_id: str, name: str, as_of: datetime | None, conversation_id: str | None
) -> list[Fact]:
    """The facts ``name`` is in (true now or at ``as_of``; of the conversation)."""
    entity = rows.find_entity(user_id, name)
    if entity is None:
        return []
    facts = rows.facts_touching(user_id, entity.entity_id, as_of)
    if conversation_id is None:
        return facts
    taught = rows.scoped_ids(user_id, conversation_id, "fact")
    return [f for f in facts if f.fact_id in taught]
