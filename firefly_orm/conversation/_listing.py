"""A conversation's metadata (title, tags, archived, times, counts) and a user's list.

Where it lives: on the conversation's head row (``conversation:<id>``, key
``head``), which every change of the conversation writes anyway.  Its content
carries, besides the counters, ``updated_at`` (stamped by every head write:
:func:`~firefly_orm.conversation._rows.head_entry` and both one-statement
appends, so an append costs no extra statement), ``last_turn_at`` (stamped by
a new turn), and, once set, ``title``, ``tags`` and ``archived``; the head's
``created_at`` is the conversation's creation time.  Heads written by earlier
releases have none of these: they list with ``updated_at=None`` (last, newest
first) until their next write.

The list is a keyset page (no OFFSET): ordered by ``(updated_at, id)`` or
``(created_at, id)``, the cursor names the last row of the previous page.  On
SQLite and PostgreSQL it is one query over a partial index of the heads
(migration 0010: the plain columns ``head_updated_at`` and ``head_archived``
the store writes with the head, :mod:`firefly_orm.conversation._listing_sql`),
reading ``limit + 1`` index entries per page whatever the user's number of
conversations (with ``tags``, the entries it skips too); MongoDB, in either
order, ``find`` calls over its indexes
(:mod:`~firefly_orm.conversation._listing_mongo`).  Other stores read the
user's index rows and each head, then sort: linear in the user's
conversations per page.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any, Literal

from firefly_orm._layout import (
    HEAD_ARCHIVED,
    HEAD_KEY,
    HEAD_LAST_TURN_AT,
    HEAD_TAGS,
    HEAD_TITLE,
    HEAD_UPDATED_AT,
    INDEX_NAMESPACE,
    conversation_namespace,
    head_time,
)
from firefly_orm.conversation._listing_sql import list_heads
from firefly_orm.conversation._rows import head_from_content
from firefly_orm.entry import MemoryEntry, utcnow
from firefly_orm.entry._model import field_values
from firefly_orm.errors import ConversationNotFoundError, EntryValidationError
from firefly_orm.protocols import RunsStatements, UnitOfWork

__all__ = [
    "MAX_TAGS",
    "MAX_TAG_LENGTH",
    "MAX_TITLE_LENGTH",
    "ORDERS",
    "ConversationInfo",
    "ConversationPage",
    "HeadReader",
    "ListRequest",
    "MetadataChange",
    "Order",
    "change_metadata",
    "check_tags",
    "check_title",
    "list_page",
    "read_info",
]

#: The orders :meth:`ConversationMemory.list_conversations` accepts.
Order = Literal["updated_desc", "updated_asc", "created_desc", "created_asc"]
ORDERS: tuple[str, ...] = ("updated_desc", "updated_asc", "created_desc", "created_asc")
MAX_TITLE_LENGTH = 500
MAX_TAGS = 32
MAX_TAG_LENGTH = 64
#: The largest page.
MAX_PAGE = 1000


@dataclass(frozen=True)
class ConversationInfo:
    """What a conversation list shows of one conversation.

    Attributes:
        conversation_id: Its id.
        user_id: Its owner (``None``: nobody in particular).
        title: Its title (``None``: none set).
        tags: Its tags, in the order set.
        archived: Whether it is archived (listed only when asked for).
        created_at: When it was created.
        updated_at: When it last changed (a turn, an edit, its metadata); ``None``
            for a conversation last written by an earlier release.
        last_turn_at: When its newest turn was added (``None``: no turn yet, or
            last written by an earlier release).
        turn_count: Its retained turns.
        total_tokens: The token estimates of its retained turns, summed.
        turns_added: Turns ever added (the next turn's id).
        has_summary: Whether evicted turns left a summary.
    """

    conversation_id: str
    user_id: str | None
    title: str | None
    tags: list[str]
    archived: bool
    created_at: datetime
    updated_at: datetime | None
    last_turn_at: datetime | None
    turn_count: int
    total_tokens: int
    turns_added: int
    has_summary: bool


@dataclass(frozen=True)
class ConversationPage:
    """One page of a conversation list.

    Attributes:
        items: The conversations of the page, in the order asked for.
        next_cursor: Pass it as ``cursor`` for the next page (``None``: this is the last).
    """

    items: list[ConversationInfo]
    next_cursor: str | None


@dataclass(frozen=True)
class ListRequest:
    """A checked list request (see :meth:`ConversationMemory.list_conversations`)."""

    user_id: str
    order: str = "updated_desc"
    limit: int = 20
    archived: bool | None = False
    tags: tuple[str, ...] = ()
    updated_after: str | None = None
    after: tuple[Any, str] | None = None

    @property
    def by_updated(self) -> bool:
        return self.order.startswith("updated")

    @property
    def descending(self) -> bool:
        return self.order.endswith("desc")

    @classmethod
    def build(
        cls,
        user_id: str,
        *,
        order: str,
        limit: int,
        archived: bool | None,
        tags: Sequence[str] | None,
        updated_after: datetime | None,
        cursor: str | None,
    ) -> ListRequest:
        """Check every argument (``EntryValidationError`` on a bad one)."""
        if order not in ORDERS:
            raise EntryValidationError("order", f"must be one of {ORDERS}")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
            raise EntryValidationError("limit", f"must be an integer from 1 to {MAX_PAGE}")
        if archived is not None and not isinstance(archived, bool):
            raise EntryValidationError("archived", "must be True, False or None (both)")
        after_text = (
            None if updated_after is None else head_time(_utc("updated_after", updated_after))
        )
        return cls(
            user_id=user_id,
            order=order,
            limit=limit,
            archived=archived,
            tags=tuple(check_tags(tags or [])),
            updated_after=after_text,
            after=None if cursor is None else _decode_cursor(cursor, order),
        )


@dataclass(frozen=True)
class MetadataChange:
    """What :meth:`ConversationMemory.update_conversation` changes (``None``: keep)."""

    title: str | None = None
    tags: list[str] | None = None
    archived: bool | None = None
    clear_title: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- checks


def check_title(title: Any) -> str:
    """A title: a non-blank string of at most :data:`MAX_TITLE_LENGTH` characters, no NUL."""
    if not isinstance(title, str) or not title.strip() or "\x00" in title:
        raise EntryValidationError("title", "must be a non-blank string without NUL")
    if len(title) > MAX_TITLE_LENGTH:
        raise EntryValidationError("title", f"must be at most {MAX_TITLE_LENGTH} characters")
    return title


def check_tags(tags: Any) -> list[str]:
    """Tags: at most :data:`MAX_TAGS` distinct non-blank strings (kept in order)."""
    if isinstance(tags, str) or not isinstance(tags, Sequence):
        raise EntryValidationError("tags", "must be a list of strings")
    checked: list[str] = []
    for tag in tags:
        if not isinstance(tag, str) or not tag.strip() or "\x00" in tag:
            raise EntryValidationError("tags", "each tag must be a non-blank string without NUL")
        if len(tag) > MAX_TAG_LENGTH:
            raise EntryValidationError("tags", f"a tag has at most {MAX_TAG_LENGTH} characters")
        if tag not in checked:
            checked.append(tag)
    if len(checked) > MAX_TAGS:
        raise EntryValidationError("tags", f"at most {MAX_TAGS} tags")
    return checked


def _utc(name: str, moment: Any) -> datetime:
    if not isinstance(moment, datetime) or moment.tzinfo is None:
        raise EntryValidationError(name, "must be a timezone-aware datetime")
    return moment.astimezone(UTC)


# --------------------------------------------------------------------------- cursor


def _encode_cursor(order: str, value: Any, entry_id: str) -> str:
    shown = value.isoformat() if isinstance(value, datetime) else value
    data = json.dumps([order, shown, entry_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _decode_cursor(cursor: Any, order: str) -> tuple[Any, str]:
    try:
        if not isinstance(cursor, str) or len(cursor) > 1000:
            raise ValueError("not a cursor")
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        made_for, value, entry_id = json.loads(raw)
        if made_for != order or not isinstance(value, str) or not isinstance(entry_id, str):
            raise ValueError("a cursor of another order")
        if order.startswith("created"):
            return datetime.fromisoformat(value), entry_id
        return value, entry_id
    except (ValueError, TypeError, binascii.Error) as exc:
        raise EntryValidationError("cursor", f"not a cursor of this list: {exc}") from exc


# --------------------------------------------------------------------------- rows -> info


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _info(
    namespace: str, content: Any, created_at: datetime, user_id: str | None
) -> ConversationInfo:
    head = head_from_content(content, 0, namespace)
    tags = content.get(HEAD_TAGS)
    title = content.get(HEAD_TITLE)
    return ConversationInfo(
        conversation_id=namespace.split(":", 1)[1],
        user_id=user_id,
        title=title if isinstance(title, str) else None,
        tags=[t for t in tags if isinstance(t, str)] if isinstance(tags, list) else [],
        archived=content.get(HEAD_ARCHIVED) is True,
        created_at=created_at,
        updated_at=_time(content.get(HEAD_UPDATED_AT)),
        last_turn_at=_time(content.get(HEAD_LAST_TURN_AT)),
        turn_count=head.turn_count,
        total_tokens=head.total_tokens,
        turns_added=head.next_turn_id,
        has_summary=head.summary is not None,
    )


def _entry_info(entry: MemoryEntry) -> ConversationInfo:
    fields = field_values(entry)
    return _info(fields["namespace"], fields["content"], fields["created_at"], fields["user_id"])


def _sort_value(request: ListRequest, entry_id: str, content: Any, created_at: datetime) -> Any:
    if not request.by_updated:
        return created_at
    value = content.get(HEAD_UPDATED_AT) if isinstance(content, dict) else None
    return value if isinstance(value, str) else ""


# --------------------------------------------------------------------------- operations


def read_info(uow: UnitOfWork, conversation_id: str) -> ConversationInfo | None:
    """Transaction: the :class:`ConversationInfo` of ``conversation_id`` (``None``: missing)."""
    head = uow.entries.get_by_key(conversation_namespace(conversation_id), HEAD_KEY)
    return None if head is None else _entry_info(head)


def change_metadata(
    uow: UnitOfWork, conversation_id: str, change: MetadataChange
) -> ConversationInfo:
    """Transaction: set the title, tags or archived flag on the head (at its version)."""
    namespace = conversation_namespace(conversation_id)
    stored = uow.entries.get_by_key(namespace, HEAD_KEY, for_update=True)
    if stored is None:
        raise ConversationNotFoundError(conversation_id)
    fields = field_values(stored)
    content = dict(fields["content"]) if isinstance(fields["content"], dict) else {}
    head_from_content(content, fields["version"], namespace)  # refuses an unreadable head
    if change.title is not None:
        content[HEAD_TITLE] = change.title
    elif change.clear_title:
        content.pop(HEAD_TITLE, None)
    if change.tags is not None:
        content[HEAD_TAGS] = list(change.tags)
    if change.archived is not None:
        content[HEAD_ARCHIVED] = change.archived
    content[HEAD_UPDATED_AT] = head_time(utcnow())
    new = stored.copy_entry(content=content)
    uow.entries.save(namespace, new, expected_version=fields["version"])
    return _info(namespace, content, fields["created_at"], fields["user_id"])


#: Reads one page of heads itself (MongoDB: :mod:`~firefly_orm.conversation._listing_mongo`):
#: ``reader(request, archived, limit)``.
HeadReader = Callable[[ListRequest, bool, int], list[tuple[str, str, Any, datetime, str | None]]]


def list_page(
    uow: UnitOfWork, request: ListRequest, reader: HeadReader | None = None
) -> ConversationPage:
    """Transaction: one page of ``request.user_id``'s conversations (``reader``: the
    store's own indexed read of the heads, else SQL's or the general path)."""
    want = request.limit + 1
    states = [request.archived] if request.archived is not None else [False, True]
    rows: list[tuple[Any, str, str, Any, datetime, str | None]] = []
    entries = uow.entries
    for archived in states:
        if reader is not None:
            found = reader(request, archived, want)
        elif isinstance(entries, RunsStatements):
            found = entries.run_statements(
                partial(
                    list_heads,
                    user_id=request.user_id,
                    archived=archived,
                    by_updated=request.by_updated,
                    descending=request.descending,
                    after=request.after,
                    updated_after=request.updated_after,
                    tags=request.tags,
                    limit=want,
                )
            )
        else:
            found = _scan_heads(uow, request, archived)[:want]
        rows.extend(
            (_sort_value(request, eid, content, created), eid, ns, content, created, owner)
            for eid, ns, content, created, owner in found
        )
    rows.sort(key=lambda row: (row[0], row[1]), reverse=request.descending)
    page = rows[: request.limit]
    items = [_info(ns, content, created, owner) for _, _, ns, content, created, owner in page]
    more = len(rows) > request.limit
    cursor = _encode_cursor(request.order, page[-1][0], page[-1][1]) if more and page else None
    return ConversationPage(items, cursor)


def _scan_heads(
    uow: UnitOfWork, request: ListRequest, archived: bool
) -> list[tuple[str, str, Any, datetime, str | None]]:
    """The general path (stores without SQL): the user's index rows, then each head."""
    found: list[tuple[Any, str, str, Any, datetime, str | None]] = []
    for row in uow.entries.list(INDEX_NAMESPACE, user_id=request.user_id):
        if row.key is None:
            continue
        head = uow.entries.get_by_key(conversation_namespace(row.key), HEAD_KEY)
        if head is None:
            continue
        fields = field_values(head)
        content = fields["content"]
        if not isinstance(content, dict) or fields["user_id"] != request.user_id:
            continue
        if (content.get(HEAD_ARCHIVED) is True) != archived:
            continue
        tags = content.get(HEAD_TAGS)
        if request.tags and not (isinstance(tags, list) and set(request.tags) <= set(tags)):
            continue
        value = _sort_value(request, fields["entry_id"], content, fields["created_at"])
        if request.updated_after is not None:
            updated = content.get(HEAD_UPDATED_AT)
            if not isinstance(updated, str) or updated <= request.updated_after:
                continue
        if request.after is not None:
            key = (value, fields["entry_id"])
            if (key >= request.after) if request.descending else (key <= request.after):
                continue
        found.append(
            (
                value,
                fields["entry_id"],
                fields["namespace"],
                content,
                fields["created_at"],
                fields["user_id"],
            )
        )
    found.sort(key=lambda row: (row[0], row[1]), reverse=request.descending)
    return [row[1:] for row in found]
