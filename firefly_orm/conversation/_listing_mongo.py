"""A user's conversation list and usage totals on MongoDB: indexed ``find`` calls.

The heads' ``content.archived`` and ``content.updated_at`` (or ``created_at``)
are indexed with the owner and the key (``ix_user_key_archived_updated``,
``ix_user_key_archived_created``, :func:`firefly_orm.mongo._document.memory_indexes`),
so a page in either order is one ``find`` that seeks to the cursor and reads
``limit + 1`` heads per archived state, as migration 0010's indexes do on SQL.
A cursor on a head written by an earlier release (no ``updated_at``) takes the
general path of :mod:`firefly_orm.conversation._listing`.

:func:`find_user_turns` reads a user's turn rows for the usage totals through
``ix_user_created_key`` (owner, creation time, key): one ``find`` bounded by
the time range asked for, fetching turn rows only;
:mod:`~firefly_orm.conversation._usage` sums them with the code every other
store uses (the stored content is decoded as any read decodes it).

Run through ``MongoDBStore.run_database_call`` (the store's client and loop).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from firefly_orm._layout import (
    ARCHIVE_NAMESPACE_PREFIX,
    CONVERSATION_NAMESPACE_PREFIX,
    HEAD_ARCHIVED,
    HEAD_KEY,
    HEAD_TAGS,
    HEAD_UPDATED_AT,
    TURN_KEY_PREFIX,
)
from firefly_orm.conversation._listing import ListRequest
from firefly_orm.entry import MemoryEntry, utcnow
from firefly_orm.entry._model import field_values
from firefly_orm.mongo._document import (
    CONVERSATION_CREATED_INDEX,
    CONVERSATION_LIST_INDEX,
    SEARCH_WORDS,
    USER_TIME_INDEX,
    VECTOR_FIELD,
    document_to_entry,
)

__all__ = ["find_heads", "find_user_turns", "serves"]

_UPDATED = f"content.{HEAD_UPDATED_AT}"


def serves(request: ListRequest) -> bool:
    """Whether :func:`find_heads` serves ``request`` (else: the general path)."""
    return not request.by_updated or request.after is None or request.after[0] != ""


def _split(moment: datetime) -> tuple[datetime, int]:
    """A time as stored: the millisecond part (a BSON date) and the microseconds left."""
    moment = moment.astimezone(UTC)
    sub_ms = moment.microsecond % 1000
    return moment - timedelta(microseconds=sub_ms), sub_ms


def _beyond_created(after: tuple[Any, str], descending: bool) -> dict[str, Any]:
    """``(created_at, created_at_us, entry_id)`` beyond the cursor, seekable in the index."""
    moment, last = after
    ms, us = _split(moment)
    ahead, bound = ("$lt", "$lte") if descending else ("$gt", "$gte")
    return {
        "created_at": {bound: ms},
        "$or": [
            {"created_at": {ahead: ms}},
            {"created_at": ms, "created_at_us": {ahead: us}},
            {"created_at": ms, "created_at_us": us, "entry_id": {ahead: last}},
        ],
    }


async def find_heads(
    database: Any, collection_name: str, request: ListRequest, archived: bool, limit: int
) -> list[tuple[str, str, Any, datetime, str | None]]:
    """One page of heads: ``(entry_id, namespace, content, created_at, user_id)``."""
    query: dict[str, Any] = {
        "user_id": request.user_id,
        "key": HEAD_KEY,
        "namespace": {"$regex": f"^{CONVERSATION_NAMESPACE_PREFIX}"},
    }
    bounds: dict[str, Any] = {}
    if request.updated_after is not None:
        bounds["$gt"] = request.updated_after
    if request.after is not None and not request.by_updated:
        query.update(_beyond_created(request.after, request.descending))
    elif request.after is not None:
        value, last = request.after
        if request.descending:
            bounds["$lte"] = value
            query["$or"] = [{_UPDATED: {"$lt": value}}, {"entry_id": {"$lt": last}}]
        else:
            bounds["$gte"] = value
            query["$or"] = [{_UPDATED: {"$gt": value}}, {"entry_id": {"$gt": last}}]
    if bounds:
        query[_UPDATED] = bounds
    if request.tags:
        query[f"content.{HEAD_TAGS}"] = {"$all": list(request.tags)}
    now = utcnow()
    found: list[tuple[str, str, Any, datetime, str | None]] = []
    # Not archived: false, or no flag (a head never archived).  One find per value,
    # each an equality, so the index gives the order (a $in of both sorts in memory
    # on some servers); the caller merges and cuts the page.
    for flag in (True,) if archived else (False, None):
        cursor = (
            database[collection_name]
            .find({**query, f"content.{HEAD_ARCHIVED}": flag})
            .sort(_sort(request))
            .hint(CONVERSATION_LIST_INDEX if request.by_updated else CONVERSATION_CREATED_INDEX)
            .limit(limit)
        )
        async for document in cursor:
            fields = field_values(document_to_entry(document))
            expires = fields["expires_at"]
            if expires is not None and expires <= now:
                continue
            found.append(
                (
                    fields["entry_id"],
                    fields["namespace"],
                    fields["content"],
                    fields["created_at"],
                    fields["user_id"],
                )
            )
    return found


def _sort(request: ListRequest) -> list[tuple[str, int]]:
    direction = -1 if request.descending else 1
    if request.by_updated:
        return [(_UPDATED, direction), ("entry_id", direction)]
    return [("created_at", direction), ("created_at_us", direction), ("entry_id", direction)]


def user_turns_query(
    user_id: str, since: datetime | None, until: datetime | None
) -> dict[str, Any]:
    """The filter of :func:`find_user_turns` (``ix_user_created_key`` serves it)."""
    query: dict[str, Any] = {
        "user_id": user_id,
        "key": {"$gte": TURN_KEY_PREFIX, "$lt": TURN_KEY_PREFIX[:-1] + ";"},
    }
    times: dict[str, Any] = {}
    if since is not None:
        times["$gte"] = _split(since)[0]  # the exact bound is checked on the rows
    if until is not None:
        ms, us = _split(until)
        times["$lte" if us else "$lt"] = ms
    if times:
        query["created_at"] = times
    return query


async def find_user_turns(
    database: Any,
    collection_name: str,
    user_id: str,
    since: datetime | None,
    until: datetime | None,
) -> list[MemoryEntry]:
    """``user_id``'s live turn rows of their conversations and archives created in
    ``[since, until)``: one ``find`` over ``ix_user_created_key``."""
    cursor = (
        database[collection_name]
        .find(
            user_turns_query(user_id, since, until),
            projection={SEARCH_WORDS: 0, VECTOR_FIELD: 0, "search_text": 0},
        )
        .hint(USER_TIME_INDEX)
    )
    now = utcnow()
    found: list[MemoryEntry] = []
    async for document in cursor:
        entry = document_to_entry(document)
        fields = field_values(entry)
        if not fields["namespace"].startswith(
            (CONVERSATION_NAMESPACE_PREFIX, ARCHIVE_NAMESPACE_PREFIX)
        ):
            continue
        expires = fields["expires_at"]
        if expires is not None and expires <= now:
            continue
        found.append(entry)
    return found
