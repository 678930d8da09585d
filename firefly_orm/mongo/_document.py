"""The stored shape of an entry in MongoDB, and the queries over it.

Storage layout (one document per :class:`~firefly_orm.entry.MemoryEntry`):

* every entry field is a document field; ``scope`` is its string value;
* ``created_at`` / ``expires_at`` are real BSON dates (never ISO strings), so
  range filters, sorting and the TTL index work.  BSON dates hold milliseconds;
  the sub-millisecond microseconds (0-999) go to ``created_at_us`` /
  ``expires_at_us`` so an entry reads back exactly as it was saved and entries
  created within one millisecond keep their order;
* ``key``, ``expires_at``, ``user_id``, ``search_text`` and ``search_language``
  are *omitted* (not ``null``) when unset, so the partial indexes
  (``{$exists: true}``) only hold entries that have them;
* an entry with ``search_text`` also stores ``search_words`` (:data:`SEARCH_WORDS`):
  the distinct words of that text as :func:`firefly_orm._search.text_terms`
  splits them, sorted; written in the same document update as the text, so
  the two never disagree (the full-text search of
  :mod:`firefly_orm.mongo._queries` looks words up in its multikey index).
  Omitted when the text has no words.  Reads do not fetch it;
* a document written by a non-transactional unit of work also holds
  ``_firefly_commit``: the id of that commit (:data:`COMMIT_FIELD`), which makes
  its writes idempotent for a roll-forward; reads ignore it;
* the commit journal of non-transactional units of work lives in the same
  collection, as documents with NO ``namespace`` field and an ``entry_id``
  starting with NUL (which no entry id or namespace may contain), so no query
  of entries ever matches them (:mod:`firefly_orm.mongo._journal`);
* JSON values that BSON or MongoDB field-name rules cannot hold as they are
  (keys starting with ``$``, containing ``.`` or NUL, empty keys, integers
  outside 64 bits) are stored as ``{"__firefly_orm_json__": "<JSON text>"}``
  (the wrapper of :mod:`firefly_orm.entry`) and decoded on read.

:func:`entry_to_document` and :func:`document_to_entry` are the one place that
converts between the two shapes.

Indexes (:func:`memory_indexes`, created through Beanie by the store):
``(namespace, created_at, created_at_us, entry_id)`` for ordered loads,
``(namespace, key, created_at, created_at_us, entry_id)`` partial on ``key``
existing (lookups by key and key-prefix ranges), ``(namespace, key)``
(:data:`KEY_INDEX`, not partial: the one a planner that ignores partial indexes
uses for the same lookups), ``(user_id, namespace, created_at, created_at_us, entry_id)`` partial on
``user_id`` existing, ``(namespace, search_words)`` (multikey: one key per word
of an entry; full-text search), ``expires_at`` partial on existing (with
``ttl_index=True`` the same index is also a real TTL index,
``expireAfterSeconds=0``: MongoDB allows only one index per key pattern, so one
index serves both), and ``entry_id`` unique.  ``initialize()`` creates the
missing ones on an existing collection (an index build; the others are left
as they are).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from firefly_orm._layout import HEAD_ARCHIVED, HEAD_UPDATED_AT
from firefly_orm._search import text_terms
from firefly_orm.entry import (
    JSON_WRAPPER_KEY,
    MemoryEntry,
    MemoryScope,
    key_prefix_upper_bound,
    unwrap_stored_json,
    wrap_json_for_storage,
)
from firefly_orm.errors import EntryValidationError, StoreCorruptedError, scrub_secret, url_secrets
from firefly_orm.mongo._driver import Document, IndexModel, PyMongoError

__all__ = [
    "COMMIT_FIELD",
    "JSON_WRAPPER_KEY",
    "KEY_INDEX",
    "MemoryDocument",
    "MemoryDocumentFields",
    "SEARCH_INDEX",
    "SEARCH_WORDS",
    "document_to_entry",
    "entry_to_document",
    "memory_indexes",
    "search_words",
    "validate_collection_name",
    "validate_database_name",
    "validate_url",
]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

#: The document field holding the words of ``search_text`` (see the module docstring).
SEARCH_WORDS = "search_words"
#: The field holding an entry's vector, ``{"model", "dimensions", "values"}``
#: (:mod:`firefly_orm.mongo._vectors`); absent when it has none.
VECTOR_FIELD = "vector"
#: The index ``(namespace, key)`` (not partial) of lookups by key and key ranges.
KEY_INDEX = "ix_namespace_key"
#: The index of a user's conversation list (the heads by archived flag and updated_at).
CONVERSATION_LIST_INDEX = "ix_user_key_archived_updated"
#: The same by creation time.
CONVERSATION_CREATED_INDEX = "ix_user_key_archived_created"
#: A user's rows by creation time (the usage totals of a user's turns, a day or month).
USER_TIME_INDEX = "ix_user_created_key"
#: The multikey index ``(namespace, search_words)`` full-text search looks words up in.
SEARCH_INDEX = "ix_namespace_search_words"


# --------------------------------------------------------------------------- the document


class MemoryDocumentFields(BaseModel):
    """The fields of a stored entry, as a plain pydantic model (used to check reads)."""

    model_config = ConfigDict(extra="ignore")

    entry_id: str
    namespace: str
    scope: MemoryScope
    key: str | None = None
    content: Any = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime
    created_at_us: int = Field(default=0, ge=0, le=999)
    expires_at: datetime | None = None
    expires_at_us: int | None = Field(default=None, ge=0, le=999)
    importance: float = Field(default=0.5, ge=0.0, le=1.0)
    version: int = Field(default=1, ge=0)
    user_id: str | None = None
    search_text: str | None = None
    search_language: str | None = None


class MemoryDocument(Document, MemoryDocumentFields):
    """Beanie document mirroring :class:`~firefly_orm.entry.MemoryEntry`.

    Each :class:`~firefly_orm.mongo.MongoDBStore` binds its own subclass of this
    model to its collection (Beanie keeps the collection in class-level
    settings, so a subclass per store lets stores with different collections
    share a process).
    """

    class Settings:
        name = "entries"


def _where_set(field: str) -> dict[str, Any]:
    """The filter of a partial index over the documents that have ``field``."""
    return {field: {"$exists": True}}


def memory_indexes(*, ttl_index: bool = True) -> list[IndexModel]:
    """The indexes of an entries collection.

    Args:
        ttl_index: Make the ``expires_at`` index a TTL index
            (``expireAfterSeconds=0``) so MongoDB removes expired entries itself.
    """
    expires_options: dict[str, Any] = {
        "name": "ix_expires_at",
        "partialFilterExpression": _where_set("expires_at"),
    }
    if ttl_index:
        expires_options["expireAfterSeconds"] = 0
    return [
        IndexModel([("namespace", 1), *BY_TIME], name="ix_namespace_created"),
        IndexModel(
            [("namespace", 1), *BY_KEY],
            name="ix_namespace_key_created",
            partialFilterExpression=_where_set("key"),
        ),
        # Not partial, and beside the partial one above: SecantusDB's planner
        # never picks a partial index on its own (it scans the collection), so
        # a lookup by key or a key range would cost the collection's size there.
        IndexModel([("namespace", 1), ("key", 1)], name=KEY_INDEX),
        IndexModel(
            [("user_id", 1), ("namespace", 1), *BY_TIME],
            name="ix_user_namespace_created",
            partialFilterExpression=_where_set("user_id"),
        ),
        # Not partial: SecantusDB's planner cannot use an index whose filter is
        # ``$exists`` for a ``$in`` query; an entry without words costs one key.
        IndexModel([("namespace", 1), (SEARCH_WORDS, 1)], name=SEARCH_INDEX),
        IndexModel([("expires_at", 1)], **expires_options),
        IndexModel([("entry_id", 1)], name="ux_entry_id", unique=True),
        # A user's conversation list (conversation/_listing_mongo.py): the heads
        # (key "head") by archived flag and updated_at, as migration 0010 on SQL.
        # Not partial, for SecantusDB's planner (see above).
        IndexModel(
            [
                ("user_id", 1),
                ("key", 1),
                (f"content.{HEAD_ARCHIVED}", 1),
                (f"content.{HEAD_UPDATED_AT}", 1),
                ("entry_id", 1),
            ],
            name=CONVERSATION_LIST_INDEX,
        ),
        IndexModel(
            [
                ("user_id", 1),
                ("key", 1),
                (f"content.{HEAD_ARCHIVED}", 1),
                *BY_TIME,
            ],
            name=CONVERSATION_CREATED_INDEX,
        ),
        # The usage totals of a user (conversation/_listing_mongo.py): their rows in a
        # time range, the key in the index so only turn rows are fetched.  Not
        # partial, for SecantusDB's planner (see above).
        IndexModel([("user_id", 1), *BY_TIME[:2], ("key", 1)], name=USER_TIME_INDEX),
    ]


def document_model_for(collection: str, *, ttl_index: bool) -> type[MemoryDocument]:
    """A :class:`MemoryDocument` subclass to bind (with Beanie) to ``collection``."""
    index_models = memory_indexes(ttl_index=ttl_index)

    class StoreMemoryDocument(MemoryDocument):
        class Settings:
            name = collection
            indexes = index_models

    return StoreMemoryDocument


# --------------------------------------------------------------------------- conversion


def _split_time(value: datetime) -> tuple[datetime, int]:
    """UTC datetime -> (the millisecond-precision part, the remaining microseconds)."""
    value = value.astimezone(UTC)
    sub_ms = value.microsecond % 1000
    return value.replace(microsecond=value.microsecond - sub_ms), sub_ms


def _join_time(value: datetime, sub_ms: int | None) -> datetime:
    value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value + timedelta(microseconds=sub_ms or 0)


#: The deepest list/dict nesting stored as BSON as it is.  MongoDB documents a
#: limit of 100 levels of nesting; ``content``/``metadata`` sit one level
#: below the document, so deeper values (validation allows up to
#: ``MAX_JSON_DEPTH``) are stored as JSON text through the wrapper.
_INLINE_DEPTH = 64


def _needs_wrapping(value: Any, depth: int = 1) -> bool:
    """True if ``value`` cannot be stored as BSON as it is (recursion bounded by
    :data:`_INLINE_DEPTH`)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return not _INT64_MIN <= value <= _INT64_MAX
    if isinstance(value, dict | list) and depth > _INLINE_DEPTH:
        return True
    if isinstance(value, dict):
        for k, v in value.items():
            if not k or k.startswith("$") or "." in k or "\x00" in k:
                return True
            if _needs_wrapping(v, depth + 1):
                return True
        return False
    if isinstance(value, list):
        return any(_needs_wrapping(v, depth + 1) for v in value)
    return False


