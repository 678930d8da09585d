"""The SQL statements of the conversation list and the usage totals (SQLite, PostgreSQL).

Run through ``RunsStatements.run_statements`` inside a unit of work of a SQL
store, like the knowledge graph's (:mod:`firefly_orm.knowledge._rows`).

* :func:`list_heads`: one keyset page of a user's conversation heads, served by
  ``ix_memory_entries_head_updated`` / ``ix_memory_entries_head_created``
  (migration 0010): partial indexes over the plain columns ``head_archived``
  and ``head_updated_at``, which the store writes from the head's content in
  the statement that writes the head.  Both dialects run the same statement;
  the page reads ``limit + 1`` index entries from the cursor on (with
  ``tags``, the entries it skips too).
* :func:`usage_rows`: the turns' ``metadata.usage`` summed in the database,
  grouped by conversation, day or month, over the namespace index (one
  conversation) or the user index (a user's turns).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from firefly_orm._layout import (
    ARCHIVE_NAMESPACE_PREFIX,
    CONVERSATION_NAMESPACE_PREFIX,
    TURN_COPY_OF,
    TURN_KEY_PREFIX,
)
from firefly_orm.entry import utcnow
from firefly_orm.entry._model import HEAD_ARCHIVED_COLUMN, HEAD_UPDATED_COLUMN
from firefly_orm.sql._ops import _dialect, _execute
from firefly_orm.sql._statements import TABLE

__all__ = ["HEADS_WHERE", "USAGE_FIELDS", "Target", "list_heads", "listing_statement", "usage_rows"]

Target = Session | Connection
_C = TABLE.c

#: The partial indexes' predicate: conversation heads only (migration 0010).
HEADS_WHERE = f"{HEAD_UPDATED_COLUMN} IS NOT NULL"
#: The usage counters summed (``metadata.usage.<name>`` of a turn, integers).
USAGE_FIELDS = ("requests", "input_tokens", "output_tokens", "total_tokens", "tool_calls")


def listing_statement(
    dialect: str,
    *,
    by_updated: bool,
    descending: bool,
    after: tuple[Any, str] | None,
    updated_after: str | None,
    tags: Sequence[str],
) -> Any:
    """The ``SELECT`` of one page of heads (parameters ``uid``, ``arch``, ``now``, ``lim``...)."""
    updated, archived = _C[HEAD_UPDATED_COLUMN], _C[HEAD_ARCHIVED_COLUMN]
    order: Any = updated if by_updated else _C.created_at
    stmt = sa.select(_C.entry_id, _C.namespace, _C.content, _C.created_at, _C.user_id).where(
        _C.user_id == sa.bindparam("uid"),
        updated.isnot(None),
        archived == sa.bindparam("arch", type_=archived.type),
        sa.or_(_C.expires_at.is_(None), _C.expires_at > sa.bindparam("now")),
    )
    if after is not None:
        # (order, id) beyond the cursor, spelled so that both databases seek the
        # index to it (a range on the order column, then the id to break ties).
        value = sa.bindparam(
            "after_value", type_=updated.type if by_updated else _C.created_at.type
        )
        last: Any = sa.bindparam("after_id")
        if descending:
            beyond = sa.and_(order <= value, sa.or_(order < value, _C.entry_id < last))
        else:
            beyond = sa.and_(order >= value, sa.or_(order > value, _C.entry_id > last))
        stmt = stmt.where(beyond)
    if updated_after is not None:
        stmt = stmt.where(updated > sa.bindparam("updated_after", type_=updated.type))
    for number, _ in enumerate(tags):
        stmt = stmt.where(_has_tag(dialect, f"tag{number}"))
    columns = (order.desc(), _C.entry_id.desc()) if descending else (order, _C.entry_id)
    return stmt.order_by(*columns).limit(sa.bindparam("lim"))


def _has_tag(dialect: str, name: str) -> Any:
    if dialect == "postgresql":
        return sa.text(f"(content -> 'tags') @> jsonb_build_array(CAST(:{name} AS text))")
    return sa.text(
        "EXISTS (SELECT 1 FROM json_each(CASE WHEN json_valid(content) THEN content END, "
        f"'$.tags') WHERE value = :{name})"
    )


def list_heads(
    target: Target,
    user_id: str,
    *,
    archived: bool,
    by_updated: bool,
    descending: bool,
    after: tuple[Any, str] | None,
    updated_after: str | None,
    tags: Sequence[str],
    limit: int,
) -> list[tuple[str, str, Any, datetime, str | None]]:
    """One page of ``user_id``'s heads: ``(entry_id, namespace, content, created_at, user_id)``."""
    dialect = _dialect(target)
    stmt = listing_statement(
        dialect,
        by_updated=by_updated,
        descending=descending,
        after=after,
        updated_after=updated_after,
        tags=tags,
    )
    params: dict[str, Any] = {
        "uid": user_id,
        "arch": archived,
        "now": utcnow(),
        "lim": limit,
    }
    if after is not None:
        params["after_value"], params["after_id"] = after
    if updated_after is not None:
        params["updated_after"] = updated_after
    params.update({f"tag{number}": tag for number, tag in enumerate(tags)})
    rows = _execute(target, stmt, params).all()
    return [(r[0], r[1], r[2], r[3], r[4]) for r in rows]


