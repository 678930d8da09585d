"""The knowledge graph on the SQL stores: :class:`SqlRows` (internal).

Every method runs statements on the unit of work's Session or Connection
(``RunsStatements.run_statements`` hands it over), inside the caller's
transaction: a write operation of :class:`~firefly_orm.knowledge.KnowledgeGraph`
is one unit of work.  The tables are :mod:`firefly_orm.sql._graph`'s.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from firefly_orm.knowledge._backend import PendingRow, normalize
from firefly_orm.knowledge._model import Entity, Fact
from firefly_orm.sql._graph import ENTITIES, FACTS, HISTORY, PENDING, SCOPES
from firefly_orm.sql._ops import _execute

__all__ = ["SqlRows", "Target", "entity_row"]

Target = Session | Connection


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


def _fact_row(row: Any) -> Fact:
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


def _valid_at(as_of: datetime | None) -> sa.ColumnElement[bool]:
    """Facts true now (``None``) or at ``as_of``."""
    if as_of is None:
        return FACTS.c.valid_to.is_(None)
    return sa.and_(
        FACTS.c.valid_from <= as_of,
        sa.or_(FACTS.c.valid_to.is_(None), FACTS.c.valid_to > as_of),
    )


def _edge_step(walk: Any) -> tuple[Any, Any]:
    """The edges touching ``walk.c.node`` (either direction) and their far end."""
    far = sa.case((FACTS.c.subject_id == walk.c.node, FACTS.c.object_id), else_=FACTS.c.subject_id)
    joined = walk.join(
        FACTS,
        sa.or_(FACTS.c.subject_id == walk.c.node, FACTS.c.object_id == walk.c.node),
    )
    return joined, far


def _checked(column: sa.Column[Any]) -> sa.ColumnElement[Any]:
    """``column || ''``: the same value (NULL stays NULL), in a form no index serves.

    A hop's facts must be found by the node (the subject and object indexes,
    OR-ed); its other conditions are only checked on the rows found.  SQLite
    has no statistics unless someone runs ``ANALYZE``, and rates a lookup by
    ``user_id`` as cheap as one by the node, so given ``user_id = ?`` it read
    every fact of the user at each hop (all of them when one user owns the
    graph: 1 s for a 2-hop walk at 100k facts).
    """
    return column.concat("")


def _edges(user_id: str, as_of: datetime | None) -> list[sa.ColumnElement[bool]]:
    """The facts a hop may follow: the user's, between two entities, valid at the time."""
    return [
        _checked(FACTS.c.user_id) == user_id,
        _checked(FACTS.c.object_id).is_not(None),
        _valid_at(as_of),
    ]


