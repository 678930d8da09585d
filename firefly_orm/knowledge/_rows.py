"""The knowledge graph's statements, run on a unit of work's Session or Connection.

Every function takes the ``target`` first (``RunsStatements.run_statements``
hands it over) and runs inside the caller's transaction: a write operation of
:class:`~firefly_orm.knowledge.KnowledgeGraph` is one unit of work.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from firefly_orm.entry import utcnow
from firefly_orm.errors import EntryValidationError
from firefly_orm.knowledge._model import Entity, Fact
from firefly_orm.sql._graph import ENTITIES, FACTS, HISTORY
from firefly_orm.sql._ops import _execute

__all__ = [
    "EntityUpdate",
    "Target",
    "delete_entity",
    "ensure_entity",
    "entity_row",
    "fact_row",
    "facts_of",
    "find_entity",
    "new_id",
    "normalize",
    "record_change",
    "valid_at",
]

Target = Session | Connection


def new_id() -> str:
    """A fresh row id (32 hex digits)."""
    return uuid.uuid4().hex


def normalize(name: str) -> str:
    """How names and aliases are compared: case-folded, whitespace collapsed."""
    return " ".join(name.split()).casefold()


def _run(target: Target, stmt: Any, params: dict[str, Any] | None = None) -> Any:
    return _execute(target, stmt, params or {})


def _dialect(target: Target) -> str:
    bind = target.get_bind() if isinstance(target, Session) else target
    return bind.dialect.name


def entity_row(row: Any) -> Entity:
    """An :class:`Entity` from a ``knowledge_entities`` row."""
    return Entity(
        entity_id=row.entity_id,
        user_id=row.user_id,
        name=row.name,
        entity_type=row.entity_type,
        attributes=dict(row.attributes),
        aliases=list(row.aliases),
        mentions=row.mentions,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def record_change(
    target: Target,
    user_id: str,
    action: str,
    actor: str,
    *,
    entity_id: str | None = None,
    fact_id: str | None = None,
    detail: dict[str, Any] | None = None,
) -> None:
    """Append one row to the history (who, what, when)."""
    _run(
        target,
        sa.insert(HISTORY).values(
            user_id=user_id,
            action=action,
            actor=actor,
            entity_id=entity_id,
            fact_id=fact_id,
            detail=detail or {},
            at=utcnow(),
        ),
    )


def find_entity(target: Target, user_id: str, name: str) -> Entity | None:
    """The user's entity called ``name``, by its name or one of its aliases."""
    norm = normalize(name)
    row = _run(
        target,
        sa.select(ENTITIES).where(ENTITIES.c.user_id == user_id, ENTITIES.c.norm_name == norm),
    ).first()
    if row is not None:
        return entity_row(row)
    # Aliases: a JSON list per entity; only entities that have some are read.
    rows = _run(
        target,
        sa.select(ENTITIES).where(
            ENTITIES.c.user_id == user_id,
            sa.cast(ENTITIES.c.aliases, sa.Text) != "[]",
        ),
    ).all()
    for candidate in rows:
        if any(normalize(alias) == norm for alias in candidate.aliases):
            return entity_row(candidate)
    return None


@dataclass(frozen=True)
class EntityUpdate:
    """What one mention says about an entity."""

    name: str
    entity_type: str | None = None
    attributes: dict[str, Any] | None = None
    aliases: tuple[str, ...] = ()


