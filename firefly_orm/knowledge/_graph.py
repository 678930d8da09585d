"""KnowledgeGraph and EntityMemory: the layers over the graph's tables."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, TypeVar

import sqlalchemy as sa

from firefly_orm.bridges._steps import (
    MemoryLayer,
    Operation,
    Transaction,
    async_method,
    sync_method,
)
from firefly_orm.entry import utcnow, validate_user_id
from firefly_orm.entry._rules import check_unit_interval
from firefly_orm.errors import EntryValidationError
from firefly_orm.knowledge._apply import (
    NewFact,
    Rule,
    apply_fact,
    neighbors_of,
    normalize_predicate,
    paths_between,
)
from firefly_orm.knowledge._model import Entity, Extraction, Fact, FactChange
from firefly_orm.knowledge._rows import (
    EntityUpdate,
    Target,
    _run,
    delete_entity,
    ensure_entity,
    entity_row,
    facts_of,
    find_entity,
    normalize,
    record_change,
    valid_at,
)
from firefly_orm.protocols import MemoryStore, RunsStatements, UnitOfWork
from firefly_orm.sql import SessionBoundStore, SQLAlchemyStore
from firefly_orm.sql._graph import ENTITIES, FACTS, HISTORY

__all__ = ["EntityMemory", "KnowledgeGraph", "on_target"]

T = TypeVar("T")


def on_target(uow: UnitOfWork, fn: Callable[..., T], *args: Any) -> T:
    """``fn(target, *args)`` inside ``uow`` (a SQL store's unit of work)."""
    entries = uow.entries
    if not isinstance(entries, RunsStatements):
        raise TypeError("the knowledge graph needs a SQL store's unit of work")
    return entries.run_statements(fn, *args)


def _check_store(store: MemoryStore) -> MemoryStore:
    if not isinstance(store, SQLAlchemyStore | SessionBoundStore):
        raise EntryValidationError(
            "store", f"the knowledge graph lives in a SQL store (SQLite, PostgreSQL), not {store!r}"
        )
    return store


def _check_depth(name: str, depth: int) -> int:
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= 10:
        raise EntryValidationError(name, f"give a whole number of hops from 1 to 10, not {depth!r}")
    return depth


def _aware(name: str, when: datetime | None) -> datetime | None:
    if when is not None and (not isinstance(when, datetime) or when.tzinfo is None):
        raise EntryValidationError(name, "give a timezone-aware datetime")
    return when


def _name(field: str, value: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise EntryValidationError(field, "give a non-empty name")
    if "\x00" in value:
        raise EntryValidationError(field, "a name may not contain NUL characters")
    return value


def _required(target: Target, user_id: str, name: str) -> Entity:
    found = find_entity(target, user_id, name)
    if found is None:
        raise KeyError(f"no entity {name!r} for user {user_id!r}")
    return found


class EntityMemory(MemoryLayer):
    """The entities of each user's graph: read, search, merge, forget.

    Args:
        store: A SQL store (:class:`~firefly_orm.sql.SQLAlchemyStore` or its
            session-bound view); its database holds the graph's tables
            (migration ``0008_knowledge_graph``).
        actor: Who the history names for changes made here.
    """

    def __init__(self, store: MemoryStore, *, actor: str = "app") -> None:
        super().__init__(_check_store(store))
        self._actor = _name("actor", actor)

    def _get(self, user_id: str, name: str) -> Operation[Entity | None]:
        """The user's entity called ``name`` (its name or an alias), or ``None``."""
        validate_user_id(user_id)
        _name("name", name)
        return (yield from Transaction.read(on_target, find_entity, user_id, name))

    def _list(self, user_id: str, *, limit: int = 100) -> Operation[builtins.list[Entity]]:
        """The user's entities, most mentioned first (at most ``limit``)."""
        validate_user_id(user_id)
        query = (
            sa.select(ENTITIES)
            .where(ENTITIES.c.user_id == user_id)
            .order_by(ENTITIES.c.mentions.desc(), ENTITIES.c.name)
            .limit(limit)
        )
        return (yield from Transaction.read(on_target, _entities, query))

    def _search(
        self, user_id: str, text: str, *, limit: int = 20
    ) -> Operation[builtins.list[Entity]]:
        """The user's entities whose name or an alias contains ``text`` (case-insensitive)."""
        validate_user_id(user_id)
        needle = normalize(_name("text", text))
        query = (
            sa.select(ENTITIES)
            .where(
                ENTITIES.c.user_id == user_id,
                sa.or_(
                    ENTITIES.c.norm_name.contains(needle, autoescape=True),
                    sa.func.lower(sa.cast(ENTITIES.c.aliases, sa.Text)).contains(
                        needle, autoescape=True
                    ),
                ),
            )
            .order_by(ENTITIES.c.mentions.desc(), ENTITIES.c.name)
            .limit(limit)
        )
        return (yield from Transaction.read(on_target, _entities, query))

    def _merge(self, user_id: str, keep: str, absorb: str) -> Operation[Entity]:
        """Merge entity ``absorb`` into ``keep``: one transaction.

        ``keep`` gains ``absorb``'s name and aliases as aliases, its attributes
        (``keep``'s win) and mention count; every fact of ``absorb`` is
        re-pointed to ``keep``; ``absorb`` is deleted.  Raises ``KeyError``
        when either is unknown, :class:`EntryValidationError` when both are one.
        """
        validate_user_id(user_id)
        return (
            yield from Transaction.write(
                on_target,
                _merge_entities,
                user_id,
                _name("keep", keep),
                _name("absorb", absorb),
                self._actor,
            )
        )

    def _forget(self, user_id: str, name: str) -> Operation[int]:
        """Delete the entity ``name``, every fact it is in and their history; the facts' count.

        The history keeps one ``forget`` row naming only the entity's id.
        Raises ``KeyError`` when the entity is unknown.
        """
        validate_user_id(user_id)
        return (
            yield from Transaction.write(
                on_target, _forget_entity, user_id, _name("name", name), self._actor
            )
        )

    get = sync_method(_get)
    list = sync_method(_list)
    search = sync_method(_search)
    merge = sync_method(_merge)
    forget = sync_method(_forget)
    async_get = async_method(_get)
    async_list = async_method(_list)
    async_search = async_method(_search)
    async_merge = async_method(_merge)
    async_forget = async_method(_forget)


def _entities(target: Target, query: sa.Select[Any]) -> builtins.list[Entity]:
    return [entity_row(row) for row in _run(target, query)]


def _merge_entities(target: Target, user_id: str, keep: str, absorb: str, actor: str) -> Entity:
    kept, gone = _required(target, user_id, keep), _required(target, user_id, absorb)
    if kept.entity_id == gone.entity_id:
        raise EntryValidationError("absorb", f"{absorb!r} and {keep!r} are the same entity")
    for column in (FACTS.c.subject_id, FACTS.c.object_id):
        _run(
            target,
            sa.update(FACTS).where(column == gone.entity_id).values({column: kept.entity_id}),
        )
    _run(target, sa.delete(ENTITIES).where(ENTITIES.c.entity_id == gone.entity_id))
    merged = ensure_entity(
        target,
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
    _run(
        target,
        sa.update(ENTITIES)
        .where(ENTITIES.c.entity_id == kept.entity_id)
        .values(mentions=ENTITIES.c.mentions + gone.mentions),
    )
    record_change(
        target,
        user_id,
        "merge",
        actor,
        entity_id=kept.entity_id,
        detail={"absorbed": gone.entity_id},
    )
    return _required(target, user_id, merged.name)


def _forget_entity(target: Target, user_id: str, name: str, actor: str) -> int:
    entity = _required(target, user_id, name)
    removed = delete_entity(target, entity)
    record_change(
        target, user_id, "forget", actor, entity_id=entity.entity_id, detail={"facts": removed}
    )
    return removed


class KnowledgeGraph(MemoryLayer):
    """A temporal knowledge graph per user, in the entries' SQL database.

    Facts are ``subject --predicate--> object`` (an entity or a literal), each
    true from ``valid_from`` until ``valid_to``.  Recording a fact applies the
    update rule (add / confirm / update / supersede / ignore, see
    :meth:`add_fact`): a fact that stops being true is closed, never deleted,
    so :meth:`facts_about` answers "now" and "as of" any time.  Every change
    is a history row.  Each write is one unit of work; entities are unique
    per user and normalised name, so concurrent writers never duplicate one.

    Args:
        store: A SQL store (:class:`~firefly_orm.sql.SQLAlchemyStore` or its
            session-bound view) at migration ``0008_knowledge_graph`` or later.
        multi_valued: Predicates a subject may hold several objects of at
            once (``"likes"``, ``"knows"``): a new object is added beside the
            others.  Every other predicate is single-valued: a new object
            supersedes the current one.
        min_confidence: Facts below it are ignored (recorded in the history).
        actor: Who the history names for changes made here.
    """

    def __init__(
        self,
        store: MemoryStore,
        *,
        multi_valued: Iterable[str] = (),
        min_confidence: float = 0.0,
        actor: str = "app",
    ) -> None:
        super().__init__(_check_store(store))
        check_unit_interval(min_confidence, "min_confidence")
        self._rule = Rule(
            multi_valued=frozenset(normalize_predicate(p) for p in multi_valued),
            min_confidence=float(min_confidence),
            actor=_name("actor", actor),
        )
        self._entities = EntityMemory(store, actor=actor)

    @property
    def entities(self) -> EntityMemory:
        """The graph's entities (same store, same actor)."""
        return self._entities

    def _add_fact(
        self,
        user_id: str,
        subject: str,
        predicate: str,
        object: str,
        *,
        object_is_entity: bool = True,
        evidence: str | None = None,
        observed_at: datetime | None = None,
        confidence: float = 1.0,
    ) -> Operation[FactChange]:
        """Record ``subject --predicate--> object`` for ``user_id`` by the update rule.

        Compared with the current facts of the same subject (by name or alias)
        and predicate: **confirm** (the same fact holds: ``evidence`` is
        appended), **update** (it holds with another confidence: replaced,
        evidence appended), **add** (nothing holds, or the predicate is
        multi-valued), **supersede** (another object holds: it gets
        ``valid_to = observed_at``, the new fact ``valid_from = observed_at``),
        **ignore** (below ``min_confidence``, or older than the current fact).

        Args:
            user_id: Whose graph.
            subject: The subject entity's name (created when new).
            predicate: The relation (normalised: ``"Lives in"`` is ``lives_in``).
            object: The object entity's name, or a literal value.
            object_is_entity: ``False``: ``object`` is a literal.
            evidence: The turn that says it (a turn id or any reference).
            observed_at: When it was said (default: now); timezone-aware.
            confidence: 0.0-1.0.
        """
        new = _new_fact(
            subject, predicate, object, object_is_entity, evidence, observed_at, confidence
        )
        validate_user_id(user_id)
        return (yield from Transaction.write(on_target, apply_fact, user_id, new, self._rule))

    def _record(
        self,
        user_id: str,
        extraction: Extraction,
        *,
        evidence: str | None = None,
        observed_at: datetime | None = None,
    ) -> Operation[builtins.list[FactChange]]:
        """Record a model's :class:`Extraction` in one transaction: entities, then each triple.

        Each entity is created or updated (mention count, type, attributes,
        aliases); each triple goes through the rule of :meth:`add_fact`.
        """
        return (yield from self.recording(user_id, extraction, evidence, observed_at))

    def recording(
        self,
        user_id: str,
        extraction: Extraction,
        evidence: str | None,
        observed_at: datetime | None,
        finish: Callable[[Target], object] | None = None,
    ) -> Transaction[builtins.list[FactChange]]:
        """The transaction of :meth:`record` (checked first), then ``finish(target)`` in it."""
        validate_user_id(user_id)
        if not isinstance(extraction, Extraction):
            raise EntryValidationError("extraction", "give an Extraction")
        when = _aware("observed_at", observed_at) or utcnow()
        facts = [
            _new_fact(
                t.subject, t.predicate, t.object, t.object_is_entity, evidence, when, t.confidence
            )
            for t in extraction.triples
        ]
        mentions = [
            EntityUpdate(
                _name("name", e.name),
                _name("type", e.type),
                dict(e.attributes),
                tuple(_name("aliases", alias) for alias in e.aliases),
            )
            for e in extraction.entities
        ]
        return Transaction.write(
            on_target, _record_all, user_id, mentions, facts, self._rule, finish
        )

    def _facts_about(
        self, user_id: str, entity: str, *, as_of: datetime | None = None
    ) -> Operation[builtins.list[Fact]]:
        """The facts ``entity`` is in (subject or object): current, or true at ``as_of``."""
        validate_user_id(user_id)
        _name("entity", entity)
        when = _aware("as_of", as_of)
        return (yield from Transaction.read(on_target, _facts_about, user_id, entity, when))

    def _history(
        self, user_id: str, *, limit: int = 100
    ) -> Operation[builtins.list[dict[str, Any]]]:
        """The user's latest changes, newest first (action, actor, ids, detail, time)."""
        validate_user_id(user_id)
        return (yield from Transaction.read(on_target, _history_rows, user_id, limit))

    def _neighbors(
        self, user_id: str, entity: str, depth: int = 1
    ) -> Operation[builtins.list[tuple[Entity, int]]]:
        """Entities within ``depth`` hops of ``entity`` over current facts, with their distance.

        Raises ``KeyError`` when the entity is unknown.
        """
        validate_user_id(user_id)
        _name("entity", entity)
        _check_depth("depth", depth)
        return (yield from Transaction.read(on_target, _neighbors, user_id, entity, depth))

    def _paths(
        self, user_id: str, a: str, b: str, max_depth: int = 3, *, limit: int = 20
    ) -> Operation[builtins.list[builtins.list[Fact]]]:
        """Paths from ``a`` to ``b`` over current facts (each a list of facts), shortest first.

        A path visits no entity twice; at most ``limit`` paths.  Raises
        ``KeyError`` when an entity is unknown.
        """
        validate_user_id(user_id)
        _check_depth("max_depth", max_depth)
        return (
            yield from Transaction.read(
                on_target, _paths, user_id, _name("a", a), _name("b", b), max_depth, limit
            )
        )

    add_fact = sync_method(_add_fact)
    record = sync_method(_record)
    facts_about = sync_method(_facts_about)
    history = sync_method(_history)
    neighbors = sync_method(_neighbors)
    paths = sync_method(_paths)
    async_add_fact = async_method(_add_fact)
    async_record = async_method(_record)
    async_facts_about = async_method(_facts_about)
    async_history = async_method(_history)
    async_neighbors = async_method(_neighbors)
    async_paths = async_method(_paths)


def _new_fact(
    subject: str,
    predicate: str,
    obj: str,
    object_is_entity: bool,
    evidence: str | None,
    observed_at: datetime | None,
    confidence: float,
) -> NewFact:
    """A checked :class:`NewFact` (bad input raises before anything is written)."""
    normalize_predicate(predicate)
    check_unit_interval(confidence, "confidence")
    if evidence is not None and not isinstance(evidence, str):
        raise EntryValidationError("evidence", "give a turn reference (a string) or None")
    return NewFact(
        subject=_name("subject", subject),
        predicate=predicate,
        object=_name("object", obj),
        object_is_entity=bool(object_is_entity),
        observed_at=_aware("observed_at", observed_at) or utcnow(),
        evidence=evidence,
        confidence=float(confidence),
    )


def _record_all(
    target: Target,
    user_id: str,
    mentions: builtins.list[EntityUpdate],
    facts: builtins.list[NewFact],
    rule: Rule,
    finish: Callable[[Target], object] | None,
) -> builtins.list[FactChange]:
    for mention in mentions:
        ensure_entity(target, user_id, mention, rule.actor)
    changes = [apply_fact(target, user_id, fact, rule) for fact in facts]
    if finish is not None:
        finish(target)
    return changes


def _facts_about(
    target: Target, user_id: str, name: str, as_of: datetime | None
) -> builtins.list[Fact]:
    entity = find_entity(target, user_id, name)
    if entity is None:
        return []
    touches = sa.or_(FACTS.c.subject_id == entity.entity_id, FACTS.c.object_id == entity.entity_id)
    return facts_of(target, FACTS.c.user_id == user_id, touches, valid_at(as_of))


def _history_rows(target: Target, user_id: str, limit: int) -> builtins.list[dict[str, Any]]:
    query = (
        sa.select(HISTORY)
        .where(HISTORY.c.user_id == user_id)
        .order_by(HISTORY.c.change_id.desc())
        .limit(limit)
    )
    return [dict(row._mapping) for row in _run(target, query)]


def _neighbors(
    target: Target, user_id: str, name: str, depth: int
) -> builtins.list[tuple[Entity, int]]:
    return neighbors_of(target, user_id, _required(target, user_id, name), depth)


def _paths(
    target: Target, user_id: str, a: str, b: str, max_depth: int, limit: int
) -> builtins.list[builtins.list[Fact]]:
    start, end = _required(target, user_id, a), _required(target, user_id, b)
    return paths_between(target, user_id, start, end, max_depth, limit)