def _encode_json(value: Any) -> Any:
    text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    normalised = json.loads(text)  # tuples -> lists, non-str keys -> str (as to_dict does)
    return wrap_json_for_storage(normalised, text=text, unstorable=_needs_wrapping(normalised))


def entry_to_document(entry: MemoryEntry, namespace: str) -> dict[str, Any]:
    """MemoryEntry -> the BSON-ready field dict stored in MongoDB (no ``_id``).

    The entry must have passed :func:`~firefly_orm.entry.validate_entry`.
    ``key``/``expires_at``/``user_id``/``search_text``/``search_language`` are
    left out when unset; ``search_text`` comes with its :func:`search_words`
    (left out when there are none).
    """
    created, created_us = _split_time(entry.created_at)
    doc: dict[str, Any] = {
        "entry_id": entry.entry_id,
        "namespace": namespace,
        "scope": MemoryScope(entry.scope).value,
        "content": _encode_json(entry.content),
        "metadata": _encode_json(entry.metadata_),
        "created_at": created,
        "created_at_us": created_us,
        "importance": float(entry.importance),
        "version": entry.version,
    }
    if entry.key is not None:
        doc["key"] = entry.key
    if entry.user_id is not None:
        doc["user_id"] = entry.user_id
    if entry.expires_at is not None:
        doc["expires_at"], doc["expires_at_us"] = _split_time(entry.expires_at)
    if entry.search_text is not None:
        doc["search_text"] = entry.search_text
        words = search_words(entry.search_text)
        if words:
            doc[SEARCH_WORDS] = words
    if entry.search_language is not None:
        doc["search_language"] = entry.search_language
    return doc


