"""The update rule and the traversals (sync functions over a unit of work's target)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from firefly_orm.errors import EntryValidationError
from firefly_orm.knowledge._model import Entity, Fact, FactChange, Outcome
from firefly_orm.knowledge._rows import (
    EntityUpdate,
    Target,
    _run,
    ensure_entity,
    entity_row,
    facts_of,
    new_id,
    normalize,
    record_change,
)
from firefly_orm.sql._graph import ENTITIES, FACTS

__all__ = ["NewFact", "Rule", "apply_fact", "neighbors_of", "normalize_predicate", "paths_between"]


def normalize_predicate(predicate: str) -> str:
    """``"Lives in"`` -> ``"lives_in"``: lower case, words joined by ``_``."""
    words = predicate.replace("_", " ").replace("-", " ").split()
    if not words or "\x00" in predicate:
        raise EntryValidationError("predicate", "give a non-empty predicate without NUL")
    return "_".join(words).casefold()


@dataclass(frozen=True)
class NewFact:
    """One fact to record (names resolved by the rule)."""

    subject: str
    predicate: str
    object: str
    object_is_entity: bool
    observed_at: datetime
    evidence: str | None
    confidence: float


@dataclass(frozen=True)
class Rule:
    """The update rule's settings (see :class:`~firefly_orm.knowledge.KnowledgeGraph`)."""

    multi_valued: frozenset[str]
    min_confidence: float
    actor: str


def _same_object(fact: Fact, object_id: str | None, value: str) -> bool:
    if object_id is not None:
        return fact.object_id == object_id
    return fact.object_id is None and normalize(fact.object) == normalize(value)


def _one(target: Target, fact_id: str) -> Fact:
    return facts_of(target, FACTS.c.fact_id == fact_id)[0]


def apply_fact(target: Target, user_id: str, new: NewFact, rule: Rule) -> FactChange:
    """Compare ``new`` with the current facts of its subject and predicate; act; log it.

    * **confirm**: the same fact holds already: the evidence is appended;
    * **update**: the same fact holds with another confidence: it takes the
      new confidence, the evidence is appended;
    * **add**: nothing holds for this subject and predicate (or the predicate
      is multi-valued): a new fact from ``observed_at``;
    * **supersede**: another object holds for a single-valued predicate: it
      gets ``valid_to = observed_at`` and the new fact ``valid_from =
      observed_at``; both keep their evidence;
    * **ignore**: the new fact is below ``min_confidence``, or older than the
      fact that holds (stale news does not overwrite the present).
    """
    predicate = normalize_predicate(new.predicate)
    actor = rule.actor
    if new.confidence < rule.min_confidence:
        record_change(
            target,
            user_id,
            "ignore",
            actor,
            detail={
                "predicate": predicate,
                "reason": "below min_confidence",
                "confidence": new.confidence,
            },
        )
        return FactChange("ignore", None)
    subject = ensure_entity(target, user_id, EntityUpdate(new.subject), actor)
    object_id: str | None = None
    value = new.object.strip()
    if not value:
        raise EntryValidationError("object", "a fact needs a non-empty object")
    if new.object_is_entity:
        object_id = ensure_entity(target, user_id, EntityUpdate(value), actor).entity_id
    current = facts_of(
        target,
        FACTS.c.subject_id == subject.entity_id,
        FACTS.c.predicate == predicate,
        FACTS.c.valid_to.is_(None),
    )
    evidence = [new.evidence] if new.evidence else []
    for fact in current:
        if _same_object(fact, object_id, value):
            outcome: Outcome = "update" if new.confidence != fact.confidence else "confirm"
            merged = fact.evidence + [e for e in evidence if e not in fact.evidence]
            _run(
                target,
                sa.update(FACTS)
                .where(FACTS.c.fact_id == fact.fact_id)
                .values(evidence=merged, confidence=new.confidence),
            )
            record_change(
                target,
                user_id,
                outcome,
                actor,
                fact_id=fact.fact_id,
                detail={"evidence": evidence, "confidence": new.confidence},
            )
            return FactChange(outcome, _one(target, fact.fact_id))
    others = [] if predicate in rule.multi_valued else current
    if others and new.observed_at < max(f.valid_from for f in others):
        record_change(
            target,
            user_id,
            "ignore",
            actor,
            fact_id=others[-1].fact_id,
            detail={"reason": "older than the current fact", "object": value, "evidence": evidence},
        )
        return FactChange("ignore", others[-1])
    for fact in others:
        _run(
            target,
            sa.update(FACTS)
            .where(FACTS.c.fact_id == fact.fact_id)
            .values(valid_to=new.observed_at),
        )
    fact_id = new_id()
    _run(
        target,
        sa.insert(FACTS).values(
            fact_id=fact_id,
            user_id=user_id,
            subject_id=subject.entity_id,
            predicate=predicate,
            object_id=object_id,
            object_value=None if object_id is not None else value,
            valid_from=new.observed_at,
            valid_to=None,
            evidence=evidence,
            confidence=new.confidence,
            created_at=new.observed_at,
        ),
    )
    outcome = "supersede" if others else "add"
    closed = [f.fact_id for f in others]
    record_change(
        target,
        user_id,
        outcome,
        actor,
        fact_id=fact_id,
        detail={"evidence": evidence, "superseded": closed},
    )
    return FactChange(outcome, _one(target, fact_id), [_one(target, f) for f in closed])


