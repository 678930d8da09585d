"""A user's conversation list on MongoDB: one indexed ``find`` over the heads.

The heads' ``content.archived`` and ``content.updated_at`` are indexed with the
owner and the key (``ix_user_key_archived_updated``,
:func:`firefly_orm.mongo._document.memory_indexes`), so a page newest-changed
first (or last) is one ``find`` that seeks to the cursor and reads ``limit + 1``
heads, as migration 0009's index does on SQL.  Run through
``MongoDBStore.run_database_call`` (the store's client and loop).  The list by
creation time, and a cursor on a head written by an earlier release (no
``updated_at``), take the general path of :mod:`firefly_orm.conversation._listing`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from firefly_orm._layout import (
    CONVERSATION_NAMESPACE_PREFIX,
    HEAD_ARCHIVED,
    HEAD_KEY,
    HEAD_TAGS,
    HEAD_UPDATED_AT,
)
from firefly_orm.conversation._listing import ListRequest
from firefly_orm.entry import utcnow
from firefly_orm.entry._model import field_values
from firefly_orm.mongo._document import document_to_entry

__all__ = ["find_heads", "serves"]

_UPDATED = f"content.{HEAD_UPDATED_AT}"


def serves(request: ListRequest) -> bool:
    """Whether :func:`find_heads` serves ``request`` (else: the general path)."""
    return request.by_updated and (request.after is None or request.after[0] != "")


async def find_heads(
    database: Any, collection_name: str, request: ListRequest, archived: bool, limit: int
) -> list[tuple[str, str, Any, datetime, str | None]]:
    """One page of heads: ``(entry_id, namespace, content, created_at, user_id)``."""
    query: dict[str, Any] = {
        "user_id": request.user_id,
        "key": HEAD_KEY,
        f"content.{HEAD_ARCHIVED}": True if archived else {"$in": [False, None]},
        "namespace": {"$regex": f"^{CONVERSATION_NAMESPACE_PREFIX}"},
    }
    bounds: dict[str, Any] = {}
    if request.updated_after is not None:
        bounds["$gt"] = request.updated_after
    if request.after is not None:
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
    direction = -1 if request.descending else 1
    cursor = (
        database[collection_name]
        .find(query)
        .sort([(_UPDATED, direction), ("entry_id", direction)])
        .limit(limit)
    )
    now = utcnow()
    found: list[tuple[str, str, Any, datetime, str | None]] = []
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