def search_words(text: str | None) -> list[str]:
    """The words of ``text`` stored in :data:`SEARCH_WORDS`: distinct, lower-cased, sorted.

    The words :func:`firefly_orm._search.text_terms` finds, so a stored entry
    matches exactly the queries the tokenised match of the other stores
    would match it with.
    """
    return sorted(text_terms(text))


def document_to_entry(document: Mapping[str, Any]) -> MemoryEntry:
    """A stored document (as pymongo returns it) -> a detached MemoryEntry.

    Datetimes come back timezone-aware UTC whether or not the client was
    created with ``tz_aware=True``.

    Raises:
        StoreCorruptedError: The document does not have the expected shape.
    """
    try:
        fields = MemoryDocumentFields.model_validate(dict(document))
    except ValidationError as exc:
        raise StoreCorruptedError(
            f"stored MongoDB document {document.get('_id')!r} is not a memory entry: {exc}"
        ) from None
    metadata = unwrap_stored_json(fields.metadata)
    if not isinstance(metadata, dict):
        raise StoreCorruptedError(f"entry {fields.entry_id!r}: metadata is not an object")
    return MemoryEntry.from_dict(
        {
            "entry_id": fields.entry_id,
            "namespace": fields.namespace,
            "scope": fields.scope,
            "key": fields.key,
            "content": unwrap_stored_json(fields.content),
            "metadata": metadata,
            "created_at": _join_time(fields.created_at, fields.created_at_us),
            "expires_at": (
                None
                if fields.expires_at is None
                else _join_time(fields.expires_at, fields.expires_at_us)
            ),
            "importance": fields.importance,
            "version": fields.version,
            "user_id": fields.user_id,
            "search_text": fields.search_text,
            "search_language": fields.search_language,
        }
    )