# --------------------------------------------------------------------------- usage


def _usage_value(dialect: str, name: str) -> Any:
    """SQL for ``metadata.usage.<name>`` of a turn row when it is an integer, else 0."""
    if dialect == "postgresql":
        value = f"(content -> 'metadata' -> 'usage' -> '{name}')"
        return sa.literal_column(
            f"CASE WHEN jsonb_typeof({value}) = 'number' THEN "
            f"CASE WHEN ({value}) :: numeric = trunc(({value}) :: numeric) "
            f"THEN ({value}) :: numeric ELSE 0 END ELSE 0 END"
        )
    path = f"'$.metadata.usage.{name}'"
    return sa.literal_column(
        f"CASE WHEN json_valid(content) AND json_type(content, {path}) = 'integer' "
        f"THEN json_extract(content, {path}) ELSE 0 END"
    )


def _has_usage(dialect: str) -> Any:
    if dialect == "postgresql":
        return sa.literal_column("jsonb_typeof(content -> 'metadata' -> 'usage') = 'object'")
    return sa.literal_column(
        "(json_valid(content) AND json_type(content, '$.metadata.usage') = 'object')"
    )


def _original(dialect: str) -> Any:
    """Not a turn copied from another conversation (a branch's, a copy's)."""
    if dialect == "postgresql":
        return sa.text(f"NOT (metadata ? '{TURN_COPY_OF}')")
    return sa.text(f"(NOT json_valid(metadata) OR json_type(metadata, '$.{TURN_COPY_OF}') IS NULL)")


def _period(dialect: str, by: str) -> Any:
    width = 10 if by == "day" else 7
    if dialect == "postgresql":
        fmt = "YYYY-MM-DD" if by == "day" else "YYYY-MM"
        return sa.literal_column(f"to_char(created_at AT TIME ZONE 'UTC', '{fmt}')")
    return sa.func.substr(sa.cast(_C.created_at, sa.Text()), 1, width)


def _namespace_range(prefix: str) -> Any:
    """Namespaces starting with ``prefix`` (a range the indexes serve; C order)."""
    upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    return sa.and_(_C.namespace >= prefix, _C.namespace < upper)


def usage_rows(
    target: Target,
    *,
    namespaces: Sequence[str] | None,
    user_id: str | None,
    by: str | None,
    since: datetime | None,
    until: datetime | None,
) -> list[tuple[str | None, int, list[int]]]:
    """Summed usage of the turn rows of ``namespaces`` (or of every conversation of
    ``user_id``, live and archived turns), grouped ``by`` ``"conversation"`` (the
    namespace), ``"day"`` / ``"month"`` (UTC, of the row's ``created_at``) or not
    at all: ``(group, turns with usage, [sum per USAGE_FIELDS])``.
    """
    dialect = _dialect(target)
    sums = [sa.func.sum(_usage_value(dialect, name)) for name in USAGE_FIELDS]
    turns = sa.func.sum(sa.case((_has_usage(dialect), 1), else_=0))
    keys = sa.and_(_C.key >= TURN_KEY_PREFIX, _C.key < TURN_KEY_PREFIX[:-1] + ";")
    where: list[Any] = [keys, _original(dialect)]
    if namespaces is not None:
        where.append(_C.namespace.in_(list(namespaces)))
    if user_id is not None:
        where.append(_C.user_id == user_id)
        where.append(
            sa.or_(
                _namespace_range(CONVERSATION_NAMESPACE_PREFIX),
                _namespace_range(ARCHIVE_NAMESPACE_PREFIX),
            )
        )
    if since is not None:
        where.append(_C.created_at >= since)
    if until is not None:
        where.append(_C.created_at < until)
    group: Any = None
    if by == "conversation":
        group = _C.namespace
    elif by in ("day", "month"):
        group = _period(dialect, by)
    label = (group if group is not None else sa.null()).label("grp")
    stmt = sa.select(label, turns, *sums).where(*where)
    if group is not None:
        stmt = stmt.group_by(group).order_by(group)
    rows = _execute(target, stmt, {}).all()
    return [
        (row[0], int(row[1] or 0), [int(value or 0) for value in row[2:]])
        for row in rows
        if group is not None or row[1] is not None
    ]
