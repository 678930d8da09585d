"""The table, its columns, the statements we run and the row <-> entry mapping.

Every statement is built once, at import (or once per dialect / list shape
through a cache), and executed with bound parameters: constructing a Core
statement and its cache key on every call cost more than running it.

The table definition has no schema; each store maps it to its own schema with
``schema_translate_map``, so stores with different schemas share one process.

Full-text search (:func:`search_statement`) reads what migrations
``0006_full_text_search`` and ``0007_search_skips_null_text`` add beside the
model: on SQLite the FTS5 table ``memory_entries_fts`` (joined on ``rowid``), on
PostgreSQL the ``search_vector`` column set by a trigger (unqualified: the
statement reads one table).

:func:`append_turn_statement` and :func:`bump_head_statement` know the layout
of a conversation (:mod:`firefly_orm._layout`, never a layer): they add a turn in
one PostgreSQL statement, or bump the head for it in one SQLite statement,
when no eviction is needed.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import Join

from firefly_orm._layout import (
    CONVERSATION_NAMESPACE_PREFIX,
    HEAD_ARCHIVED,
    HEAD_CONVERSATION_ID,
    HEAD_COUNTERS,
    HEAD_KEY,
    HEAD_LAST_TURN_AT,
    HEAD_NEXT_TURN_ID,
    HEAD_SUMMARY,
    HEAD_TOTAL_MESSAGES,
    HEAD_TOTAL_TOKENS,
    HEAD_TURN_COUNT,
    HEAD_UPDATED_AT,
    MAX_TURN_ID,
    TURN_ID_DIGITS,
    TURN_ID_FIELD,
    TURN_KEY_PREFIX,
    within_caps,
)
from firefly_orm._search import PG_SEARCH_VECTOR, SQLITE_FTS_TABLE
from firefly_orm.entry import (
    MAX_ENTRY_VERSION,
    TABLE_NAME,
    MemoryEntry,
    MemoryScope,
    key_prefix_upper_bound,
)
from firefly_orm.entry._model import HEAD_ARCHIVED_COLUMN, HEAD_UPDATED_COLUMN, field_values

__all__ = [
    "BY_KEY",
    "BY_KEY_FOR_UPDATE",
    "CLEANUP",
    "CLEAR",
    "COLUMNS",
    "CONTENT_BY_KEY",
    "DELETE",
    "DELETE_KEY",
    "ERASE_USER",
    "GET",
    "LOAD",
    "TABLE",
    "UPDATE_VERSIONED",
    "PrefixMode",
    "append_turn_statement",
    "bump_head_statement",
    "entry_values",
    "head_columns",
    "insert_values",
    "insert_new",
    "list_contents_statement",
    "list_statement",
    "prefix_mode",
    "row_to_entry",
    "search_statement",
    "upsert",
]

TABLE: sa.Table = MemoryEntry.__table__  # type: ignore[attr-defined]
_C = TABLE.c
#: The columns every entry read selects, in the order :func:`row_to_entry` reads.
COLUMNS = (
    _C.entry_id,
    _C.namespace,
    _C.scope,
    _C.key,
    _C.content,
    _C["metadata"],
    _C.created_at,
    _C.expires_at,
    _C.importance,
    _C.version,
    _C.user_id,
    _C.search_text,
    _C.search_language,
)

# --------------------------------------------------------------------------- row mapping


def row_to_entry(row: Any) -> MemoryEntry:
    """The entry of a row selected with :data:`COLUMNS`."""
    # Values come straight from typed columns (UTC datetimes, MemoryScope,
    # decoded JSON), so the fast constructor is safe here.
    return MemoryEntry._from_values(
        {
            "entry_id": row[0],
            "namespace": row[1],
            "scope": row[2],
            "key": row[3],
            "content": row[4],
            "metadata_": row[5],
            "created_at": row[6],
            "expires_at": row[7],
            "importance": row[8],
            "version": row[9],
            "user_id": row[10],
            "search_text": row[11],
            "search_language": row[12],
        }
    )


def head_columns(namespace: str, key: str | None, content: Any) -> tuple[str | None, bool | None]:
    """The listing columns of a row: a conversation head's ``updated_at`` (``""``
    when its content has none) and ``archived`` flag, ``(None, None)`` for any
    other row (migration 0010; the conversation list's keyset index)."""
    if key != HEAD_KEY or not namespace.startswith(CONVERSATION_NAMESPACE_PREFIX):
        return None, None
    if not isinstance(content, dict):
        return "", False
    updated = content.get(HEAD_UPDATED_AT)
    return (updated if isinstance(updated, str) else ""), content.get(HEAD_ARCHIVED) is True


def entry_values(namespace: str, entry: MemoryEntry) -> dict[str, Any]:
    """The column values that store ``entry`` in ``namespace`` (version at least 1)."""
    fields = field_values(entry)  # not the mapped attributes: on every write
    updated, archived = head_columns(namespace, fields["key"], fields["content"])
    return {
        "entry_id": fields["entry_id"],
        "namespace": namespace,
        "scope": MemoryScope(fields["scope"]),
        "key": fields["key"],
        "content": fields["content"],
        "metadata": fields["metadata_"],
        "created_at": fields["created_at"],
        "expires_at": fields["expires_at"],
        "importance": float(fields["importance"]),
        "version": max(fields["version"], 1),
        "user_id": fields["user_id"],
        "search_text": fields["search_text"],
        "search_language": fields["search_language"],
        HEAD_UPDATED_COLUMN: updated,
        HEAD_ARCHIVED_COLUMN: archived,
    }


#: Columns most entries leave NULL (no owner, not searchable, not a conversation head).
_USUALLY_NULL = (
    "user_id",
    "search_text",
    "search_language",
    HEAD_UPDATED_COLUMN,
    HEAD_ARCHIVED_COLUMN,
)


def insert_values(namespace: str, entry: MemoryEntry) -> dict[str, Any]:
    """:func:`entry_values` for an ``INSERT``, without the usually-NULL columns that are NULL.

    A column an ``INSERT`` leaves out is NULL, also in ``excluded`` of an upsert;
    the statement compiled for the shorter column list binds and processes three
    parameters fewer on most writes (SQLAlchemy caches one compiled form per
    column list).
    """
    values = entry_values(namespace, entry)
    for name in _USUALLY_NULL:
        if values[name] is None:
            del values[name]
    return values


# --------------------------------------------------------------------------- statements

_P = sa.bindparam
_LIVE = sa.or_(_C.expires_at.is_(None), _C.expires_at > _P("now"))
_SELECT = sa.select(*COLUMNS)
#: Live entries of ``ns`` in ``(created_at, entry_id)`` order.
LOAD = _SELECT.where(_C.namespace == _P("ns"), _LIVE).order_by(_C.created_at, _C.entry_id)
#: The live entry ``eid`` of ``ns``.
GET = _SELECT.where(_C.entry_id == _P("eid"), _C.namespace == _P("ns"), _LIVE)
#: The newest live entry of ``ns`` with ``key``.
BY_KEY = (
    _SELECT.where(_C.namespace == _P("ns"), _C.key == _P("key"), _LIVE)
    .order_by(_C.created_at.desc(), _C.entry_id.desc())
    .limit(1)
)
BY_KEY_FOR_UPDATE = BY_KEY.with_for_update()
#: Only the ``content`` of :data:`BY_KEY`'s entry (no entry to build).
CONTENT_BY_KEY = BY_KEY.with_only_columns(_C.content, maintain_column_froms=True)
DELETE = sa.delete(TABLE).where(
    _C.namespace == _P("ns"), _C.entry_id.in_(_P("eids", expanding=True))
)
#: Entry ``eid`` of ``ns`` and every entry of ``ns`` keyed ``key`` (expired ones too).
DELETE_KEY = sa.delete(TABLE).where(
    _C.namespace == _P("ns"), sa.or_(_C.entry_id == _P("eid"), _C.key == _P("key"))
)
CLEAR = sa.delete(TABLE).where(_C.namespace == _P("ns"))
#: Every row of user ``uid``, in every namespace.
ERASE_USER = sa.delete(TABLE).where(_C.user_id == _P("uid"))
CLEANUP = sa.delete(TABLE).where(_C.expires_at <= _P("now"))
#: Compare-and-set on the version (``w_*`` parameters name the row and its expected version).
UPDATE_VERSIONED = sa.update(TABLE).where(
    _C.entry_id == _P("w_eid"), _C.namespace == _P("w_ns"), _C.version == _P("w_version")
)


def _insert(dialect: str) -> Any:
    return postgresql.insert(TABLE) if dialect == "postgresql" else sqlite.insert(TABLE)


@functools.cache
def upsert(dialect: str) -> Any:
    """``INSERT ... ON CONFLICT (entry_id) DO UPDATE`` (version bumped server-side)."""
    insert = _insert(dialect)
    update: dict[str, Any] = {
        col.key: insert.excluded[col.key]
        for col in (*COLUMNS, _C[HEAD_UPDATED_COLUMN], _C[HEAD_ARCHIVED_COLUMN])
        if col.key not in ("entry_id", "version")
    }
    update["version"] = _C.version + 1
    # No update at the largest version: then no row comes back (RETURNING, as
    # rowcount is not reported for upserts by every driver).
    return insert.on_conflict_do_update(
        index_elements=[_C.entry_id], set_=update, where=_C.version < MAX_ENTRY_VERSION
    ).returning(_C.entry_id)


@functools.cache
def insert_new(dialect: str) -> Any:
    """``INSERT ... ON CONFLICT DO NOTHING``: inserts only if the id is free."""
    # RETURNING tells whether a row was inserted (rowcount is not reliable for
    # ON CONFLICT DO NOTHING across drivers).
    return (
        _insert(dialect).on_conflict_do_nothing(index_elements=[_C.entry_id]).returning(_C.entry_id)
    )


# --------------------------------------------------------------------------- listings

#: How a listing filters on the key: no filter (``none``), keys in ``[lo, hi)``
#: (``range``), keys from ``lo`` on (``from``, when no upper bound exists) or
#: any non-null key (``any_key``, the empty prefix).
PrefixMode = Literal["none", "range", "from", "any_key"]


def prefix_mode(key_prefix: str | None, params: dict[str, Any]) -> PrefixMode:
    """The listing shape for ``key_prefix``; binds its bounds (``lo``/``hi``) into ``params``."""
    if key_prefix is None:
        return "none"
    if not key_prefix:
        return "any_key"
    params["lo"] = key_prefix
    upper = key_prefix_upper_bound(key_prefix)
    if upper is None:
        return "from"
    params["hi"] = upper
    return "range"


def _key_filter(stmt: Any, mode: PrefixMode) -> Any:
    """``stmt`` restricted to the keys of ``mode`` (bounds ``lo``/``hi``: :func:`prefix_mode`)."""
    if mode == "range":
        return stmt.where(_C.key >= _P("lo"), _C.key < _P("hi"))
    if mode == "from":
        return stmt.where(_C.key >= _P("lo"))
    if mode == "any_key":
        return stmt.where(_C.key.is_not(None))
    return stmt


@functools.lru_cache(maxsize=128)
def list_statement(
    mode: PrefixMode, limit: int | None, newest_first: bool, by_user: bool = False
) -> Any:
    """Live entries of ``ns``, by ``(key, created_at, entry_id)`` under a key filter
    else by ``(created_at, entry_id)``; ``newest_first`` reverses; ``limit`` last;
    ``by_user``: only those of user ``uid``."""
    stmt = _SELECT.where(_C.namespace == _P("ns"), _LIVE)
    if by_user:
        stmt = stmt.where(_C.user_id == _P("uid"))
    stmt = _key_filter(stmt, mode)
    order: list[Any] = (
        [_C.created_at, _C.entry_id] if mode == "none" else [_C.key, _C.created_at, _C.entry_id]
    )
    if newest_first:
        order = [col.desc() for col in order]
    stmt = stmt.order_by(*order)
    if limit is not None:
        stmt = stmt.limit(limit)
    return stmt


@functools.lru_cache(maxsize=128)
def list_contents_statement(
    mode: PrefixMode, limit: int | None, newest_first: bool, by_user: bool = False
) -> Any:
    """:func:`list_statement` selecting only the ``content`` column."""
    full = list_statement(mode, limit, newest_first, by_user)
    return full.with_only_columns(_C.content, maintain_column_froms=True)


# --------------------------------------------------------------------------- search


class _OuterLoopJoin(Join):
    """A join SQLite must run with its left side as the outer loop (``CROSS JOIN ... ON``).

    SQLite treats ``CROSS JOIN`` as a join-order hint.  Without statistics
    (SQLite databases are rarely analyzed) its planner would otherwise walk a
    B-tree index of a filter such as a key range and probe the FTS5 table once
    per row, a scan of the namespace in disguise.
    """

    inherit_cache = True


@compiles(_OuterLoopJoin)
def _compile_outer_loop_join(join: _OuterLoopJoin, compiler: Any, **kw: Any) -> str:
    return str(compiler.visit_join(join, **kw))


@compiles(_OuterLoopJoin, "sqlite")
def _compile_sqlite_cross_join(join: _OuterLoopJoin, compiler: Any, **kw: Any) -> str:
    text = str(compiler.visit_join(join, **kw))
    left, joined, rest = text.partition(" JOIN ")
    assert joined and " " not in left, text  # a plain table on the left
    return f"{left} CROSS JOIN {rest}"


_FTS = sa.table(SQLITE_FTS_TABLE, sa.column("rowid"))
#: The FTS5 table as a value: the left side of ``MATCH`` and the argument of ``bm25()``.
_FTS_SELF: sa.ColumnElement[Any] = sa.literal_column(SQLITE_FTS_TABLE)
_ROWID: sa.ColumnElement[Any] = sa.literal_column(f"{TABLE_NAME}.rowid")
_VECTOR = sa.literal_column(PG_SEARCH_VECTOR, postgresql.TSVECTOR())
_TSQUERY = sa.func.websearch_to_tsquery(sa.cast(_P("lang"), postgresql.REGCONFIG()), _P("q"))


@functools.lru_cache(maxsize=64)
def search_statement(
    dialect: str, mode: PrefixMode, by_user: bool, by_importance: bool, limited: bool
) -> Any:
    """Live entries of ``ns`` matching ``q``, with their score as the last column, best first.

    SQLite: ``q`` is an FTS5 expression of quoted words, the score ``-bm25()``;
    the FTS5 table is the outer loop (``CROSS JOIN``), each match a rowid
    lookup: the cost follows the number of rows holding a query word.  PostgreSQL:
    ``q`` is text for ``websearch_to_tsquery(lang, q)`` and the score
    ``ts_rank``; ``search_vector @@ query`` is served by the GIN index.  Key
    filter as :func:`list_statement` (``lo``/``hi``); ``uid`` with ``by_user``,
    ``imp`` (minimum importance) with ``by_importance``, ``limit`` with ``limited``.
    """
    if dialect == "sqlite":
        score = (-sa.func.bm25(_FTS_SELF)).label("score")
        stmt = (
            sa.select(*COLUMNS, score)
            .select_from(_OuterLoopJoin(_FTS, TABLE, _FTS.c.rowid == _ROWID))
            .where(_FTS_SELF.op("MATCH")(_P("q")))
        )
    elif dialect == "postgresql":
        score = sa.func.ts_rank(_VECTOR, _TSQUERY).label("score")
        stmt = sa.select(*COLUMNS, score).where(_VECTOR.op("@@")(_TSQUERY))
    else:
        raise ValueError(f"full-text search is not available on {dialect!r}")
    stmt = stmt.where(_C.namespace == _P("ns"), _LIVE)
    if by_user:
        stmt = stmt.where(_C.user_id == _P("uid"))
    if by_importance:
        stmt = stmt.where(_C.importance >= _P("imp"))
    stmt = _key_filter(stmt, mode).order_by(
        score.desc(), _C.importance.desc(), _C.created_at.desc(), _C.entry_id.desc()
    )
    if limited:
        stmt = stmt.limit(_P("limit"))
    return stmt


# --------------------------------------------------------------------------- one-statement append

# The head's counters (:data:`firefly_orm._layout.HEAD_COUNTERS`): the one-statement
# append runs only on heads where each is a plain non-negative integer.
#: A head counter must be this (at most 15 digits: no overflow in ``bigint`` sums).
_COUNTER_PATTERN = "^[0-9]{1,15}$"


def _sql_text(value: str) -> Any:
    """``value`` as an SQL string literal (constant keys; a bound one has no type to PostgreSQL)."""
    return sa.literal_column("'" + value.replace("'", "''") + "'", sa.Text())


def _turn_key_sql(turn_id: Any) -> Any:
    """SQL for :func:`~firefly_orm._layout.turn_key` of the integer ``turn_id`` (PostgreSQL)."""
    digits = sa.func.lpad(sa.cast(turn_id, sa.Text), TURN_ID_DIGITS, _sql_text("0"))
    return _sql_text(TURN_KEY_PREFIX).op("||", return_type=sa.Text())(digits)


def _derived_id_sql(key: Any) -> Any:
    """SQL for :func:`~firefly_orm.entry.derived_entry_id` of ``key`` in the namespace whose
    ``<namespace>\\x00`` bytes are bound as ``id_prefix`` (sha256, 32 hex characters)."""
    data = _P("id_prefix", type_=sa.LargeBinary()).op("||", return_type=sa.LargeBinary())(
        sa.func.convert_to(key, _sql_text("UTF8"))
    )
    return sa.func.left(sa.func.encode(sa.func.sha256(data), _sql_text("hex")), 32)


def _head_update(guard: Any, free: Any, by_owner: bool) -> Any:
    """``UPDATE`` of the live head ``:head_id`` of ``:ns`` (``:uid``'s when ``by_owner``)
    while its version can still grow, ``guard`` holds and the new turn's key is ``free``.
    """
    update = sa.update(TABLE).where(
        _C.entry_id == _P("head_id"),
        _C.namespace == _P("ns"),
        _LIVE,
        _C.version < MAX_ENTRY_VERSION,
        guard,
        free,
    )
    if by_owner:
        update = update.where(_C.user_id == _P("uid"))
    return update


@functools.cache
def append_turn_statement(by_owner: bool) -> Any:
    """PostgreSQL: add a conversation turn in one statement, when no eviction is needed.

    A data-modifying CTE: the ``UPDATE`` of the head (which takes the head's
    row lock itself, so concurrent writers queue as behind ``SELECT ... FOR
    UPDATE``) bumps its counters and version, and the ``INSERT`` adds the turn
    row under the turn id the head gave (``next_turn_id`` before the update).
    The head is updated only if, on its stored totals, the turn needs no
    eviction (``total_tokens + tokens <= token_cap`` and ``total_messages +
    messages <= message_cap``: :func:`~firefly_orm._layout.within_caps`, with
    the trigger of :func:`~firefly_orm._layout.token_caps` as ``token_cap``,
    so a summarize threshold below ``max_tokens`` is honoured as the planner
    honours it), the head is live, below the largest version
    and turn id, its counters are plain integers, its owner is ``uid`` (with
    ``by_owner``) and no row holds the new turn's id yet.  Otherwise nothing is
    written and no row comes back: the caller takes the general path.

    Parameters: ``ns``, ``head_id``, ``now``, ``stamp`` (the head's new
    ``updated_at`` and ``last_turn_at``), ``cid`` (the conversation id as
    JSON), ``tokens``, ``messages``, ``token_cap``, ``message_cap``, ``uid``
    (with ``by_owner``), ``id_prefix`` (``<ns>\\x00`` in UTF-8) and the turn
    row's ``row_scope``, ``row_content`` (JSONB, without its ``turn_id``),
    ``row_metadata``, ``row_created_at``, ``row_importance``,
    ``row_search_text``, ``row_search_language`` (no parameter is
    named as a column: an UPDATE would set that column from it).  The row returned: the head's new
    ``content``, ``version`` and ``user_id`` (the owner the turn row gets).
    """
    jsonb = postgresql.JSONB()
    content = sa.type_coerce(_C.content, jsonb)
    texts = {name: content[name].astext for name in HEAD_COUNTERS}
    counters = {name: sa.cast(text, sa.BigInteger) for name, text in texts.items()}
    tokens = sa.cast(_P("tokens"), sa.BigInteger)
    messages = sa.cast(_P("messages"), sa.BigInteger)
    next_turn_id = counters[HEAD_NEXT_TURN_ID]
    total_tokens = counters[HEAD_TOTAL_TOKENS] + tokens
    total_messages = counters[HEAD_TOTAL_MESSAGES] + messages
    # The casts run only on heads whose counters are digits (CASE: no cast error).
    plain = sa.and_(*(text.op("~")(_sql_text(_COUNTER_PATTERN)) for text in texts.values()))
    within = sa.and_(
        next_turn_id <= MAX_TURN_ID,
        *within_caps(
            total_tokens,
            total_messages,
            sa.cast(_P("token_cap"), sa.BigInteger),
            sa.cast(_P("message_cap"), sa.BigInteger),
        ),
    )
    taken = TABLE.alias("taken")
    free = ~sa.exists().where(taken.c.entry_id == _derived_id_sql(_turn_key_sql(next_turn_id)))
    summary = content.op("->", return_type=jsonb)(_sql_text(HEAD_SUMMARY))
    stamp_text = _P("stamp", type_=sa.Text())
    stamp = sa.func.to_jsonb(stamp_text)
    # Built over the stored content (||), so the listing fields (title, tags...) stay.
    new_content = content.op("||", return_type=jsonb)(
        sa.func.jsonb_build_object(
            _sql_text(HEAD_UPDATED_AT),
            stamp,
            _sql_text(HEAD_LAST_TURN_AT),
            stamp,
            _sql_text(HEAD_CONVERSATION_ID),
            _P("cid", type_=_C.content.type),
            _sql_text(HEAD_NEXT_TURN_ID),
            next_turn_id + 1,
            _sql_text(HEAD_TOTAL_TOKENS),
            total_tokens,
            _sql_text(HEAD_TURN_COUNT),
            counters[HEAD_TURN_COUNT] + 1,
            _sql_text(HEAD_SUMMARY),
            sa.case(
                (sa.func.jsonb_typeof(summary) == _sql_text("string"), summary),
                else_=sa.cast(_sql_text("null"), jsonb),
            ),
            _sql_text(HEAD_TOTAL_MESSAGES),
            total_messages,
        )
    )
    update = _head_update(sa.case((plain, within), else_=sa.false()), free, by_owner)
    head = (
        update.values(
            {
                _C.content: new_content,
                _C.version: _C.version + 1,
                _C[HEAD_UPDATED_COLUMN]: stamp_text,
            }
        )
        .returning(
            _C.content,
            _C.version,
            _C.user_id,
            (next_turn_id - 1).label("turn_id"),
        )
        .cte("head")
    )
    turn_id = head.c.turn_id
    # Bound as plain JSONB: the caller sends only content the column would not wrap.
    turn_content = _P("row_content", type_=jsonb).op("||", return_type=jsonb)(
        sa.func.jsonb_build_object(_sql_text(TURN_ID_FIELD), turn_id)
    )
    row = sa.select(
        _derived_id_sql(_turn_key_sql(turn_id)),
        _P("ns", type_=_C.namespace.type),
        _P("row_scope", type_=_C.scope.type),
        _turn_key_sql(turn_id),
        turn_content,
        _P("row_metadata", type_=_C["metadata"].type),
        _P("row_created_at", type_=_C.created_at.type),
        _P("row_importance", type_=_C.importance.type),
        sa.literal(1, sa.Integer()),
        head.c.user_id,
        _P("row_search_text", type_=_C.search_text.type),
        _P("row_search_language", type_=_C.search_language.type),
    )
    names = (
        "entry_id",
        "namespace",
        "scope",
        "key",
        "content",
        "metadata",
        "created_at",
        "importance",
        "version",
        "user_id",
        "search_text",
        "search_language",
    )
    insert = sa.insert(TABLE).from_select([_C[n] for n in names], row).cte("turn")
    return sa.select(head.c.content, head.c.version, head.c.user_id).add_cte(insert)


def _json_path(name: str) -> Any:
    return _sql_text(f"$.{name}")


@functools.cache
def bump_head_statement(by_owner: bool) -> Any:
    """SQLite: bump a conversation's head for one more turn, when no eviction is needed.

    The SQLite half of :func:`append_turn_statement` (SQLite has no
    data-modifying CTE): an ``UPDATE ... RETURNING`` of the head, under the
    write lock ``BEGIN IMMEDIATE`` took, that the caller follows with the
    turn's ``INSERT`` in the same transaction.  The head qualifies as there: live,
    below the largest version and turn id, its counters JSON integers from 0
    to 15 digits, its summary a string or null, the turn within ``token_cap``
    and ``message_cap`` on its stored totals, its owner ``uid`` (with
    ``by_owner``), no row keyed with the new turn's key yet.  Otherwise nothing
    is written and no row comes back.

    Parameters: ``ns``, ``head_id``, ``now``, ``stamp`` (the head's new ``updated_at``
    and ``last_turn_at``), ``cid`` (the conversation id),
    ``tokens``, ``messages``, ``token_cap``, ``message_cap`` and ``uid`` (with
    ``by_owner``).  The row returned: the head's new ``content``, ``version``
    and ``user_id``; the new turn's id is ``content["next_turn_id"] - 1``.
    """

    def counter(name: str) -> Any:
        return sa.func.json_extract(_C.content, _json_path(name))

    plain = sa.and_(
        *(
            sa.and_(
                sa.func.json_type(_C.content, _json_path(name)) == _sql_text("integer"),
                counter(name).between(0, 10**15 - 1),
            )
            for name in HEAD_COUNTERS
        ),
        sa.func.coalesce(
            sa.func.json_type(_C.content, _json_path(HEAD_SUMMARY)), _sql_text("null")
        ).in_([_sql_text("null"), _sql_text("text")]),
    )
    next_turn_id = counter(HEAD_NEXT_TURN_ID)
    total_tokens = counter(HEAD_TOTAL_TOKENS) + _P("tokens")
    total_messages = counter(HEAD_TOTAL_MESSAGES) + _P("messages")
    within = sa.and_(
        next_turn_id <= MAX_TURN_ID,
        *within_caps(total_tokens, total_messages, _P("token_cap"), _P("message_cap")),
    )
    taken = TABLE.alias("taken")
    new_key = _sql_text(TURN_KEY_PREFIX).op("||", return_type=sa.Text())(
        sa.func.printf(_sql_text(f"%0{TURN_ID_DIGITS}d"), next_turn_id)
    )
    free = ~sa.exists().where(taken.c.namespace == _P("ns"), taken.c.key == new_key)
    new_content = sa.func.json_set(
        _C.content,
        _json_path(HEAD_CONVERSATION_ID),
        _P("cid", type_=sa.Text()),
        _json_path(HEAD_NEXT_TURN_ID),
        next_turn_id + 1,
        _json_path(HEAD_TOTAL_TOKENS),
        total_tokens,
        _json_path(HEAD_TURN_COUNT),
        counter(HEAD_TURN_COUNT) + 1,
        _json_path(HEAD_TOTAL_MESSAGES),
        total_messages,
        _json_path(HEAD_UPDATED_AT),
        _P("stamp", type_=sa.Text()),
        _json_path(HEAD_LAST_TURN_AT),
        _P("stamp", type_=sa.Text()),
    )
    # Only valid JSON reaches the JSON functions (they raise on anything else).
    guard = sa.case((sa.func.json_valid(_C.content) == 1, sa.and_(plain, within)), else_=sa.false())
    update = _head_update(guard, free, by_owner)
    return update.values(
        {
            _C.content: sa.type_coerce(new_content, sa.Text()),
            _C.version: _C.version + 1,
            _C[HEAD_UPDATED_COLUMN]: _P("stamp", type_=sa.Text()),
        }
    ).returning(_C.content, _C.version, _C.user_id)