# --------------------------------------------------------------------------- queries

#: ``(created_at, entry_id)`` order, oldest first / newest first.
BY_TIME = [("created_at", 1), ("created_at_us", 1), ("entry_id", 1)]
BY_TIME_NEWEST_FIRST = [(name, -1) for name, _ in BY_TIME]
#: ``(key, created_at, entry_id)`` order (the ``ix_namespace_key_created`` index).
BY_KEY = [("key", 1), *BY_TIME]

_OPTIONAL_FIELDS = (
    "key",
    "expires_at",
    "expires_at_us",
    "user_id",
    "search_text",
    "search_language",
    SEARCH_WORDS,
)

#: The field naming the journaled commit that last wrote a document (see
#: :mod:`firefly_orm.mongo._journal`); not part of the entry.
COMMIT_FIELD = "_firefly_commit"


def upsert_pipeline(doc: Mapping[str, Any], commit: str | None = None) -> list[dict[str, Any]]:
    """An update pipeline writing ``doc`` and bumping the stored version.

    The version becomes the stored one plus one, or ``max(version, 1)`` on
    insert, in one atomic server-side step.  Every value is a ``$literal`` so
    strings that start with ``$`` are never read as field paths.

    With ``commit`` (a journaled commit's id) the document is marked
    :data:`COMMIT_FIELD` ``= commit`` and a document already carrying that mark
    keeps its version: applying the pipeline twice leaves what applying it
    once does (a roll-forward may repeat a write the crashed writer made).
    """
    first_version = max(int(doc["version"]), 1)
    values: dict[str, Any] = {
        name: {"$literal": value}
        for name, value in doc.items()
        if name not in ("entry_id", "version")
    }
    bumped: dict[str, Any] = {"$add": [{"$ifNull": ["$version", first_version - 1]}, 1]}
    if commit is None:
        values["version"] = bumped
    else:
        values["version"] = {"$cond": [{"$eq": [f"${COMMIT_FIELD}", commit]}, "$version", bumped]}
        values[COMMIT_FIELD] = {"$literal": commit}
    # A re-save keeps the vector; a move to another namespace or a new text drops it.
    same_namespace = {"$eq": ["$namespace", {"$literal": doc["namespace"]}]}
    same_text = {"$eq": [{"$ifNull": ["$search_text", None]}, {"$literal": doc.get("search_text")}]}
    keep = {"$and": [same_namespace, same_text]}
    keep_vector = {"$cond": [keep, f"${VECTOR_FIELD}", "$$REMOVE"]}
    pipeline: list[dict[str, Any]] = [{"$set": {VECTOR_FIELD: keep_vector}}, {"$set": values}]
    absent = [name for name in _OPTIONAL_FIELDS if name not in doc]
    if absent:
        pipeline.append({"$unset": absent})
    return pipeline


def live_filter(now: datetime) -> dict[str, Any]:
    """Matches the entries not expired at ``now``'s millisecond.

    One condition on the ``expires_at`` field, never a top-level ``$or``, so the
    query still rides the ``(namespace, ...)`` indexes on servers whose planner
    gives up on a top-level ``$or``.  BSON dates hold milliseconds: an entry
    that expires within ``now``'s millisecond but not after ``now`` matches too;
    drop it with :func:`is_live`.
    """
    now_ms, _ = _split_time(now)
    return {"expires_at": {"$not": {"$lt": now_ms}}}


