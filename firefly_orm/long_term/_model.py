"""Long-term items: the public result models, how an item is laid out as an entry, input checks.

An item is one :class:`~firefly_orm.entry.MemoryEntry` of scope
``LONG_TERM`` in the memory's namespace:

* ``content``: ``{"text": str, "tags": [str, ...], "kind": "semantic" | "episodic"}``;
* ``search_text``: the text again (what full-text search indexes), with
  ``search_language`` the memory's language (``None``: PostgreSQL's ``simple``);
* ``metadata``: the caller's JSON object, untouched;
* ``key``: the caller's key, or ``None``;
* ``user_id``: the owner, or ``None`` (nobody in particular);
* ``importance``, ``created_at``, ``expires_at``: as given (``created_at`` is
  the time of the last :meth:`~firefly_orm.long_term.LongTermMemory.remember`).

A keyed item's id is derived from the namespace, the owner and the key
(:func:`keyed_entry_id`), so remembering a key again is one upsert on every
store, and two users' items with the same key never collide.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple, TypeVar

from pydantic import AwareDatetime, BaseModel, ConfigDict

from firefly_orm._layout import ITEM_DEFAULT_KIND
from firefly_orm.conversation._model import check_metadata
from firefly_orm.entry import (
    MAX_SEARCH_TEXT_LENGTH,
    MemoryEntry,
    MemoryScope,
    derived_entry_id,
    new_entry_id,
    utcnow,
    validate_entry,
    validate_key,
    validate_user_id,
)
from firefly_orm.entry._rules import check_unit_interval
from firefly_orm.errors import EntryValidationError, StoreCorruptedError

__all__ = [
    "EPISODIC",
    "KINDS",
    "MAX_TAGS",
    "MAX_TAG_LENGTH",
    "SEMANTIC",
    "ItemDraft",
    "MemoryItem",
    "Recalled",
    "check_kind",
    "check_ref",
    "check_tags",
    "check_text",
    "item_from_entry",
    "keyed_entry_id",
    "parse_import_item",
    "parse_iso",
]

#: A fact that holds until it is forgotten or evicted.
SEMANTIC = ITEM_DEFAULT_KIND
#: Something that happened; expires after the memory's ``episodic_retention_days``.
EPISODIC = "episodic"
#: The kinds of item.
KINDS = (SEMANTIC, EPISODIC)
#: At most this many tags per item.
MAX_TAGS = 64
#: Longest accepted tag, in characters.
MAX_TAG_LENGTH = 200

#: The fields of an exported item (:meth:`MemoryItem.to_dict`), which an import accepts.
_ITEM_FIELDS = frozenset(
    {
        "id",
        "text",
        "importance",
        "tags",
        "kind",
        "metadata",
        "key",
        "user_id",
        "created_at",
        "expires_at",
    }
)


class MemoryItem(BaseModel):
    """One long-term memory, as :class:`~firefly_orm.long_term.LongTermMemory` returns it.

    Attributes:
        id: The entry id (what ``remember`` returned; ``forget``/``get`` take it).
        text: What was remembered (the searched text).
        importance: 0.0-1.0; ranks recall results of equal relevance, and the
            least important items are evicted first.
        tags: The item's tags, in the order given (no duplicates).
        kind: ``"semantic"`` (a lasting fact) or ``"episodic"`` (an event that
            expires after the memory's retention).
        metadata: The caller's JSON object.
        key: The caller's key (an upsert handle), or ``None``.
        user_id: The owner, or ``None``.
        created_at: When it was last remembered (timezone-aware UTC).
        expires_at: When it stops being returned, or ``None``.
    """

    model_config = ConfigDict(frozen=True)

    id: str
    text: str
    importance: float
    tags: tuple[str, ...] = ()
    kind: str = SEMANTIC
    metadata: dict[str, Any] = {}
    key: str | None = None
    user_id: str | None = None
    created_at: AwareDatetime
    expires_at: AwareDatetime | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (ISO-8601 times, tags as a list): the export format."""
        data = self.model_dump(mode="json")
        data["tags"] = list(self.tags)
        return data


class Recalled(NamedTuple):
    """One recall result: the item and its text relevance (higher is better).

    Scores come from the store's full-text search (:mod:`firefly_orm._search`);
    compare them only within one result list.
    """

    item: MemoryItem
    score: float


# --------------------------------------------------------------------------- ids


def keyed_entry_id(namespace: str, user_id: str | None, key: str) -> str:
    """The entry id of ``key`` for ``user_id`` (``None``: the unowned items) in ``namespace``.

    Neither user ids nor keys contain NUL, and a user id is never empty, so
    ``"<user>\\x00<key>"`` (``"\\x00<key>"`` without an owner) names one
    (owner, key) pair.
    """
    return derived_entry_id(namespace, f"{user_id or ''}\x00{key}")


def _import_entry_id(namespace: str, source_id: str) -> str:
    """The id an imported unkeyed item with ``source_id`` gets when that id is not already here.

    Keys never contain NUL, so this never equals a :func:`keyed_entry_id`.
    """
    return derived_entry_id(namespace, f"\x00import\x00{source_id}")


# --------------------------------------------------------------------------- checks


def check_text(text: Any, field: str = "content") -> str:
    """``text`` if it is a non-blank string the search index accepts."""
    if not isinstance(text, str):
        raise EntryValidationError(field, f"must be a str, got {type(text).__name__}")
    if not text.strip():
        raise EntryValidationError(field, "must not be empty or blank")
    if len(text) > MAX_SEARCH_TEXT_LENGTH:
        raise EntryValidationError(
            field, f"must be at most {MAX_SEARCH_TEXT_LENGTH} characters, got {len(text)}"
        )
    if "\x00" in text:
        raise EntryValidationError(field, "must not contain NUL characters")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise EntryValidationError(field, "must be valid Unicode (a lone surrogate)") from None
    return text


def check_tags(tags: Any, field: str = "tags") -> tuple[str, ...]:
    """``tags`` as a tuple of distinct non-empty strings (first occurrence kept)."""
    if tags is None:
        return ()
    if isinstance(tags, str | bytes) or not isinstance(tags, Iterable):
        raise EntryValidationError(field, "must be a list or tuple of strings")
    found: dict[str, None] = {}
    for tag in tags:
        if not isinstance(tag, str) or not tag:
            raise EntryValidationError(field, f"each tag must be a non-empty string, got {tag!r}")
        if len(tag) > MAX_TAG_LENGTH or "\x00" in tag:
            raise EntryValidationError(
                field, f"each tag must be at most {MAX_TAG_LENGTH} characters without NUL"
            )
        found[tag] = None
    if len(found) > MAX_TAGS:
        raise EntryValidationError(field, f"at most {MAX_TAGS} tags, got {len(found)}")
    return tuple(found)


def check_kind(kind: Any, field: str = "kind") -> str:
    """``kind`` if it is one of :data:`KINDS`."""
    if kind not in KINDS or not isinstance(kind, str):
        raise EntryValidationError(field, f"must be one of {', '.join(KINDS)}, got {kind!r}")
    return kind


def check_ref(ref: Any, field: str = "id_or_key") -> str:
    """``ref`` (an item id or key) if it is a non-empty string without NUL."""
    if not isinstance(ref, str) or not ref:
        raise EntryValidationError(field, f"must be a non-empty string, got {ref!r}")
    try:
        return validate_key(ref)
    except EntryValidationError as exc:
        raise EntryValidationError(field, str(exc).removeprefix(f"{exc.field}: ")) from None


def _check_key(key: Any, field: str = "key") -> str | None:
    if key is None:
        return None
    if not isinstance(key, str) or not key:
        raise EntryValidationError(field, "must be a non-empty string or None")
    return validate_key(key)


def _check_importance(importance: Any, field: str = "importance") -> float:
    return check_unit_interval(importance, field) + 0.0  # -0.0 -> 0.0


# --------------------------------------------------------------------------- entries


@dataclass(frozen=True)
class ItemDraft:
    """A checked item before it has an entry id (what ``remember`` and imports write).

    ``source_id`` is the id an imported item had (``None`` for a new item).
    """

    text: str
    importance: float
    tags: tuple[str, ...]
    kind: str
    metadata: dict[str, Any]
    key: str | None
    user_id: str | None
    expires_at: datetime | None
    created_at: datetime | None = None
    source_id: str | None = None

    @classmethod
    def build(
        cls,
        text: Any,
        *,
        importance: Any,
        tags: Any,
        kind: Any,
        metadata: Any,
        key: Any,
        user_id: Any,
        expires_at: Any,
        retention: timedelta | None,
    ) -> ItemDraft:
        """Check what :meth:`~firefly_orm.long_term.LongTermMemory.remember` was given.

        An episodic item without ``expires_at`` expires ``retention`` from now
        (never when ``retention`` is ``None``).  An ``expires_at`` that has
        already passed is refused (the item could never be read).
        """
        kind = check_kind(kind)
        if expires_at is not None:
            if not isinstance(expires_at, datetime) or expires_at.tzinfo is None:
                raise EntryValidationError("expires_at", "must be a timezone-aware datetime")
            if expires_at <= utcnow():
                raise EntryValidationError("expires_at", "has already passed")
        elif kind == EPISODIC and retention is not None:
            expires_at = utcnow() + retention
        return cls(
            text=check_text(text),
            importance=_check_importance(importance),
            tags=check_tags(tags),
            kind=kind,
            metadata=check_metadata(metadata),
            key=_check_key(key),
            user_id=None if user_id is None else validate_user_id(user_id),
            expires_at=expires_at,
        )

    def entry_id(self, namespace: str) -> str:
        """The id this item gets in ``namespace`` when no stored entry decides it.

        Keyed: :func:`keyed_entry_id`; imported with an id: derived from that
        id (see :func:`~firefly_orm.long_term._ops.import_items`); else a new id.
        """
        if self.key is not None:
            return keyed_entry_id(namespace, self.user_id, self.key)
        if self.source_id is not None:
            return _import_entry_id(namespace, self.source_id)
        return new_entry_id()

    def entry(self, namespace: str, entry_id: str, language: str | None) -> MemoryEntry:
        """The validated entry of this item (see the module docstring for the layout)."""
        entry = MemoryEntry.from_dict(
            {
                "entry_id": entry_id,
                "namespace": namespace,
                "scope": MemoryScope.LONG_TERM,
                "key": self.key,
                "content": {"text": self.text, "tags": list(self.tags), "kind": self.kind},
                "metadata": self.metadata,
                "created_at": self.created_at if self.created_at is not None else utcnow(),
                "expires_at": self.expires_at,
                "importance": self.importance,
                "user_id": self.user_id,
                "search_text": self.text,
                "search_language": language,
            }
        )
        return validate_entry(entry, namespace)


def item_from_entry(entry: MemoryEntry) -> MemoryItem:
    """The :class:`MemoryItem` a stored entry holds.

    Raises:
        StoreCorruptedError: The entry is not laid out as a long-term item.
    """
    content = entry.content
    try:
        if not isinstance(content, dict) or not isinstance(content.get("text"), str):
            raise TypeError("content has no text")
        tags = content.get("tags") or []
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise TypeError("tags are not a list of strings")
        return MemoryItem(
            id=entry.entry_id,
            text=content["text"],
            importance=entry.importance,
            tags=tuple(tags),
            kind=str(content.get("kind") or SEMANTIC),
            metadata=dict(entry.metadata_),
            key=entry.key,
            user_id=entry.user_id,
            created_at=entry.created_at,
            expires_at=entry.expires_at,
        )
    except (TypeError, ValueError) as exc:
        raise StoreCorruptedError(
            f"entry {entry.entry_id!r} in {entry.namespace!r} is not a long-term item: {exc}"
        ) from exc


# --------------------------------------------------------------------------- import


_Parsed = TypeVar("_Parsed")


def parse_iso(value: Any, parse: Callable[[str], _Parsed], field: str, expected: str) -> _Parsed:
    """``value`` read by ``parse`` (``date.fromisoformat``, ``datetime.fromisoformat``...).

    Raises:
        EntryValidationError: ``value`` is not a string ``parse`` reads
            (``field`` "must be <expected>").
    """
    if isinstance(value, str):
        try:
            return parse(value)
        except ValueError:
            pass
    raise EntryValidationError(field, f"must be {expected}, got {value!r}")


def _datetime(value: Any, field: str) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return parse_iso(value, datetime.fromisoformat, field, "an ISO-8601 datetime")


def parse_import_item(data: Any, position: int) -> ItemDraft:
    """One item of an import (a :class:`MemoryItem` or its :meth:`~MemoryItem.to_dict`), checked.

    Only ``text`` is required.  Unlike ``remember``, an ``expires_at`` in the
    past is kept (the item is then never returned, and ``cleanup_expired``
    removes it).

    Raises:
        EntryValidationError: The field is named ``items[<position>].<field>``.
    """
    where = f"items[{position}]"
    if isinstance(data, MemoryItem):
        data = data.to_dict()
    if not isinstance(data, Mapping):
        raise EntryValidationError(where, f"must be a dict, got {type(data).__name__}")
    unknown = sorted(str(name) for name in set(data) - _ITEM_FIELDS)
    if unknown:
        raise EntryValidationError(f"{where}.{unknown[0]}", "unknown item field")
    try:
        source_id = data.get("id")
        if source_id is not None and (
            not isinstance(source_id, str) or not source_id or len(source_id) > 64
        ):
            raise EntryValidationError("id", "must be a non-empty string of at most 64 chars")
        user_id = data.get("user_id")
        created_at = _datetime(data.get("created_at"), "created_at")
        expires_at = _datetime(data.get("expires_at"), "expires_at")
        for name, value in (("created_at", created_at), ("expires_at", expires_at)):
            if value is not None and value.tzinfo is None:
                raise EntryValidationError(name, "must be timezone-aware")
        return ItemDraft(
            text=check_text(data.get("text"), "text"),
            importance=_check_importance(data.get("importance", 0.5)),
            tags=check_tags(data.get("tags")),
            kind=check_kind(data.get("kind", SEMANTIC)),
            metadata=check_metadata(data.get("metadata")),
            key=_check_key(data.get("key")),
            user_id=None if user_id is None else validate_user_id(user_id),
            expires_at=expires_at,
            created_at=created_at,
            source_id=None if source_id is None else check_ref(source_id, "id"),
        )
    except EntryValidationError as exc:
        message = str(exc).removeprefix(f"{exc.field}: ")
        raise EntryValidationError(f"{where}.{exc.field}", message) from None
