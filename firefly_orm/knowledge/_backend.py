"""What the knowledge graph asks of a database: :class:`GraphRows` (internal).

The update rule, merging and forgetting (:mod:`firefly_orm.knowledge._apply`)
are written once over these primitives; each database answers them its own
way: the SQL stores with statements on the unit of work's Session or
Connection (:class:`~firefly_orm.knowledge._rows.SqlRows`, recursive CTEs for
the traversals), MongoDB with documents in collections beside the entries'
(:class:`~firefly_orm.knowledge._mongo.MongoRows`, ``$graphLookup``).
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from firefly_orm.knowledge._model import Entity, Fact

__all__ = ["EntityUpdate", "GraphRows", "PendingRow", "new_id", "normalize"]


def new_id() -> str:
    """A fresh row id (32 hex digits)."""
    return uuid.uuid4().hex


def normalize(name: str) -> str:
    """How names and aliases are compared: case-folded, whitespace collapsed."""
    return " ".join(name.split()).casefold()


@dataclass(frozen=True)
class EntityUpdate:
    """What one mention says about an entity."""

    name: str
    entity_type: str | None = None
    attributes: dict[str, Any] | None = None
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class PendingRow:
    """One queued extraction (see :class:`~firefly_orm.knowledge.KnowledgeExtractor`)."""

    pending_id: str
    user_id: str
    turn_ref: str
    text: str
    observed_at: datetime
    conversation_id: str | None = None


class GraphRows(Protocol):
    """The knowledge graph's reads and writes in one database, inside one unit of work.

    Entities are unique per ``(user_id, norm_name)``: :meth:`insert_entity`
    never creates a second one, whoever else inserts it at the same moment.
    Facts come back oldest first (``valid_from``, then id).  ``as_of=None``
    means the facts true now (no ``valid_to``); a time means those with
    ``valid_from <= as_of < valid_to``.
    """

    # ---------------------------------------------------------------- entities
    def find_entity(self, user_id: str, name: str) -> Entity | None:
        """The user's entity called ``name`` (its name or an alias, compared normalised)."""
        ...

    def insert_entity(self, values: dict[str, Any]) -> bool:
        """Insert an entity row unless the user has one of that ``norm_name``; whether it did."""
        ...

    def update_entity(self, entity_id: str, changes: dict[str, Any], mentions: int) -> Entity:
        """Set ``changes`` (and ``updated_at``), add ``mentions``; the entity as it now is."""
        ...

    def list_entities(self, user_id: str, limit: int) -> list[Entity]:
        """The user's entities, most mentioned first, then by name."""
        ...

    def search_entities(self, user_id: str, needle: str, limit: int) -> list[Entity]:
        """Entities whose normalised name or an alias contains ``needle`` (normalised)."""
        ...

    def repoint_facts(self, old_id: str, new_id: str) -> None:
        """Every fact naming entity ``old_id`` (either end) names ``new_id`` instead."""
        ...

    def delete_entity_row(self, entity_id: str) -> None:
        """Delete the entity row only."""
        ...

    def delete_entity(self, entity_id: str) -> int:
        """Delete the entity, every fact it is in, their history and conversation scopes;
        the facts' count."""
        ...

    def entities_by_ids(self, user_id: str, ids: Collection[str]) -> list[Entity]:
        """The user's entities of ``ids`` (any order)."""
        ...

    # ---------------------------------------------------------------- conversation scopes
    def add_scope(
        self, user_id: str, conversation_id: str, kind: str, item_id: str, at: datetime
    ) -> None:
        """Record that ``conversation_id`` mentioned entity / taught fact ``item_id``
        (``kind``: ``entity`` or ``fact``); nothing when it is recorded already."""
        ...

    def scoped_ids(self, user_id: str, conversation_id: str, kind: str) -> set[str]:
        """The ids of the items of ``kind`` the conversation mentioned or taught."""
        ...

    def scopes_of(self, item_id: str) -> list[tuple[str, datetime]]:
        """The conversations that mentioned ``item_id``, with when they first did."""
        ...

    def delete_scopes(self, item_ids: list[str]) -> None:
        """Delete the scope rows of ``item_ids``."""
        ...

    # ---------------------------------------------------------------- facts
    def current_facts(self, subject_id: str, predicate: str) -> list[Fact]:
        """The facts of ``subject_id`` and ``predicate`` true now."""
        ...

    def fact(self, fact_id: str) -> Fact:
        """One fact by id."""
        ...

    def insert_fact(self, values: dict[str, Any]) -> None:
        """Insert a fact row (the columns of ``knowledge_facts``)."""
        ...

    def update_fact(self, fact_id: str, values: dict[str, Any]) -> None:
        """Set ``values`` (``evidence``, ``confidence``, ``valid_to``) on one fact."""
        ...

    def facts_touching(self, user_id: str, entity_id: str, as_of: datetime | None) -> list[Fact]:
        """The facts ``entity_id`` is in (subject or object), true now or at ``as_of``."""
        ...

    def neighbors(
        self, user_id: str, start_id: str, depth: int, as_of: datetime | None
    ) -> list[tuple[Entity, int]]:
        """Entities within ``depth`` hops of ``start_id`` (facts in either direction), nearest
        first, then by name; each with its distance."""
        ...

    def paths(
        self,
        user_id: str,
        a_id: str,
        b_id: str,
        max_depth: int,
        limit: int,
        as_of: datetime | None,
    ) -> list[list[Fact]]:
        """Simple paths (no entity twice) from ``a_id`` to ``b_id``, shortest first."""
        ...

    # ---------------------------------------------------------------- history
    def record_change(self, row: dict[str, Any]) -> None:
        """Append a history row (user_id, action, actor, entity_id, fact_id, detail, at)."""
        ...

    def history(self, user_id: str, limit: int) -> list[dict[str, Any]]:
        """The user's latest history rows, newest first."""
        ...

    # ---------------------------------------------------------------- export / import
    def dump(self, user_id: str) -> dict[str, list[dict[str, Any]]]:
        """The user's ``entities``, ``facts``, ``history`` and ``scopes`` rows (columns of
        the SQL tables; history oldest first, without ``change_id``)."""
        ...

    def load(self, rows: dict[str, list[dict[str, Any]]]) -> None:
        """Insert rows in :meth:`dump`'s shape (checked by the caller)."""
        ...

    def graph_users(self) -> list[str]:
        """Every user with at least one entity, sorted."""
        ...

    # ---------------------------------------------------------------- pending extractions
    def queue(self, row: dict[str, Any]) -> None:
        """Insert a pending-extraction row (the columns of ``knowledge_pending``)."""
        ...

    def waiting(self, limit: int) -> list[PendingRow]:
        """Extractions with status ``pending``, least recently tried first."""
        ...

    def attempts(self, pending_id: str) -> int:
        """How many model calls a queued extraction has had."""
        ...

    def update_pending(self, pending_id: str, values: dict[str, Any]) -> None:
        """Set ``values`` on one queued extraction."""
        ...

    def dequeue(self, pending_id: str) -> None:
        """Delete one queued extraction."""
        ...

    def statuses(self) -> dict[str, int]:
        """Queued extractions counted by status."""
        ...