def is_live(entry: MemoryEntry, now: datetime) -> bool:
    """Whether ``entry`` is not expired at ``now`` (microsecond-exact)."""
    return entry.expires_at is None or entry.expires_at > now


def expired_filter(now: datetime) -> dict[str, Any]:
    """Matches entries expired at ``now`` (the boundary counts as expired)."""
    now_ms, now_us = _split_time(now)
    return {
        "$or": [
            {"expires_at": {"$lt": now_ms}},
            {"expires_at": now_ms, "expires_at_us": {"$lte": now_us}},
        ]
    }


def key_prefix_filter(prefix: str) -> dict[str, Any]:
    """Matches keys starting with ``prefix`` as one index range.

    ``key >= prefix`` and ``key <`` its
    :func:`~firefly_orm.entry.key_prefix_upper_bound` (when there is one).
    MongoDB compares strings by their UTF-8 bytes, which orders like Python's
    code-point comparison; an empty prefix matches every entry that has a key.
    """
    condition: dict[str, Any] = {"$gte": prefix}
    upper = key_prefix_upper_bound(prefix)
    if upper is not None:
        condition["$lt"] = upper
    return {"key": condition}


# --------------------------------------------------------------------------- names

_DB_FORBIDDEN = frozenset('/\\. "$*<>:|?\x00')


def validate_url(url: str, *, strict: bool = False) -> str:
    """Return ``url`` if pymongo accepts it as a connection string, judged without I/O.

    The host list, ports and credentials are checked now, so a bad URL fails
    where it is given, not at the first connection.  With ``strict``, so are
    the options: an unknown option or a bad option value, which the client
    only warns about and then ignores, is refused too (the settings read
    from the environment are strict).  A ``mongodb+srv://`` URL is checked
    without its DNS lookup.  The message never repeats the URL's password.

    Raises:
        EntryValidationError: (field ``url``) when it is not accepted.
    """
    check: Callable[..., Any]
    try:
        from pymongo.uri_parser_shared import _validate_uri as check
    except ImportError:  # pragma: no cover - pymongo before 4.13: parse (DNS for +srv)
        from pymongo.uri_parser import parse_uri

        def check(uri: str, default_port: int, validate: bool, warn: bool) -> Any:
            if uri.lower().startswith("mongodb+srv://"):
                return None  # checked by the client, which resolves it
            return parse_uri(uri, default_port, validate, warn=warn)

    try:
        # Lenient: the options are not validated (their warnings are the client's to give).
        check(url, 27017, strict, False)
    except (PyMongoError, ValueError, TypeError) as exc:
        raise EntryValidationError(
            "url", scrub_secret(f"not a usable MongoDB URL: {exc}", url_secrets(url))
        ) from None
    return url


def validate_database_name(name: Any) -> str:
    """Return ``name`` if MongoDB accepts it as a database name on every platform.

    Raises:
        EntryValidationError: (a ``ValueError``) when it does not.
    """
    if not isinstance(name, str) or not name:
        raise EntryValidationError("database", "must be a non-empty string")
    bad = sorted(set(name) & _DB_FORBIDDEN)
    if bad:
        raise EntryValidationError("database", f"must not contain any of {''.join(bad)!r}")
    if len(name.encode()) >= 64:
        raise EntryValidationError("database", "must be shorter than 64 bytes")
    return name


def validate_collection_name(name: Any, database: str = "") -> str:
    """Return ``name`` if MongoDB accepts it as a collection name.

    Raises:
        EntryValidationError: (a ``ValueError``) when it does not.
    """
    if not isinstance(name, str) or not name:
        raise EntryValidationError("collection", "must be a non-empty string")
    if "$" in name or "\x00" in name:
        raise EntryValidationError("collection", "must not contain '$' or NUL")
    if name.startswith(".") or name.endswith(".") or ".." in name:
        raise EntryValidationError("collection", "must not start or end with '.' or contain '..'")
    if name.startswith("system."):
        raise EntryValidationError("collection", "the 'system.' prefix is reserved")
    if len(f"{database}.{name}".encode()) > 255:
        raise EntryValidationError(
            "collection", "'<database>.<collection>' must be at most 255 bytes"
        )
    return name