def _edge_step(walk: Any, user_id: str) -> tuple[Any, Any]:
    """The current edges touching ``walk.c.node`` (either direction) and their far end."""
    far = sa.case((FACTS.c.subject_id == walk.c.node, FACTS.c.object_id), else_=FACTS.c.subject_id)
    joined = walk.join(
        FACTS,
        sa.or_(FACTS.c.subject_id == walk.c.node, FACTS.c.object_id == walk.c.node),
    )
    return joined, far


def _current_edges(user_id: str) -> list[sa.ColumnElement[bool]]:
    return [FACTS.c.user_id == user_id, FACTS.c.object_id.is_not(None), FACTS.c.valid_to.is_(None)]


def neighbors_of(
    target: Target, user_id: str, start: Entity, depth: int
) -> list[tuple[Entity, int]]:
    """Entities within ``depth`` hops of ``start`` over current facts, nearest first.

    One recursive CTE: each hop follows facts in either direction (by the
    subject and object indexes); ``UNION`` keeps each (node, distance) once.
    """
    base = sa.select(
        sa.literal(start.entity_id, sa.String).label("node"), sa.literal(0).label("hops")
    ).cte("walk", recursive=True)
    joined, far = _edge_step(base, user_id)
    step = (
        sa.select(far.label("node"), (base.c.hops + 1).label("hops"))
        .select_from(joined)
        .where(base.c.hops < depth, *_current_edges(user_id))
    )
    walk = base.union(step)
    nearest = (
        sa.select(walk.c.node, sa.func.min(walk.c.hops).label("hops"))
        .where(walk.c.node != start.entity_id)
        .group_by(walk.c.node)
        .subquery()
    )
    query = (
        sa.select(ENTITIES, nearest.c.hops)
        .join(nearest, nearest.c.node == ENTITIES.c.entity_id)
        .order_by(nearest.c.hops, ENTITIES.c.name)
    )
    return [(entity_row(row), row.hops) for row in _run(target, query)]


def paths_between(
    target: Target, user_id: str, a: Entity, b: Entity, max_depth: int, limit: int
) -> list[list[Fact]]:
    """Simple paths from ``a`` to ``b`` over current facts, shortest first.

    One recursive CTE carrying each path's nodes (``/id/id/``, so no node is
    visited twice) and facts.
    """
    base = sa.select(
        sa.literal(a.entity_id, sa.String).label("node"),
        sa.literal(0).label("hops"),
        sa.literal(f"/{a.entity_id}/", sa.String).label("nodes"),
        sa.literal("", sa.String).label("facts"),
    ).cte("path", recursive=True)
    joined, far = _edge_step(base, user_id)
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
            base.c.node != b.entity_id,
            ~base.c.nodes.contains(sa.literal("/").concat(far).concat("/")),
            *_current_edges(user_id),
        )
    )
    walk = base.union_all(step)
    query = (
        sa.select(walk.c.facts)
        .where(walk.c.node == b.entity_id, walk.c.hops > 0)
        .order_by(walk.c.hops, walk.c.facts)
        .limit(limit)
    )
    found = [row.facts.strip("/").split("/") for row in _run(target, query)]
    wanted = {fact_id for path in found for fact_id in path}
    by_id = {f.fact_id: f for f in facts_of(target, FACTS.c.fact_id.in_(wanted))} if wanted else {}
    return [[by_id[fact_id] for fact_id in path] for path in found]
