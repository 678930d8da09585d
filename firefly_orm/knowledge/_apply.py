"""The update rule, entities' upkeep, merging and forgetting, over any :class:`GraphRows`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from firefly_orm.entry import utcnow
from firefly_orm.errors import EntryValidationError
from firefly_orm.knowledge._backend import EntityUpdate, GraphRows, new_id, normalize
from firefly_orm.knowledge._model import Entity, Fact, FactChange, Outcome

__all__ = [
    "NewFact",
    "Rule",
    "apply_fact",
    "delete_entity",
    "ensure_entity",
    "merge_entities",
    "normalize_predicate",
    "record_change",
]


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
    #: Predicates the subject held that mean the same (closest first; see ``_meaning``).
    alike: tuple[str, ...] = ()
    #: The conversation that says it (its entities and the fact are scoped to it).
    conversation_id: str | None = None


@dataclass(frozen=True)
class Rule:
    """The update rule's settings (see :class:`~firefly_orm.knowledge.KnowledgeGraph`)."""

    multi_valued: frozenset[str]
    min_confidence: float
    actor: str


def record_change(
    rows: GraphRows,
    user_id: str,
    action: str,
    actor: str,
    *,
    entity_id: str | None = None,
    fact_id: str | None = None,
    detail: dict[str, Any] | None = None,
) -> None:
    """Append one row to the history (who, what, when)."""
    rows.record_change(
        {
            "user_id": user_id,
            "action": action,
            "actor": actor,
            "entity_id": entity_id,
            "fact_id": fact_id,
            "detail": detail or {},
            "at": utcnow(),
        }
    )


def ensure_entity(
    rows: GraphRows,
    user_id: str,
    mention: EntityUpdate,
    actor: str,
    *,
    count: bool = True,
    conversation_id: str | None = None,
) -> Entity:
    """The user's entity for ``mention`` (by name or alias), created if new, updated if told more.

    Creation cannot duplicate: the database keeps one row per user and
    normalised name (:meth:`GraphRows.insert_entity`); a writer that loses the
    race reads the winner's row and counts its mention there.  ``count``: add
    one to the mention count.  ``conversation_id``: the conversation that
    mentions it (recorded once per conversation).
    """
    entity = _ensure_entity(rows, user_id, mention, actor, count)
    if conversation_id is not None:
        rows.add_scope(user_id, conversation_id, "entity", entity.entity_id, utcnow())
    return entity


