"""Every store operation, written once over a sync ``Session`` or ``Connection``.

The store runs these functions on a Connection transaction of its own, or in
a SAVEPOINT of a caller's Session; the async side awaits the very same
functions through SQLAlchemy's ``run_sync`` (see :mod:`firefly_orm.bridges`).
:class:`SQLEntryRepository` is the unit-of-work face of the same functions.

Adding an operation: write it here over ``Session | Connection`` (its
statement in :mod:`firefly_orm.sql._statements`), then give the store a method
that validates its arguments and hands it to the runner.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, TypeVar, Unpack

from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from firefly_orm._layout import (
    HEAD_NEXT_TURN_ID,
    NO_MESSAGE_CAP,
    TURN_ID_FIELD,
    head_time,
    turn_key,
)
from firefly_orm._search import (
    SearchHit,
    SearchOptions,
    SearchRequest,
    fts5_query,
    websearch_query,
)
from firefly_orm.entry import (
    MAX_ENTRY_VERSION,
    MemoryEntry,
    derived_entry_id,
    encode_json_for_jsonb,
    utcnow,
    validate_entry,
    validate_key,
    validate_namespace,
    validate_user_id,
    version_exhausted,
)
from firefly_orm.errors import ConcurrencyError, StoreError
from firefly_orm.protocols import AppendedHead, ListOptions, TurnAppend
from firefly_orm.sql import _statements as st
from firefly_orm.sql._driver_sql import execute_first, execute_rowcount, execute_scalars
from firefly_orm.sql._graph import ERASE_USER_GRAPH
from firefly_orm.sql._vectors import VECTORS_OPTION, VectorMethods
from firefly_orm.uow import RepositoryBase

__all__ = [
    "AppendedHead",
    "Listing",
    "SQLEntryRepository",
    "Target",
    "TurnAppend",
    "append_turn",
    "cleanup_expired",
    "clear",
    "delete",
    "delete_key",
    "get",
    "list_contents",
    "list_contents_before",
    "list_entries",
    "load",
    "load_by_key",
    "load_content_by_key",
    "push_translation",
    "save",
    "save_versioned",
    "search",
]

T = TypeVar("T")

#: What an operation runs on: a store-owned Connection or a caller's Session.
Target = Session | Connection

#: ``Session.info`` key holding the schema map while one of our units of work
#: runs inside a caller's session (whose engine knows nothing of our schema).
_TRANSLATE_KEY = "firefly_orm.schema_translate_map"


def _execute(target: Target, stmt: Any, params: Any) -> Any:
    translate = target.info.get(_TRANSLATE_KEY)
    if translate is None:
        return target.execute(stmt, params)
    return target.execute(stmt, params, execution_options={"schema_translate_map": translate})


def _first(target: Target, stmt: Any, params: dict[str, Any]) -> Any:
    """The first row of ``stmt`` (``None``: no row): on a Connection through its cached
    SQL text (:func:`~firefly_orm.sql._driver_sql.execute_first`), in a Session as
    :func:`_execute` runs it."""
    if isinstance(target, Connection):
        return execute_first(target, stmt, params)
    return _execute(target, stmt, params).first()


def _scalars(target: Target, stmt: Any, params: dict[str, Any]) -> list[Any]:
    """The first column of every row of ``stmt``: on a Connection through its cached SQL
    text (:func:`~firefly_orm.sql._driver_sql.execute_scalars`), in a Session as
    :func:`_execute` runs it."""
    if isinstance(target, Connection):
        return execute_scalars(target, stmt, params)
    values: list[Any] = _execute(target, stmt, params).scalars().all()
    return values


def push_translation(
    session: Session, schema: str | None, vectors: bool = False
) -> Callable[[], None] | None:
    """Map our table to ``schema`` on a caller's session; return the undo function.

    ``vectors``: also mark the session as one of a store that keeps vectors
    (:data:`~firefly_orm.sql._vectors.VECTORS_OPTION`, what an engine of the
    store carries as an execution option).
    """
    values: dict[str, Any] = {}
    if schema is not None:
        values[_TRANSLATE_KEY] = {None: schema}
    if vectors:
        values[VECTORS_OPTION] = True
    if not values:
        return None
    missing = object()
    saved = {key: session.info.get(key, missing) for key in values}
    session.info.update(values)

    def restore() -> None:
        for key, value in saved.items():
            if value is missing:
                session.info.pop(key, None)
            else:
                session.info[key] = value

    return restore


def _dialect(target: Target) -> str:
    if isinstance(target, Connection):
        return target.dialect.name
    return target.get_bind().dialect.name


# --------------------------------------------------------------------------- operations


def save(target: Target, namespace: str, entry: MemoryEntry) -> None:
    """Upsert ``entry`` (the stored version goes up by one on update).

    Raises:
        EntryValidationError: The stored entry is at the largest version.
    """
    if _first(target, st.upsert(_dialect(target)), st.insert_values(namespace, entry)) is None:
        raise version_exhausted(entry.entry_id)


def save_versioned(
    target: Target, namespace: str, entry: MemoryEntry, expected_version: int
) -> None:
    """Insert (``expected_version == 0``) or compare-and-set on the stored version."""
    if expected_version == 0:
        values = st.insert_values(namespace, entry)
        values["version"] = 1
        inserted = _execute(target, st.insert_new(_dialect(target)), values).first()
        if inserted is None:
            raise ConcurrencyError(f"entry {entry.entry_id!r} already exists in {namespace!r}")
        return
    if expected_version >= MAX_ENTRY_VERSION:
        raise version_exhausted(entry.entry_id)
    values = st.entry_values(namespace, entry)  # every column: an UPDATE sets those it names
    values["version"] = expected_version + 1
    values.update(w_eid=values.pop("entry_id"), w_ns=namespace, w_version=expected_version)
    result = _execute(target, st.UPDATE_VERSIONED, values)
    if result.rowcount != 1:
        raise ConcurrencyError(
            f"entry {entry.entry_id!r} in {namespace!r} is no longer at version {expected_version}"
        )


def load(target: Target, namespace: str) -> list[MemoryEntry]:
    """Live entries of ``namespace`` in ``(created_at, entry_id)`` order."""
    rows = _execute(target, st.LOAD, {"ns": namespace, "now": utcnow()})
    return [st.row_to_entry(row) for row in rows]


def get(target: Target, namespace: str, entry_id: str) -> MemoryEntry | None:
    """The live entry ``entry_id`` of ``namespace``, or ``None``."""
    row = _execute(target, st.GET, {"eid": entry_id, "ns": namespace, "now": utcnow()}).first()
    return st.row_to_entry(row) if row is not None else None


def load_by_key(
    target: Target, namespace: str, key: str, for_update: bool = False
) -> MemoryEntry | None:
    """The newest live entry with ``key`` (locked until the transaction ends if asked)."""
    stmt = st.BY_KEY_FOR_UPDATE if for_update else st.BY_KEY
    row = _execute(target, stmt, {"ns": namespace, "key": key, "now": utcnow()}).first()
    return st.row_to_entry(row) if row is not None else None


def load_content_by_key(target: Target, namespace: str, key: str) -> list[Any]:
    """``[content]`` of the newest live entry with ``key``, ``[]`` when there is none.

    A list, not the value or ``None``: a stored JSON ``null`` is a value.
    """
    params = {"ns": namespace, "key": key, "now": utcnow()}
    if isinstance(target, Connection):  # cached SQL text (the read behind WorkingMemory.get)
        return execute_scalars(target, st.CONTENT_BY_KEY, params)
    contents: list[Any] = _execute(target, st.CONTENT_BY_KEY, params).scalars().all()
    return contents


class Listing(NamedTuple):
    """The checked arguments of a list read (:class:`~firefly_orm.protocols.ListOptions`)."""

    namespace: str
    key_prefix: str | None
    limit: int | None
    newest_first: bool
    user_id: str | None


def _listing(
    namespace: str,
    *,
    key_prefix: str | None = None,
    limit: int | None = None,
    newest_first: bool = False,
    user_id: str | None = None,
) -> Listing:
    """The :class:`Listing` of a list read's arguments, checked.

    An unknown option is a ``TypeError``; a bad namespace or user id an
    :class:`~firefly_orm.errors.EntryValidationError`.
    """
    validate_namespace(namespace)
    if user_id is not None:
        validate_user_id(user_id)
    return Listing(namespace, key_prefix, limit, newest_first, user_id)


def _listing_query(listing: Listing, statement: Callable[..., Any]) -> tuple[Any, dict[str, Any]]:
    """``statement``'s SELECT (the entries' or only their contents') for ``listing``, and
    its parameters."""
    params: dict[str, Any] = {"ns": listing.namespace, "now": utcnow(), "uid": listing.user_id}
    mode = st.prefix_mode(listing.key_prefix, params)
    by_user = listing.user_id is not None
    return statement(mode, listing.limit, listing.newest_first, by_user), params


def list_entries(target: Target, listing: Listing) -> list[MemoryEntry]:
    """Live entries, ordered and limited as :func:`~firefly_orm.sql._statements.list_statement`."""
    rows = _execute(target, *_listing_query(listing, st.list_statement)).all()
    return [st.row_to_entry(row) for row in rows]


def list_contents(target: Target, listing: Listing) -> list[Any]:
    """Like :func:`list_entries`, but only each entry's ``content`` (a cheaper read; on a
    Connection through its cached SQL text)."""
    return _scalars(target, *_listing_query(listing, st.list_contents_statement))


def list_contents_before(
    target: Target, namespace: str, key_prefix: str, before_key: str, limit: int
) -> list[Any]:
    """The contents of the live entries whose key starts with ``key_prefix`` and sorts
    below ``before_key``, newest first (key order), at most ``limit``.

    The key range of a ``key_prefix`` listing with ``before_key`` as its upper
    end: one range of the namespace-key index, walked backwards, so paging
    back through a key range re-reads nothing.
    """
    if not key_prefix or not before_key.startswith(key_prefix):
        raise ValueError(f"before_key {before_key!r} must start with {key_prefix!r}")
    # ``before_key`` starts with the prefix, so it is below the prefix's own upper bound.
    params = {"ns": namespace, "now": utcnow(), "lo": key_prefix, "hi": before_key}
    stmt = st.list_contents_statement("range", limit, True, False)
    return _scalars(target, stmt, params)


def search(target: Target, request: SearchRequest) -> list[SearchHit]:
    """Full-text search (see :mod:`firefly_orm._search`) on the database's own text index.

    Only the request's words reach the database, each quoted: an FTS5
    ``MATCH`` expression on SQLite, the text of ``websearch_to_tsquery`` on
    PostgreSQL (with the request's ``language``).
    """
    if request.finds_nothing:
        return []
    dialect = _dialect(target)
    params: dict[str, Any] = {
        "ns": request.namespace,
        "now": utcnow(),
        "uid": request.user_id,
        "imp": request.min_importance,
        "limit": request.limit,
    }
    if dialect == "postgresql":
        params.update(q=websearch_query(request.database_words), lang=request.language)
    elif dialect == "sqlite":
        params["q"] = fts5_query(request.database_words)
    else:
        raise StoreError(f"full-text search is not available on {dialect}")
    mode = st.prefix_mode(request.key_prefix, params)
    stmt = st.search_statement(
        dialect,
        mode,
        request.user_id is not None,
        request.min_importance is not None,
        request.limit is not None,
    )
    return [
        SearchHit(st.row_to_entry(row), float(row[-1])) for row in _execute(target, stmt, params)
    ]


def delete(target: Target, namespace: str, entry_ids: list[str]) -> None:
    """Delete these entries of ``namespace`` (missing ids are ignored)."""
    if entry_ids:
        _execute(target, st.DELETE, {"ns": namespace, "eids": entry_ids})


def delete_key(target: Target, namespace: str, key: str, entry_id: str) -> int:
    """Delete entry ``entry_id`` and every entry keyed ``key`` of ``namespace``; how many went.

    One statement (atomic on its own), expired entries included.
    """
    params = {"ns": namespace, "eid": entry_id, "key": key}
    if isinstance(target, Connection):  # cached SQL text
        return execute_rowcount(target, st.DELETE_KEY, params)
    return int(_execute(target, st.DELETE_KEY, params).rowcount)


def clear(target: Target, namespace: str) -> None:
    """Delete every entry of ``namespace``."""
    _execute(target, st.CLEAR, {"ns": namespace})


def cleanup_expired(target: Target) -> int:
    """Delete the expired entries of every namespace; return how many."""
    return int(_execute(target, st.CLEANUP, {"now": utcnow()}).rowcount)


# --------------------------------------------------------------------------- one-statement append
# The request and result types live in firefly_orm.protocols, the row layout in
# firefly_orm._layout: the store reads them there and never imports a layer.


def append_turn(target: Target, request: TurnAppend) -> AppendedHead | None:
    """Add a turn and bump the head, if no eviction is needed: the fewest statements.

    PostgreSQL: one statement (:func:`~firefly_orm.sql._statements.append_turn_statement`,
    a data-modifying CTE).  SQLite: two, inside the ``BEGIN IMMEDIATE``
    transaction of the unit of work: the head's ``UPDATE ... RETURNING``
    (:func:`~firefly_orm.sql._statements.bump_head_statement`), then the turn's
    ``INSERT``.  ``None`` without writing anything on other databases, and
    whenever the head does not qualify (missing, eviction needed, another
    owner, ...) or, on PostgreSQL, the row does not fit the statement (content
    the JSONB column would wrap, expiry): the caller then takes
    the general path.
    """
    dialect = _dialect(target)
    if dialect == "sqlite":
        return _append_turn_sqlite(target, request)
    if dialect != "postgresql":
        return None
    values = st.entry_values(request.namespace, request.row)
    content = values["content"]
    if (
        not isinstance(content, dict)
        or encode_json_for_jsonb(content) is not content
        or values["expires_at"] is not None
    ):
        return None
    params = _head_params(request)
    params.update(
        id_prefix=f"{request.namespace}\x00".encode(),
        row_scope=values["scope"],
        row_content=content,
        row_metadata=values["metadata"],
        row_created_at=values["created_at"],
        row_importance=values["importance"],
        row_search_text=values["search_text"],
        row_search_language=values["search_language"],
    )
    row = _first(target, st.append_turn_statement(request.owner is not None), params)
    return None if row is None else AppendedHead(row[0], row[1], row[2])


def _head_params(request: TurnAppend) -> dict[str, Any]:
    """The parameters naming the head and its limits, shared by both dialects' statements."""
    cap = request.message_cap
    now = utcnow()
    params: dict[str, Any] = {
        "ns": request.namespace,
        "head_id": request.head_id,
        "now": now,
        "stamp": head_time(now),
        "cid": request.conversation_id,
        "tokens": request.tokens,
        "messages": request.messages,
        "token_cap": request.token_cap,
        "message_cap": NO_MESSAGE_CAP if cap is None else cap,
    }
    if request.owner is not None:
        params["uid"] = request.owner
    return params


def _append_turn_sqlite(target: Target, request: TurnAppend) -> AppendedHead | None:
    """:func:`append_turn` on SQLite: bump the head, then insert the turn it numbered."""
    stmt = st.bump_head_statement(request.owner is not None)
    head = _first(target, stmt, _head_params(request))
    if head is None:
        return None
    content, version, owner = head[0], head[1], head[2]
    turn_id = int(content[HEAD_NEXT_TURN_ID]) - 1
    key = turn_key(turn_id)
    values = st.insert_values(request.namespace, request.row)
    values["entry_id"] = derived_entry_id(request.namespace, key)
    values["key"] = key
    values["content"] = {**values["content"], TURN_ID_FIELD: turn_id}
    if owner is not None:
        values["user_id"] = owner
    if _first(target, st.insert_new("sqlite"), values) is None:
        # Unreachable: the UPDATE checked under the write lock that the key is free.
        raise ConcurrencyError(f"turn {key!r} of {request.namespace!r} already exists")
    return AppendedHead(content, version, owner)


# --------------------------------------------------------------------------- repository


class SQLEntryRepository(VectorMethods, RepositoryBase):
    """:class:`~firefly_orm.protocols.EntryRepository` over one Session or Connection transaction.

    Each method validates its arguments and runs the operation above on
    :attr:`session` (the transaction's Session or Connection).  It implements
    every optional operation of :class:`~firefly_orm.uow.RepositoryBase`,
    and :class:`~firefly_orm.protocols.VectorRepository` on a store built with
    ``vectors=True`` (:mod:`firefly_orm.sql._vectors`).
    """

    supports_delete_key = True
    supports_list_contents_before = True

    def __init__(self, session: Target) -> None:
        self.session = session

    def _execute(self, stmt: Any, params: Any) -> Any:
        """Run ``stmt`` on this transaction (the schema mapped, as every operation here);
        ``params`` a dict, or a list of dicts (executemany)."""
        return _execute(self.session, stmt, params)

    def get(self, namespace: str, entry_id: str) -> MemoryEntry | None:
        """The live entry ``entry_id`` of ``namespace``, or ``None``."""
        validate_namespace(namespace)
        return get(self.session, namespace, entry_id)

    def get_by_key(
        self, namespace: str, key: str, *, for_update: bool = False
    ) -> MemoryEntry | None:
        """The newest live entry with ``key`` (``for_update`` locks it on PostgreSQL)."""
        validate_namespace(namespace)
        validate_key(key)
        return load_by_key(self.session, namespace, key, for_update)

    def list(self, namespace: str, **options: Unpack[ListOptions]) -> builtins.list[MemoryEntry]:
        """Live entries of ``namespace`` (see :class:`~firefly_orm.protocols.EntryRepository`)."""
        return list_entries(self.session, _listing(namespace, **options))

    def list_contents(self, namespace: str, **options: Unpack[ListOptions]) -> builtins.list[Any]:
        """Like :meth:`list` but only each entry's ``content`` (a cheaper read)."""
        return list_contents(self.session, _listing(namespace, **options))

    def list_contents_before(
        self, namespace: str, *, key_prefix: str, before_key: str, limit: int
    ) -> builtins.list[Any]:
        """Contents of the entries keyed ``key_prefix...`` below ``before_key``, newest first.

        A page of a newest-first :meth:`list_contents` that goes on where the
        previous page stopped (:func:`list_contents_before`).
        """
        validate_namespace(namespace)
        validate_key(before_key)
        return list_contents_before(self.session, namespace, key_prefix, before_key, limit)

    def search(
        self, namespace: str, query: str, **options: Unpack[SearchOptions]
    ) -> builtins.list[SearchHit]:
        """Full-text search in this transaction (see ``EntryRepository.search``)."""
        return search(self.session, SearchRequest.build(namespace, query, **options))

    def save(
        self, namespace: str, entry: MemoryEntry, *, expected_version: int | None = None
    ) -> None:
        """Upsert ``entry``; with ``expected_version``, only from that version (0: new)."""
        validate_entry(entry, namespace)
        if expected_version is None:
            save(self.session, namespace, entry)
        else:
            save_versioned(self.session, namespace, entry, expected_version)

    def delete(self, namespace: str, entry_ids: str | Iterable[str]) -> None:
        """Delete one entry or several (missing ids are ignored)."""
        validate_namespace(namespace)
        ids = [entry_ids] if isinstance(entry_ids, str) else list(entry_ids)
        delete(self.session, namespace, ids)

    def delete_key(self, namespace: str, key: str, entry_id: str) -> int:
        """Delete entry ``entry_id`` and every entry keyed ``key`` in one statement.

        What a working-memory fact's removal needs (its id, and any entry of
        the same key another writer left); expired entries go too.  Returns
        how many rows were deleted.  On PostgreSQL, run first in a write unit
        of work, it commits on its own (one round trip).
        """
        validate_namespace(namespace)
        validate_key(key)
        return delete_key(self.session, namespace, key, entry_id)

    def clear(self, namespace: str) -> None:
        """Delete every entry of ``namespace``."""
        validate_namespace(namespace)
        clear(self.session, namespace)

    def append_turn(self, request: TurnAppend) -> AppendedHead | None:
        """Add a conversation turn when no eviction is needed, in the fewest statements.

        One on PostgreSQL, two on SQLite.  ``None``: nothing was written (another
        database, or the head does not qualify); see :func:`append_turn`.
        """
        validate_namespace(request.namespace)
        validate_entry(request.row, request.namespace)
        return append_turn(self.session, request)

    def run_statements(self, fn: Callable[..., T], /, *args: Any) -> T:
        """``fn(target, *args)`` on this unit of work's Session or Connection (its transaction).

        How the knowledge graph (:mod:`firefly_orm.knowledge`) runs its
        statements; ``fn`` executes them with ``_execute`` (the store's schema).
        """
        return fn(self.session, *args)

    def erase_user(self, user_id: str) -> None:
        """Delete every entry of ``user_id`` in every namespace, and their knowledge graph.

        One indexed statement for the entries, one per knowledge-graph table
        (entities, facts, history, pending extractions).
        """
        validate_user_id(user_id)
        _execute(self.session, st.ERASE_USER, {"uid": user_id})
        for statement in ERASE_USER_GRAPH:
            _execute(self.session, statement, {"uid": user_id})