class SqlRows:
    """:class:`~firefly_orm.knowledge._backend.GraphRows` on one SQL Session or Connection."""

    def __init__(self, target: Target) -> None:
        self._target = target

    def _run(self, stmt: Any) -> Any:
        return _execute(self._target, stmt, {})

    def _facts(self, *conditions: sa.ColumnElement[bool]) -> list[Fact]:
        query = _fact_query().where(*conditions).order_by(FACTS.c.valid_from, FACTS.c.fact_id)
        return [_fact_row(row) for row in self._run(query)]

    def _entities(self, query: sa.Select[Any]) -> list[Entity]:
        return [entity_row(row) for row in self._run(query)]

    # ---------------------------------------------------------------- entities
    def find_entity(self, user_id: str, name: str) -> Entity | None:
        norm = normalize(name)
        mine = ENTITIES.c.user_id == user_id
        row = self._run(sa.select(ENTITIES).where(mine, ENTITIES.c.norm_name == norm)).first()
        if row is not None:
            return entity_row(row)
        # Aliases: a JSON list per entity; only entities that have some are read.
        having = sa.cast(ENTITIES.c.aliases, sa.Text) != "[]"
        for candidate in self._run(sa.select(ENTITIES).where(mine, having)).all():
            if any(normalize(alias) == norm for alias in candidate.aliases):
                return entity_row(candidate)
        return None

    def _insert(self, table: sa.Table) -> Any:
        """``INSERT`` of the dialect (for ``ON CONFLICT DO NOTHING``)."""
        bind = self._target.get_bind() if isinstance(self._target, Session) else self._target
        module = postgresql if bind.dialect.name == "postgresql" else sqlite
        return module.insert(table)

    def insert_entity(self, values: dict[str, Any]) -> bool:
        """``INSERT ... ON CONFLICT DO NOTHING`` on the unique ``(user_id, norm_name)``.

        When another transaction inserts the same entity at the same moment,
        this one waits for it, then inserts nothing.
        """
        stmt = self._insert(ENTITIES).values(values)
        stmt = stmt.on_conflict_do_nothing(index_elements=["user_id", "norm_name"])
        # RETURNING, not rowcount: the drivers do not all count a skipped row as 0.
        return self._run(stmt.returning(ENTITIES.c.entity_id)).first() is not None

    def update_entity(self, entity_id: str, changes: dict[str, Any], mentions: int) -> Entity:
        updates = dict(changes)
        if mentions:
            updates["mentions"] = ENTITIES.c.mentions + mentions
        mine = ENTITIES.c.entity_id == entity_id
        if updates:
            self._run(sa.update(ENTITIES).where(mine).values(updates))
        return entity_row(self._run(sa.select(ENTITIES).where(mine)).one())

    def _ranked(self, *conditions: sa.ColumnElement[bool]) -> sa.Select[Any]:
        return (
            sa.select(ENTITIES)
            .where(*conditions)
            .order_by(ENTITIES.c.mentions.desc(), ENTITIES.c.name)
        )

    def list_entities(self, user_id: str, limit: int) -> list[Entity]:
        return self._entities(self._ranked(ENTITIES.c.user_id == user_id).limit(limit))

    def search_entities(self, user_id: str, needle: str, limit: int) -> list[Entity]:
        aliases = sa.func.lower(sa.cast(ENTITIES.c.aliases, sa.Text))
        found = sa.or_(
            ENTITIES.c.norm_name.contains(needle, autoescape=True),
            aliases.contains(needle, autoescape=True),
        )
        return self._entities(self._ranked(ENTITIES.c.user_id == user_id, found).limit(limit))

    def repoint_facts(self, old_id: str, new_id: str) -> None:
        for column in (FACTS.c.subject_id, FACTS.c.object_id):
            self._run(sa.update(FACTS).where(column == old_id).values({column: new_id}))

    def delete_entity_row(self, entity_id: str) -> None:
        self._run(sa.delete(ENTITIES).where(ENTITIES.c.entity_id == entity_id))

    def delete_entity(self, entity_id: str) -> int:
        involved = sa.or_(FACTS.c.subject_id == entity_id, FACTS.c.object_id == entity_id)
        fact_ids = [r.fact_id for r in self._run(sa.select(FACTS.c.fact_id).where(involved))]
        if fact_ids:
            self._run(sa.delete(HISTORY).where(HISTORY.c.fact_id.in_(fact_ids)))
            self._run(sa.delete(FACTS).where(FACTS.c.fact_id.in_(fact_ids)))
        self._run(sa.delete(HISTORY).where(HISTORY.c.entity_id == entity_id))
        self.delete_scopes([*fact_ids, entity_id])
        self.delete_entity_row(entity_id)
        return len(fact_ids)

    def entities_by_ids(self, user_id: str, ids: Collection[str]) -> list[Entity]:
        if not ids:
            return []
        mine = ENTITIES.c.user_id == user_id
        return self._entities(sa.select(ENTITIES).where(mine, ENTITIES.c.entity_id.in_(ids)))

    # ---------------------------------------------------------------- conversation scopes
    def add_scope(
        self, user_id: str, conversation_id: str, kind: str, item_id: str, at: datetime
    ) -> None:
        row = {"user_id": user_id, "conversation_id": conversation_id, "item_id": item_id}
        stmt = self._insert(SCOPES).values({**row, "kind": kind, "first_at": at})
        self._run(stmt.on_conflict_do_nothing())

    def scoped_ids(self, user_id: str, conversation_id: str, kind: str) -> set[str]:
        query = sa.select(SCOPES.c.item_id).where(
            SCOPES.c.user_id == user_id,
            SCOPES.c.conversation_id == conversation_id,
            SCOPES.c.kind == kind,
        )
        return {str(item_id) for item_id in self._run(query).scalars()}

    def scopes_of(self, item_id: str) -> list[tuple[str, datetime]]:
        query = sa.select(SCOPES.c.conversation_id, SCOPES.c.first_at).where(
            SCOPES.c.item_id == item_id
        )
        return [(row.conversation_id, row.first_at) for row in self._run(query)]

    def delete_scopes(self, item_ids: list[str]) -> None:
        if item_ids:
            self._run(sa.delete(SCOPES).where(SCOPES.c.item_id.in_(item_ids)))

    # ---------------------------------------------------------------- facts
    def current_facts(self, subject_id: str, predicate: str) -> list[Fact]:
        return self._facts(
            FACTS.c.subject_id == subject_id,
            FACTS.c.predicate == predicate,
            FACTS.c.valid_to.is_(None),
        )

    def fact(self, fact_id: str) -> Fact:
        return self._facts(FACTS.c.fact_id == fact_id)[0]

    def insert_fact(self, values: dict[str, Any]) -> None:
        self._run(sa.insert(FACTS).values(values))

    def update_fact(self, fact_id: str, values: dict[str, Any]) -> None:
        self._run(sa.update(FACTS).where(FACTS.c.fact_id == fact_id).values(values))

    def facts_touching(self, user_id: str, entity_id: str, as_of: datetime | None) -> list[Fact]:
        touches = sa.or_(FACTS.c.subject_id == entity_id, FACTS.c.object_id == entity_id)
        return self._facts(_checked(FACTS.c.user_id) == user_id, touches, _valid_at(as_of))

    def neighbors(
        self, user_id: str, start_id: str, depth: int, as_of: datetime | None
    ) -> list[tuple[Entity, int]]:
        """One recursive CTE: each hop follows facts in either direction (by the subject
        and object indexes); ``UNION`` keeps each (node, distance) once."""
        base = sa.select(
            sa.literal(start_id, sa.String).label("node"), sa.literal(0).label("hops")
        ).cte("walk", recursive=True)
        joined, far = _edge_step(base)
        step = (
            sa.select(far.label("node"), (base.c.hops + 1).label("hops"))
            .select_from(joined)
            .where(base.c.hops < depth, *_edges(user_id, as_of))
        )
        walk = base.union(step)
        nearest = (
            sa.select(walk.c.node, sa.func.min(walk.c.hops).label("hops"))
            .where(walk.c.node != start_id)
            .group_by(walk.c.node)
            .subquery()
        )
        query = (
            sa.select(ENTITIES, nearest.c.hops)
            .join(nearest, nearest.c.node == ENTITIES.c.entity_id)
            .order_by(nearest.c.hops, ENTITIES.c.name)
        )
        return [(entity_row(row), row.hops) for row in self._run(query)]

    def paths(
        self,
        user_id: str,
        a_id: str,
        b_id: str,
        max_depth: int,
        limit: int,
        as_of: datetime | None,
    ) -> list[list[Fact]]:
        """One recursive CTE carrying each path's nodes (``/id/id/``, so no node is
        visited twice) and facts."""
        base = sa.select(
            sa.literal(a_id, sa.String).label("node"),
            sa.literal(0).label("hops"),
            sa.literal(f"/{a_id}/", sa.String).label("nodes"),
            sa.literal("", sa.String).label("facts"),
        ).cte("path", recursive=True)
        joined, far = _edge_step(base)
        step = (
            sa.select(
                far.label("node"),
                (base.c.hops + 1).label("hops"),
                base.c.nodes.concat(far).concat("/").label("nodes"),
                base.c.facts.concat(FACTS.c.fact_id).concat("/").label("facts"),
            )
            .select_from(joined)
            .where(
                base.c.hops < max_depth,
                base.c.node != b_id,
                ~base.c.nodes.contains(sa.literal("/").concat(far).concat("/")),
                *_edges(user_id, as_of),
            )
        )
        walk = base.union_all(step)
        query = (
            sa.select(walk.c.facts)
            .where(walk.c.node == b_id, walk.c.hops > 0)
            .order_by(walk.c.hops, walk.c.facts)
            .limit(limit)
        )
        found = [row.facts.strip("/").split("/") for row in self._run(query)]
        wanted = {fact_id for path in found for fact_id in path}
        by_id = {f.fact_id: f for f in self._facts(FACTS.c.fact_id.in_(wanted))} if wanted else {}
        return [[by_id[fact_id] for fact_id in path] for path in found]

    # ---------------------------------------------------------------- history
    def record_change(self, row: dict[str, Any]) -> None:
        self._run(sa.insert(HISTORY).values(row))

    def history(self, user_id: str, limit: int) -> list[dict[str, Any]]:
        query = (
            sa.select(HISTORY)
            .where(HISTORY.c.user_id == user_id)
            .order_by(HISTORY.c.change_id.desc())
            .limit(limit)
        )
        return [dict(row._mapping) for row in self._run(query)]

    # ---------------------------------------------------------------- export / import
    def dump(self, user_id: str) -> dict[str, list[dict[str, Any]]]:
        def rows(query: sa.Select[Any]) -> list[dict[str, Any]]:
            return [dict(row._mapping) for row in self._run(query)]

        history = [c for c in HISTORY.c if c.name != "change_id"]
        return {
            "entities": rows(
                sa.select(ENTITIES)
                .where(ENTITIES.c.user_id == user_id)
                .order_by(ENTITIES.c.created_at, ENTITIES.c.entity_id)
            ),
            "facts": rows(
                sa.select(FACTS)
                .where(FACTS.c.user_id == user_id)
                .order_by(FACTS.c.valid_from, FACTS.c.fact_id)
            ),
            "history": rows(
                sa.select(*history)
                .where(HISTORY.c.user_id == user_id)
                .order_by(HISTORY.c.change_id)
            ),
            "scopes": rows(
                sa.select(SCOPES)
                .where(SCOPES.c.user_id == user_id)
                .order_by(SCOPES.c.conversation_id, SCOPES.c.first_at, SCOPES.c.item_id)
            ),
        }

    def load(self, rows: dict[str, list[dict[str, Any]]]) -> None:
        tables = ((ENTITIES, "entities"), (FACTS, "facts"), (HISTORY, "history"))
        for table, name in (*tables, (SCOPES, "scopes")):
            if rows.get(name):
                _execute(self._target, sa.insert(table), rows[name])

    def graph_users(self) -> list[str]:
        query = sa.select(ENTITIES.c.user_id).distinct().order_by(ENTITIES.c.user_id)
        return [str(user_id) for user_id in self._run(query).scalars()]

    # ---------------------------------------------------------------- pending extractions
    def queue(self, row: dict[str, Any]) -> None:
        self._run(sa.insert(PENDING).values(row))

    def waiting(self, limit: int) -> list[PendingRow]:
        query = (
            sa.select(PENDING)
            .where(PENDING.c.status == "pending")
            .order_by(PENDING.c.updated_at, PENDING.c.pending_id)
            .limit(limit)
        )
        return [
            PendingRow(
                r.pending_id, r.user_id, r.turn_ref, r.text, r.observed_at, r.conversation_id
            )
            for r in self._run(query)
        ]

    def attempts(self, pending_id: str) -> int:
        query = sa.select(PENDING.c.attempts).where(PENDING.c.pending_id == pending_id)
        return int(self._run(query).scalar_one())

    def update_pending(self, pending_id: str, values: dict[str, Any]) -> None:
        self._run(sa.update(PENDING).where(PENDING.c.pending_id == pending_id).values(values))

    def dequeue(self, pending_id: str) -> None:
        self._run(sa.delete(PENDING).where(PENDING.c.pending_id == pending_id))

    def statuses(self) -> dict[str, int]:
        query = sa.select(PENDING.c.status, sa.func.count()).group_by(PENDING.c.status)
        return {status: int(n) for status, n in self._run(query)}