def _ensure_entity(
    rows: GraphRows, user_id: str, mention: EntityUpdate, actor: str, count: bool
) -> Entity:
    name = mention.name.strip()
    if not name:
        raise EntryValidationError("name", "an entity needs a non-empty name")
    now = utcnow()
    found = rows.find_entity(user_id, name)
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
        inserted = rows.insert_entity(values)
        found = rows.find_entity(user_id, name)
        assert found is not None  # inserted here or by the writer we raced
        if inserted:
            detail = {"name": name}
            record_change(
                rows, user_id, "add_entity", actor, entity_id=found.entity_id, detail=detail
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
    updated = rows.update_entity(found.entity_id, {**changes, "updated_at": now}, int(count))
    if changes:
        changed: dict[str, Any] = {"changed": sorted(changes)}
        record_change(
            rows, user_id, "update_entity", actor, entity_id=found.entity_id, detail=changed
        )
    return updated


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


def merge_entities(rows: GraphRows, user_id: str, kept: Entity, gone: Entity, actor: str) -> None:
    """Fold ``gone`` into ``kept``: facts re-pointed, name and aliases as aliases,
    attributes (``kept``'s win) and mentions added; ``gone`` deleted."""
    rows.repoint_facts(gone.entity_id, kept.entity_id)
    for conversation_id, first_at in rows.scopes_of(gone.entity_id):
        rows.add_scope(user_id, conversation_id, "entity", kept.entity_id, first_at)
    rows.delete_scopes([gone.entity_id])
    rows.delete_entity_row(gone.entity_id)
    ensure_entity(
        rows,
        user_id,
        EntityUpdate(
            kept.name,
            entity_type=gone.entity_type,
            attributes={**gone.attributes, **kept.attributes},
            aliases=(gone.name, *gone.aliases),
        ),
        actor,
        count=False,
    )
    rows.update_entity(kept.entity_id, {}, gone.mentions)
    detail = {"absorbed": gone.entity_id}
    record_change(rows, user_id, "merge", actor, entity_id=kept.entity_id, detail=detail)


def delete_entity(rows: GraphRows, user_id: str, entity: Entity, actor: str) -> int:
    """Delete ``entity``, its facts and their history; one ``forget`` row stays; the facts."""
    removed = rows.delete_entity(entity.entity_id)
    detail = {"facts": removed}
    record_change(rows, user_id, "forget", actor, entity_id=entity.entity_id, detail=detail)
    return removed


def _same_object(fact: Fact, object_id: str | None, value: str) -> bool:
    if object_id is not None:
        return fact.object_id == object_id
    return fact.object_id is None and normalize(fact.object) == normalize(value)


def apply_fact(rows: GraphRows, user_id: str, new: NewFact, rule: Rule) -> FactChange:
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

    When the subject holds no current fact of the predicate, the predicates of
    ``new.alike`` (matched by meaning before this unit of work) are tried in
    order: the first one still held is the slot, and the fact is recorded
    under that predicate (the history's ``detail`` keeps the one ``said``).
    """
    predicate = normalize_predicate(new.predicate)
    actor = rule.actor
    if new.confidence < rule.min_confidence:
        detail: dict[str, Any] = {
            "predicate": predicate,
            "reason": "below min_confidence",
            "confidence": new.confidence,
        }
        record_change(rows, user_id, "ignore", actor, detail=detail)
        return FactChange("ignore", None)
    scope = new.conversation_id
    subject = ensure_entity(rows, user_id, EntityUpdate(new.subject), actor, conversation_id=scope)
    object_id: str | None = None
    value = new.object.strip()
    if not value:
        raise EntryValidationError("object", "a fact needs a non-empty object")
    if new.object_is_entity:
        found = ensure_entity(rows, user_id, EntityUpdate(value), actor, conversation_id=scope)
        object_id = found.entity_id
    said = predicate
    current = rows.current_facts(subject.entity_id, predicate)
    for other in () if current else new.alike:  # re-checked here: does it still hold?
        current = rows.current_facts(subject.entity_id, other)
        if current:
            predicate = other  # the slot that means the same keeps its predicate
            break
    evidence = [new.evidence] if new.evidence else []
    said_as = {"said": said} if said != predicate else {}
    for fact in current:
        if _same_object(fact, object_id, value):
            outcome: Outcome = "update" if new.confidence != fact.confidence else "confirm"
            merged = fact.evidence + [e for e in evidence if e not in fact.evidence]
            rows.update_fact(fact.fact_id, {"evidence": merged, "confidence": new.confidence})
            detail = {"evidence": evidence, "confidence": new.confidence, **said_as}
            record_change(rows, user_id, outcome, actor, fact_id=fact.fact_id, detail=detail)
            _scope_fact(rows, user_id, scope, fact.fact_id)
            return FactChange(outcome, rows.fact(fact.fact_id))
    others = [] if predicate in rule.multi_valued else current
    if others and new.observed_at < max(f.valid_from for f in others):
        detail = {"reason": "older than the current fact", "object": value, "evidence": evidence}
        detail.update(said_as)
        record_change(rows, user_id, "ignore", actor, fact_id=others[-1].fact_id, detail=detail)
        return FactChange("ignore", others[-1])
    for fact in others:
        rows.update_fact(fact.fact_id, {"valid_to": new.observed_at})
    fact_id = new_id()
    rows.insert_fact(
        {
            "fact_id": fact_id,
            "user_id": user_id,
            "subject_id": subject.entity_id,
            "predicate": predicate,
            "object_id": object_id,
            "object_value": None if object_id is not None else value,
            "valid_from": new.observed_at,
            "valid_to": None,
            "evidence": evidence,
            "confidence": new.confidence,
            "created_at": new.observed_at,
        }
    )
    outcome = "supersede" if others else "add"
    closed = [f.fact_id for f in others]
    detail = {"evidence": evidence, "superseded": closed, **said_as}
    record_change(rows, user_id, outcome, actor, fact_id=fact_id, detail=detail)
    _scope_fact(rows, user_id, scope, fact_id)
    return FactChange(outcome, rows.fact(fact_id), [rows.fact(f) for f in closed])


def _scope_fact(rows: GraphRows, user_id: str, conversation_id: str | None, fact_id: str) -> None:
    if conversation_id is not None:
        rows.add_scope(user_id, conversation_id, "fact", fact_id, utcnow())
