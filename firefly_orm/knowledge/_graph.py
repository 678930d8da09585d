"""KnowledgeGraph and EntityMemory: the layers over the graph's tables."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

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
    delete_entity,
    ensure_entity,
    merge_entities,
    normalize_predicate,
)
from firefly_orm.knowledge._backend import EntityUpdate, GraphRows, normalize
from firefly_orm.knowledge._meaning import DEFAULT_MEANING_THRESHOLD, Meaning
from firefly_orm.knowledge._model import Entity, Extraction, Fact, FactChange
from firefly_orm.knowledge._rows import SqlRows
from firefly_orm.knowledge._scoped import check_scope, entities_in, facts_about_in, search_in
from firefly_orm.knowledge._transfer import graph_from_json, graph_to_json
from firefly_orm.long_term._embedding import EmbedderLike
from firefly_orm.protocols import (
    MemoryStore,
    RunsDatabaseCalls,
    RunsStatements,
    UnitOfWork,
    declares,
)
from firefly_orm.sql import SessionBoundStore, SQLAlchemyStore

__all__ = ["EntityMemory", "GraphAccess", "KnowledgeGraph"]

T = TypeVar("T")


class GraphAccess:
    """Runs ``fn(rows, *args)`` with the store's :class:`GraphRows`, inside a unit of work.

    The SQL stores (SQLite, PostgreSQL, a session-bound view) run the graph's
    statements in the unit of work's transaction (``RunsStatements``); a
    MongoDB store (``RunsDatabaseCalls``) keeps it in collections beside the
    entries'.  Any other store is refused.
    """

    def __init__(self, store: MemoryStore) -> None:
        self._documents: GraphRows | None = None
        if declares(store, RunsDatabaseCalls):
            from firefly_orm.knowledge._mongo import MongoRows  # the mongo extra is installed

            self._documents = MongoRows(store)  # type: ignore[arg-type]
        elif not isinstance(store, SQLAlchemyStore | SessionBoundStore):
            raise EntryValidationError(
                "store",
                "the knowledge graph lives in a SQL store (SQLite, PostgreSQL) or a "
                f"MongoDB store, not {store!r}",
            )

    def __call__(self, uow: UnitOfWork, fn: Callable[..., T], /, *args: Any) -> T:
        if self._documents is not None:
            return fn(self._documents, *args)
        entries = uow.entries
        if not isinstance(entries, RunsStatements):
            raise TypeError("the knowledge graph needs a SQL store's unit of work")
        return fn(entries.run_statements(SqlRows), *args)


def _check_depth(name: str, depth: int) -> int:
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= 10:
        raise EntryValidationError(name, f"give a whole number of hops from 1 to 10, not {depth!r}")
    return depth


def _check_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise EntryValidationError("limit", f"give a whole number >= 1, not {limit!r}")
    return limit


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


def _required(rows: GraphRows, user_id: str, name: str) -> Entity:
    found = rows.find_entity(user_id, name)
    if found is None:
        raise KeyError(f"no entity {name!r} for user {user_id!r}")
    return found


class EntityMemory(MemoryLayer):
    """The entities of each user's graph: read, search, merge, forget.

    Args:
        store: A SQL store (:class:`~firefly_orm.sql.SQLAlchemyStore` or its
            session-bound view; the graph's tables come with migration
            ``0008_knowledge_graph``) or a :class:`~firefly_orm.mongo.MongoDBStore`
            (collections beside the entries').
        actor: Who the history names for changes made here.
    """

    def __init__(self, store: MemoryStore, *, actor: str = "app") -> None:
        self._on = GraphAccess(store)
        super().__init__(store)
        self._actor = _name("actor", actor)

    def _get(self, user_id: str, name: str) -> Operation[Entity | None]:
        """The user's entity called ``name`` (its name or an alias), or ``None``."""
        validate_user_id(user_id)
        _name("name", name)
        return (yield from Transaction.read(self._on, _find, user_id, name))

    def _list(
        self, user_id: str, *, limit: int = 100, conversation_id: str | None = None
    ) -> Operation[builtins.list[Entity]]:
        """The user's entities, most mentioned first (at most ``limit``); with
        ``conversation_id``, only those that conversation mentioned."""
        validate_user_id(user_id)
        _check_limit(limit)
        scope = check_scope(conversation_id)
        return (yield from Transaction.read(self._on, entities_in, user_id, limit, scope))

    def _search(
        self, user_id: str, text: str, *, limit: int = 20, conversation_id: str | None = None
    ) -> Operation[builtins.list[Entity]]:
        """The user's entities whose name or an alias contains ``text`` (case-insensitive);
        with ``conversation_id``, only those that conversation mentioned."""
        validate_user_id(user_id)
        needle = normalize(_name("text", text))
        _check_limit(limit)
        scope = check_scope(conversation_id)
        return (yield from Transaction.read(self._on, search_in, user_id, needle, limit, scope))

    def _merge(self, user_id: str, keep: str, absorb: str) -> Operation[Entity]:
        """Merge entity ``absorb`` into ``keep``: one unit of work.

        ``keep`` gains ``absorb``'s name and aliases as aliases, its attributes
        (``keep``'s win) and mention count; every fact of ``absorb`` is
        re-pointed to ``keep``; ``absorb`` is deleted.  Raises ``KeyError``
        when either is unknown, :class:`EntryValidationError` when both are one.
        """
        validate_user_id(user_id)
        return (
            yield from Transaction.write(
                self._on,
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
                self._on, _forget_entity, user_id, _name("name", name), self._actor
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


def _find(rows: GraphRows, user_id: str, name: str) -> Entity | None:
    return rows.find_entity(user_id, name)


def _merge_entities(rows: GraphRows, user_id: str, keep: str, absorb: str, actor: str) -> Entity:
    kept, gone = _required(rows, user_id, keep), _required(rows, user_id, absorb)
    if kept.entity_id == gone.entity_id:
        raise EntryValidationError("absorb", f"{absorb!r} and {keep!r} are the same entity")
    merge_entities(rows, user_id, kept, gone, actor)
    return _required(rows, user_id, kept.name)


def _forget_entity(rows: GraphRows, user_id: str, name: str, actor: str) -> int:
    return delete_entity(rows, user_id, _required(rows, user_id, name), actor)


class KnowledgeGraph(MemoryLayer):
    """A temporal knowledge graph per user, in the entries' database.

    Facts are ``subject --predicate--> object`` (an entity or a literal), each
    true from ``valid_from`` until ``valid_to``.  Recording a fact applies the
    update rule (add / confirm / update / supersede / ignore, see
    :meth:`add_fact`): a fact that stops being true is closed, never deleted,
    so :meth:`facts_about`, :meth:`neighbors` and :meth:`paths` answer "now"
    or "as of" any time.  Every change is a history row.  Entities are unique
    per user and normalised name, so concurrent writers never duplicate one.

    On the SQL stores each write is one unit of work (one transaction).  On
    MongoDB the graph lives in collections beside the entries' and a write is
    a short sequence of single-document writes (see ``firefly_orm.mongo._graph``).

    Args:
        store: A SQL store (:class:`~firefly_orm.sql.SQLAlchemyStore` or its
            session-bound view) at migration ``0008_knowledge_graph`` or
            later, or a :class:`~firefly_orm.mongo.MongoDBStore`.
        multi_valued: Predicates a subject may hold several objects of at
            once (``"likes"``, ``"knows"``): a new object is added beside the
            others.  Every other predicate is single-valued: a new object
            supersedes the current one.
        min_confidence: Facts below it are ignored (recorded in the history).
        actor: Who the history names for changes made here.
        embedder: Compare predicates by meaning too (a pydantic-ai ``Embedder``,
            ``EmbeddingModel`` or model name): a new fact whose predicate its
            subject does not hold yet goes to the held predicate closest in
            meaning ("resides in" to ``lives_in``) when their cosine reaches
            ``meaning_threshold``.  The embedder is called before the write's
            unit of work opens, and the match is re-checked inside it.
        meaning_threshold: The cosine (above 0.0, at most 1.0) two predicates
            must reach to be one slot; tune it for your embedding model.
    """

    def __init__(
        self,
        store: MemoryStore,
        *,
        multi_valued: Iterable[str] = (),
        min_confidence: float = 0.0,
        actor: str = "app",
        embedder: EmbedderLike | None = None,
        meaning_threshold: float = DEFAULT_MEANING_THRESHOLD,
    ) -> None:
        self._entities = EntityMemory(store, actor=actor)
        self._on = self._entities._on
        super().__init__(store)
        check_unit_interval(min_confidence, "min_confidence")
        self._rule = Rule(
            multi_valued=frozenset(normalize_predicate(p) for p in multi_valued),
            min_confidence=float(min_confidence),
            actor=_name("actor", actor),
        )
        self._meaning = None if embedder is None else Meaning(embedder, meaning_threshold)

    @property
    def entities(self) -> EntityMemory:
        """The graph's entities (same store, same actor)."""
        return self._entities

    @property
    def access(self) -> GraphAccess:
        """How this graph reaches its store's rows (for the extractor)."""
        return self._on

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
        conversation_id: str | None = None,
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
            conversation_id: The conversation that says it: the fact and its
                entities are then listed for it (``conversation_id=`` of
                :meth:`facts_about`, :meth:`EntityMemory.list`, ...).
        """
        new = _new_fact(
            subject, predicate, object, object_is_entity, evidence, observed_at, confidence
        )
        new = replace(new, conversation_id=check_scope(conversation_id))
        validate_user_id(user_id)
        (new,) = yield from self._matched(user_id, [new])
        return (yield from Transaction.write(self._on, apply_fact, user_id, new, self._rule))

    def _matched(
        self, user_id: str, facts: builtins.list[NewFact]
    ) -> Operation[builtins.list[NewFact]]:
        """``facts`` with the held predicates that mean the same (with an embedder)."""
        if self._meaning is None:
            return facts
        return (yield from self._meaning.matched(self._on, user_id, facts))

    def _record(
        self,
        user_id: str,
        extraction: Extraction,
        *,
        evidence: str | None = None,
        observed_at: datetime | None = None,
        conversation_id: str | None = None,
    ) -> Operation[builtins.list[FactChange]]:
        """Record a model's :class:`Extraction` in one unit of work: entities, then each triple.

        Each entity is created or updated (mention count, type, attributes,
        aliases); each triple goes through the rule of :meth:`add_fact`
        (``conversation_id``: the conversation they come from, as there).
        """
        return (
            yield from self.recording(
                user_id, extraction, evidence, observed_at, conversation_id=conversation_id
            )
        )

    def recording(
        self,
        user_id: str,
        extraction: Extraction,
        evidence: str | None,
        observed_at: datetime | None,
        finish: Callable[[GraphRows], object] | None = None,
        *,
        conversation_id: str | None = None,
    ) -> Operation[builtins.list[FactChange]]:
        """The operation of :meth:`record` (checked first; with an embedder, predicates
        matched by meaning outside any unit of work), then ``finish(rows)`` in its write."""
        validate_user_id(user_id)
        if not isinstance(extraction, Extraction):
            raise EntryValidationError("extraction", "give an Extraction")
        when = _aware("observed_at", observed_at) or utcnow()
        scope = check_scope(conversation_id)
        facts = [
            replace(
                _new_fact(
                    t.subject,
                    t.predicate,
                    t.object,
                    t.object_is_entity,
                    evidence,
                    when,
                    t.confidence,
                ),
                conversation_id=scope,
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
        facts = yield from self._matched(user_id, facts)
        return (
            yield from Transaction.write(
                self._on, _record_all, user_id, mentions, facts, self._rule, finish, scope
            )
        )

    def _facts_about(
        self,
        user_id: str,
        entity: str,
        *,
        as_of: datetime | None = None,
        conversation_id: str | None = None,
    ) -> Operation[builtins.list[Fact]]:
        """The facts ``entity`` is in (subject or object): current, or true at ``as_of``;
        with ``conversation_id``, only those that conversation taught or confirmed."""
        validate_user_id(user_id)
        _name("entity", entity)
        when = _aware("as_of", as_of)
        scope = check_scope(conversation_id)
        return (yield from Transaction.read(self._on, facts_about_in, user_id, entity, when, scope))

    def _history(
        self, user_id: str, *, limit: int = 100
    ) -> Operation[builtins.list[dict[str, Any]]]:
        """The user's latest changes, newest first (action, actor, ids, detail, time)."""
        validate_user_id(user_id)
        _check_limit(limit)
        return (yield from Transaction.read(self._on, _history_rows, user_id, limit))

    def _neighbors(
        self, user_id: str, entity: str, depth: int = 1, *, as_of: datetime | None = None
    ) -> Operation[builtins.list[tuple[Entity, int]]]:
        """Entities within ``depth`` hops of ``entity``, with their distance, nearest first.

        Hops follow facts between two entities in either direction: the facts
        true now, or at ``as_of``.  Raises ``KeyError`` when the entity is unknown.
        """
        validate_user_id(user_id)
        _name("entity", entity)
        _check_depth("depth", depth)
        when = _aware("as_of", as_of)
        return (yield from Transaction.read(self._on, _neighbors, user_id, entity, depth, when))

    def _paths(
        self,
        user_id: str,
        a: str,
        b: str,
        max_depth: int = 3,
        *,
        limit: int = 20,
        as_of: datetime | None = None,
    ) -> Operation[builtins.list[builtins.list[Fact]]]:
        """Paths from ``a`` to ``b`` (each a list of facts), shortest first.

        Over the facts true now, or at ``as_of``; a path visits no entity
        twice; at most ``limit`` paths.  Raises ``KeyError`` when an entity is
        unknown.
        """
        validate_user_id(user_id)
        _check_depth("max_depth", max_depth)
        _check_limit(limit)
        when = _aware("as_of", as_of)
        return (
            yield from Transaction.read(
                self._on, _paths, user_id, _name("a", a), _name("b", b), max_depth, limit, when
            )
        )

    def _export_user(self, user_id: str) -> Operation[dict[str, Any]]:
        """The user's whole graph (entities, facts with their intervals and evidence, history)
        as a JSON-ready object: the ``knowledge`` section of an export file."""
        validate_user_id(user_id)
        rows = yield from Transaction.read(self._on, _dump, user_id)
        return graph_to_json(user_id, rows)

    def _import_user(self, data: Any) -> Operation[int]:
        """Write a graph :meth:`export_user` made (ids kept); the number of facts.

        Everything is checked before anything is written; the user must have
        no graph yet (``EntryValidationError`` otherwise: erase or forget it first).
        """
        user_id, rows = graph_from_json(data)
        return (yield from Transaction.write(self._on, _load, user_id, rows))

    def _users(self) -> Operation[builtins.list[str]]:
        """Every user with a graph (at least one entity), sorted."""
        return (yield from Transaction.read(self._on, _graph_users))

    add_fact = sync_method(_add_fact)
    record = sync_method(_record)
    export_user = sync_method(_export_user)
    import_user = sync_method(_import_user)
    users = sync_method(_users)
    async_export_user = async_method(_export_user)
    async_import_user = async_method(_import_user)
    async_users = async_method(_users)
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
    rows: GraphRows,
    user_id: str,
    mentions: builtins.list[EntityUpdate],
    facts: builtins.list[NewFact],
    rule: Rule,
    finish: Callable[[GraphRows], object] | None,
    conversation_id: str | None,
) -> builtins.list[FactChange]:
    for mention in mentions:
        ensure_entity(rows, user_id, mention, rule.actor, conversation_id=conversation_id)
    changes = [apply_fact(rows, user_id, fact, rule) for fact in facts]
    if finish is not None:
        finish(rows)
    return changes


def _history_rows(rows: GraphRows, user_id: str, limit: int) -> builtins.list[dict[str, Any]]:
    return rows.history(user_id, limit)


def _neighbors(
    rows: GraphRows, user_id: str, name: str, depth: int, as_of: datetime | None
) -> builtins.list[tuple[Entity, int]]:
    start = _required(rows, user_id, name)
    return rows.neighbors(user_id, start.entity_id, depth, as_of)


def _paths(
    rows: GraphRows,
    user_id: str,
    a: str,
    b: str,
    max_depth: int,
    limit: int,
    as_of: datetime | None,
) -> builtins.list[builtins.list[Fact]]:
    start, end = _required(rows, user_id, a), _required(rows, user_id, b)
    return rows.paths(user_id, start.entity_id, end.entity_id, max_depth, limit, as_of)


def _dump(rows: GraphRows, user_id: str) -> dict[str, builtins.list[dict[str, Any]]]:
    return rows.dump(user_id)


def _load(rows: GraphRows, user_id: str, loaded: dict[str, builtins.list[Any]]) -> int:
    if rows.list_entities(user_id, 1):
        raise EntryValidationError(
            "user_id", f"user {user_id!r} has a knowledge graph already; nothing imported"
        )
    rows.load(loaded)
    return len(loaded["facts"])


def _graph_users(rows: GraphRows) -> builtins.list[str]:
    return rows.graph_users()