def ensure_entity(
    target: Target, user_id: str, mention: EntityUpdate, actor: str, *, count: bool = True
) -> Entity:
    """The user's entity for ``mention`` (by name or alias), created if new, updated if told more.

    Creation is ``INSERT ... ON CONFLICT DO NOTHING`` on the unique
    ``(user_id, norm_name)``: when another transaction creates the same entity
    at the same moment, this one waits for it and then reads its row, so no
    duplicate is ever made.  ``count``: add one to the mention count.
    """
    name = mention.name.strip()
    if not name:
        raise EntryValidationError("name", "an entity needs a non-empty name")
    now = utcnow()
    found = find_entity(target, user_id, name)
    if found is None:
        values: dict[str, Any] = {
            "entity_id": new_id(),
            "user_id": user_id,
            "name": name,
            "norm_name": normalize(name),
            "entity_type": mention.entity_type or "unknown",
            "attributes": mention.attributes or {},
            "aliases": _merged_aliases([], mention.aliases, name),
            "mentions": 1 if count else 0,
            "created_at": now,
            "updated_at": now,
        }
        module = postgresql if _dialect(target) == "postgresql" else sqlite
        stmt = module.insert(ENTITIES).values(values)
        conflict_free = stmt.on_conflict_do_nothing(index_elements=["user_id", "norm_name"])
        # RETURNING, not rowcount: the drivers do not all count a skipped row as 0.
        inserted = _run(target, conflict_free.returning(ENTITIES.c.entity_id)).first() is not None
        found = find_entity(target, user_id, name)
        assert found is not None  # inserted here or by the transaction we waited for
        if inserted:
            record_change(
                target,
                user_id,
                "add_entity",
                actor,
                entity_id=found.entity_id,
                detail={"name": name},
            )
            return found
    changes: dict[str, Any] = {}
    aliases = _merged_aliases(found.aliases, mention.aliases, found.name)
    if aliases != found.aliases:
        changes["aliases"] = aliases
    if mention.attributes:
        attributes = {**found.attributes, **mention.attributes}
        if attributes != found.attributes:
            changes["attributes"] = attributes
    if mention.entity_type not in (None, "unknown") and found.entity_type == "unknown":
        changes["entity_type"] = mention.entity_type
    if not changes and not count:
        return found
    stmt = sa.update(ENTITIES).where(ENTITIES.c.entity_id == found.entity_id)
    updates: dict[str, Any] = {**changes, "updated_at": now}
    if count:
        updates["mentions"] = ENTITIES.c.mentions + 1
    _run(target, stmt.values(updates))
    if changes:
        record_change(
            target,
            user_id,
            "update_entity",
            actor,
            entity_id=found.entity_id,
            detail={"changed": sorted(changes)},
        )
    row = _run(target, sa.select(ENTITIES).where(ENTITIES.c.entity_id == found.entity_id)).one()
    return entity_row(row)


def _merged_aliases(current: list[str], new: tuple[str, ...] | list[str], name: str) -> list[str]:
    """``current`` plus the ``new`` aliases not already known (nor the name itself)."""
    merged = list(current)
    seen = {normalize(name), *(normalize(alias) for alias in current)}
    for alias in new:
        alias = alias.strip()
        if alias and normalize(alias) not in seen:
            merged.append(alias)
            seen.add(normalize(alias))
    return merged


def _fact_query() -> sa.Select[Any]:
    subject = ENTITIES.alias("subject_entity")
    obj = ENTITIES.alias("object_entity")
    return sa.select(
        FACTS,
        subject.c.name.label("subject_name"),
        obj.c.name.label("object_name"),
    ).select_from(
        FACTS.join(subject, subject.c.entity_id == FACTS.c.subject_id).outerjoin(
            obj, obj.c.entity_id == FACTS.c.object_id
        )
    )


def fact_row(row: Any) -> Fact:
    """A :class:`Fact` from a row of :func:`_fact_query`."""
    is_entity = row.object_id is not None
    return Fact(
        fact_id=row.fact_id,
        subject=row.subject_name,
        predicate=row.predicate,
        object=row.object_name if is_entity else row.object_value,
        object_is_entity=is_entity,
        valid_from=row.valid_from,
        valid_to=row.valid_to,
        evidence=list(row.evidence),
        confidence=row.confidence,
        subject_id=row.subject_id,
        object_id=row.object_id,
    )


def valid_at(as_of: datetime | None) -> sa.ColumnElement[bool]:
    """Facts true now (``None``) or at ``as_of``."""
    if as_of is None:
        return FACTS.c.valid_to.is_(None)
    return sa.and_(
        FACTS.c.valid_from <= as_of,
        sa.or_(FACTS.c.valid_to.is_(None), FACTS.c.valid_to > as_of),
    )


def facts_of(target: Target, *conditions: sa.ColumnElement[bool]) -> list[Fact]:
    """The facts meeting ``conditions``, oldest first."""
    query = _fact_query().where(*conditions).order_by(FACTS.c.valid_from, FACTS.c.fact_id)
    return [fact_row(row) for row in _run(target, query)]


def delete_entity(target: Target, entity: Entity) -> int:
    """Delete ``entity``, every fact it is in, and their history; the number of facts."""
    involved = sa.or_(FACTS.c.subject_id == entity.entity_id, FACTS.c.object_id == entity.entity_id)
    fact_ids = [r.fact_id for r in _run(target, sa.select(FACTS.c.fact_id).where(involved))]
    if fact_ids:
        _run(target, sa.delete(HISTORY).where(HISTORY.c.fact_id.in_(fact_ids)))
        _run(target, sa.delete(FACTS).where(FACTS.c.fact_id.in_(fact_ids)))
    _run(target, sa.delete(HISTORY).where(HISTORY.c.entity_id == entity.entity_id))
    _run(target, sa.delete(ENTITIES).where(ENTITIES.c.entity_id == entity.entity_id))
    return len(fact_ids)
