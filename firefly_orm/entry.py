"""The unit of storage: :class:`MemoryScope` and :class:`MemoryEntry`.

``MemoryEntry`` is one SQLModel table (``memory_entries``) registered on the
library's own :data:`metadata` (never ``SQLModel.metadata``), so a host app that
also uses SQLModel does not see our table in its own autogenerate.  The same class
is the value object every store (in-memory, file, SQL, MongoDB) reads and writes.

The rules an entry obeys (checked by :func:`validate_entry`): importance in
0.0-1.0, JSON-serialisable content and metadata nested at most
:data:`MAX_JSON_DEPTH` levels with no dict keys that collide as JSON strings, a
version within the column's range (:data:`MAX_ENTRY_VERSION`), timezone-aware
datetimes (naive ones are *rejected*), no NUL characters in namespace or key, and
a bounded ``search_text`` (:data:`MAX_SEARCH_TEXT_LENGTH`) with a well-formed
``search_language`` (see :mod:`firefly_orm.search`).

They are checked twice:

* **at construction**: ``MemoryEntry(...)`` coerces each field to its type the
  way pydantic does (``importance="0.7"`` becomes ``0.7``, an ISO-8601 string
  becomes a ``datetime``), then applies the rules.  A bad field raises
  :class:`EntryFieldsError` at once: an
  :class:`~firefly_orm.errors.EntryValidationError` naming the field that is
  also a pydantic ``ValidationError``.  ``model_validate`` does the same;
  ``model_validate_json`` and a pydantic ``TypeAdapter`` (so a FastAPI request
  body) raise pydantic's ``ValidationError``, located at the field;
* **before every write**: every store calls :func:`validate_entry`, since an
  entry's attributes can be reassigned after construction.

The stores build the entries they *read* with :meth:`MemoryEntry.from_dict`
(and the SQL stores with the internal ``_from_values``): trusted values, no
coercion, no checks, several times cheaper than the constructor.  (pydantic's
``model_construct`` skips the checks too, but its entries lack SQLAlchemy's
instance state: use :meth:`~MemoryEntry.from_dict`.)

Serialised (``model_dump``, ``model_dump_json``, a ``TypeAdapter``), an entry
shows its metadata under the public name ``metadata`` whatever ``by_alias``
says, and the output validates back into an equal entry.
"""

from __future__ import annotations

import copy
import enum
import hashlib
import json
import math
import os
import re
import reprlib
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Self, cast

import sqlalchemy as sa
from pydantic import (
    ConfigDict,
    GetJsonSchemaHandler,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic.main import IncEx
from pydantic_core import CoreSchema, InitErrorDetails
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import registry
from sqlmodel import Field, SQLModel

from firefly_orm.errors import EntryValidationError
from firefly_orm.jsonvalues import (
    JSON_WRAPPER_KEY,
    MAX_JSON_DEPTH,
    check_json_structure,
    is_json_wrapper,
    unwrap_stored_json,
    validate_json_value,
    wrap_json_for_storage,
)
from firefly_orm.jsonvalues import (
    NUL_WRAPPER_KEY as NUL_WRAPPER_KEY,  # former name, still importable here
)
from firefly_orm.jsonvalues import decode_json_from_jsonb as decode_json_from_jsonb
from firefly_orm.jsonvalues import encode_json_for_jsonb as encode_json_for_jsonb

__all__ = [
    "JSON_WRAPPER_KEY",
    "MAX_ENTRY_VERSION",
    "DEFAULT_SEARCH_LANGUAGE",
    "EntryFieldsError",
    "MAX_JSON_DEPTH",
    "MAX_SEARCH_TEXT_LENGTH",
    "MAX_USER_ID_LENGTH",
    "check_json_structure",
    "TABLE_NAME",
    "MemoryEntry",
    "MemoryScope",
    "metadata",
    "derived_entry_id",
    "is_json_wrapper",
    "key_prefix_upper_bound",
    "new_entry_id",
    "unwrap_stored_json",
    "utcnow",
    "validate_entry",
    "validate_json_value",
    "validate_key",
    "validate_namespace",
    "validate_search_language",
    "validate_user_id",
    "version_exhausted",
    "wrap_json_for_storage",
]

TABLE_NAME = "memory_entries"

#: The largest ``version`` a store accepts: the range of the ``version`` column
#: (``INTEGER``, 32-bit signed on PostgreSQL, the narrowest backend).
MAX_ENTRY_VERSION = 2**31 - 1
#: Longest accepted ``user_id``.
MAX_USER_ID_LENGTH = 255
#: Longest accepted ``search_text``, in characters.  Far below PostgreSQL's
#: 1 MB ``tsvector`` limit even for text made only of distinct 4-byte words, so
#: an accepted text can always be indexed.
MAX_SEARCH_TEXT_LENGTH = 100_000
#: The text-search configuration used when ``search_language`` is ``None``
#: (PostgreSQL's ``simple``: lower-cased words, no stemming, no stop words).
DEFAULT_SEARCH_LANGUAGE = "simple"
#: A PostgreSQL text-search configuration name: a lower-case identifier.
_SEARCH_LANGUAGE_RE = re.compile(r"[a-z_][a-z0-9_]{0,62}")

#: The library's own MetaData (with a naming convention so Alembic names match).
metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "pk": "pk_%(table_name)s",
    }
)
_registry = registry(metadata=metadata)


class MemoryScope(enum.StrEnum):
    """What kind of memory an entry belongs to (compares equal to plain strings)."""

    CONVERSATION = "conversation"
    WORKING = "working"
    LONG_TERM = "long_term"


# --------------------------------------------------------------------------- time and ids

_clock_lock = threading.Lock()
_last_now = datetime(1970, 1, 1, tzinfo=UTC)


def utcnow() -> datetime:
    """Timezone-aware UTC now, strictly increasing within this process.

    Entries are ordered by ``(created_at, entry_id)``; a strictly increasing clock
    keeps entries created one after another in this process in creation order even
    when the system clock has coarse resolution.
    """
    global _last_now
    now = datetime.now(UTC)
    with _clock_lock:
        if now <= _last_now:
            now = _last_now + timedelta(microseconds=1)
        _last_now = now
    return now


_id_lock = threading.Lock()
_last_id_ms = 0
_id_seq = 0


def new_entry_id() -> str:
    """A new 32-hex-character id, ordered by creation time (UUIDv7-like layout).

    48 bits of milliseconds, a 16-bit per-millisecond counter, 64 random bits.
    """
    global _last_id_ms, _id_seq
    ms = time.time_ns() // 1_000_000
    with _id_lock:
        if ms <= _last_id_ms:
            ms = _last_id_ms
            _id_seq += 1
            if _id_seq > 0xFFFF:
                ms += 1
                _id_seq = 0
        else:
            _id_seq = 0
        _last_id_ms = ms
        seq = _id_seq
    return f"{ms & 0xFFFFFFFFFFFF:012x}{seq:04x}{os.urandom(8).hex()}"


def derived_entry_id(namespace: str, key: str) -> str:
    """A deterministic 32-hex-character id for the entry ``key`` of ``namespace``.

    Entries that must exist at most once per key (a working-memory fact, a
    conversation head, a turn) use it, so a plain upsert on ``entry_id`` is the
    atomic "set" on every store, and two concurrent inserts of the same key
    collide on the primary key instead of leaving duplicates.
    """
    digest = hashlib.sha256(f"{namespace}\x00{key}".encode()).hexdigest()
    return digest[:32]


# --------------------------------------------------------------------------- column types


class UTCDateTime(sa.TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend.

    PostgreSQL keeps ``TIMESTAMPTZ``; SQLite (which has no time zone type) stores
    the UTC wall time and gets ``tzinfo=UTC`` back on load.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise EntryValidationError("datetime", "naive datetimes are not accepted; use UTC")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class JSONValue(sa.TypeDecorator[Any]):
    """JSON text on SQLite, JSONB on PostgreSQL (with the NUL escape above).

    On SQLite the column is declared ``TEXT``: a column declared ``JSON`` has
    NUMERIC affinity there, which silently turns a stored ``1.0`` into ``1`` and
    a large integer into a float.
    """

    impl = sa.JSON(none_as_null=False)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> sa.types.TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(postgresql.JSONB(none_as_null=False))
        if dialect.name == "sqlite":
            return dialect.type_descriptor(sa.Text())
        return dialect.type_descriptor(sa.JSON(none_as_null=False))

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if dialect.name == "postgresql":
            return encode_json_for_jsonb(value)
        if dialect.name == "sqlite":
            return json.dumps(value, ensure_ascii=False)
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        if dialect.name == "postgresql":
            return decode_json_from_jsonb(value)
        if dialect.name == "sqlite":
            return None if value is None else json.loads(value)
        return value


_SCOPE_VALUES = tuple(s.value for s in MemoryScope)
#: The metadata field's Python name (``metadata`` is taken on declarative
#: classes); its public name, used in input and output, is the field's alias
#: (``_METADATA_ALIAS``, read from the field below the class).
_METADATA_FIELD = "metadata_"


class _Base(SQLModel, registry=_registry):
    """Declarative base bound to the library's own metadata."""


class MemoryEntry(_Base, table=True):
    """One stored memory item.

    Attributes:
        entry_id: Primary key; a 32-hex-character, time-ordered id by default.
        namespace: The partition the entry lives in (``working:<scope>``, ...).
        scope: :class:`MemoryScope` (stored as a string with a CHECK constraint).
        key: Optional lookup key within the namespace.
        content: Any JSON value.
        metadata: A JSON object (column ``metadata``; the Python attribute of the
            mapped column is ``metadata_``, ``entry.metadata`` reads and writes it).
        created_at: Timezone-aware UTC creation time.
        expires_at: Optional timezone-aware expiry; expired entries are never returned.
        importance: 0.0-1.0 (validated, and a CHECK constraint in SQL).
        version: Incremented by the store on every write (optimistic concurrency).
        user_id: The user the entry belongs to (``None``: nobody in particular);
            indexed, so a user's entries are found without a scan.
        search_text: The text full-text search indexes for this entry (at most
            :data:`MAX_SEARCH_TEXT_LENGTH` characters, no NUL); ``None`` (the
            default): the entry is never a search result.  See
            :mod:`firefly_orm.search`.
        search_language: The PostgreSQL text-search configuration that
            indexes ``search_text`` (``"english"``, ``"german"``, ...: stemming
            and stop words of that language); ``None`` means
            :data:`DEFAULT_SEARCH_LANGUAGE` (``"simple"``).  Other stores keep it
            but do not use it.

    Construction: ``MemoryEntry(...)``, ``model_validate`` and
    ``model_validate_json`` coerce and check every field (see the module
    docstring) and raise :class:`EntryFieldsError`; :meth:`from_dict` is the
    unchecked fast path for trusted values (what a store reads back).
    Serialisation names the metadata ``metadata``; ``include`` / ``exclude``
    accept that name.
    """

    __tablename__ = TABLE_NAME
    __table_args__ = (
        sa.CheckConstraint("importance >= 0.0 AND importance <= 1.0", name="importance_range"),
        sa.CheckConstraint(
            "scope IN (" + ", ".join(f"'{v}'" for v in _SCOPE_VALUES) + ")", name="scope_values"
        ),
        sa.Index("ix_memory_entries_namespace_created", "namespace", "created_at", "entry_id"),
        sa.Index(
            "ix_memory_entries_namespace_key",
            "namespace",
            "key",
            "created_at",
            "entry_id",
            postgresql_where=sa.text("key IS NOT NULL"),
            sqlite_where=sa.text("key IS NOT NULL"),
        ),
        sa.Index(
            "ix_memory_entries_user",
            "user_id",
            "namespace",
            "created_at",
            "entry_id",
            postgresql_where=sa.text("user_id IS NOT NULL"),
            sqlite_where=sa.text("user_id IS NOT NULL"),
        ),
        sa.Index(
            "ix_memory_entries_expires_at",
            "expires_at",
            postgresql_where=sa.text("expires_at IS NOT NULL"),
            sqlite_where=sa.text("expires_at IS NOT NULL"),
        ),
    )

    entry_id: str = Field(default_factory=new_entry_id, primary_key=True, sa_type=sa.String(64))
    namespace: str = Field(default="", sa_type=sa.String(), nullable=False)
    scope: MemoryScope = Field(
        default=MemoryScope.WORKING,
        sa_type=sa.Enum(
            MemoryScope,
            native_enum=False,
            create_constraint=False,
            length=16,
            values_callable=lambda e: [m.value for m in e],
        ),
        nullable=False,
    )
    # C collation on PostgreSQL: keys sort by code point everywhere (prefix ranges
    # such as "turn:" .. "turn;" are empty under linguistic collations).
    key: str | None = Field(
        default=None,
        sa_type=sa.String().with_variant(sa.String(collation="C"), "postgresql"),
        nullable=True,
    )
    content: Any = Field(default=None, sa_type=JSONValue(), nullable=False)
    metadata_: dict[str, Any] = Field(
        default_factory=dict,
        alias="metadata",
        sa_column=sa.Column("metadata", JSONValue(), nullable=False),
    )
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime(), nullable=False)
    expires_at: datetime | None = Field(default=None, sa_type=UTCDateTime(), nullable=True)
    importance: float = Field(default=0.5, sa_type=sa.Float(), nullable=False)
    version: int = Field(default=1, sa_type=sa.Integer(), nullable=False)
    user_id: str | None = Field(default=None, sa_type=sa.String(), nullable=True)
    search_text: str | None = Field(default=None, sa_type=sa.Text(), nullable=True)
    search_language: str | None = Field(default=None, sa_type=sa.String(63), nullable=True)

    # ``metadata`` on the class is the SQLAlchemy MetaData (the declarative API
    # requires it); on an instance it is the entry's metadata dict.  The
    # descriptor that does this is installed right after the class body.
    _metadata_attr: ClassVar[str] = "metadata_"

    # Merged into SQLModel's table configuration.  Input may name the metadata
    # field ``metadata`` (its alias) or ``metadata_``; output names it
    # ``metadata`` (see ``_public_names``); an unknown field is an error, as in
    # :meth:`from_dict`.
    model_config = ConfigDict(  # type: ignore[assignment]  # merged with SQLModel's
        extra="forbid",
        validate_by_alias=True,
        validate_by_name=True,
        serialize_by_alias=True,
    )

    def __init__(self, **data: Any) -> None:
        """Build an entry, coercing and validating every field like a pydantic model.

        Fields are given by name (``metadata`` for the metadata dict); omitted
        ones take their defaults.  Values are coerced to the field's type the
        way pydantic's lax mode does (``"0.7"`` -> ``0.7``, an ISO-8601 string
        or a Unix timestamp -> ``datetime``, ``"working"`` ->
        :attr:`MemoryScope.WORKING`), then the entry is checked with the rules
        of :func:`validate_entry`.

        Raises:
            EntryFieldsError: A value cannot be coerced, breaks a rule
                (importance outside 0.0-1.0, a bool as a number, a naive
                datetime, content that is not JSON, ...), or a field name is
                unknown.  It is an :class:`EntryValidationError` (``field``
                names the first bad field) and a pydantic ``ValidationError``
                (``errors()`` lists them all).
        """
        # SQLAlchemy's instrumented __init__ has put the instance state in
        # __dict__; pydantic replaces __dict__ with the validated fields, so the
        # state is put back afterwards.  Writing __dict__ directly is what
        # ``_from_values`` does too: a new, transient entry has no attribute
        # history to record.
        state = self.__dict__.get("_sa_instance_state")
        try:
            self.__pydantic_validator__.validate_python(data, self_instance=self)
        except ValidationError as exc:
            raise _entry_fields_error(exc) from None
        finally:
            if state is not None:
                # First, as SQLAlchemy puts it: SQLModel's model_validate copies
                # this dict back attribute by attribute, the state first.
                object.__setattr__(self, "__dict__", {"_sa_instance_state": state, **self.__dict__})

    @classmethod
    def model_validate(
        cls,
        obj: Any,
        *,
        strict: bool | None = None,
        from_attributes: bool | None = None,
        context: Any | None = None,
        update: dict[str, Any] | None = None,
        **options: Any,
    ) -> MemoryEntry:
        """Validate ``obj`` (a dict or an object with the fields) into an entry.

        Coerces and checks like the constructor and raises the same
        :class:`EntryFieldsError` (a pydantic ``ValidationError``).  The
        arguments are SQLModel's.
        """
        try:
            return super().model_validate(
                obj,
                strict=strict,
                from_attributes=from_attributes,
                context=context,
                update=update,
                **options,
            )
        except EntryFieldsError:
            raise
        except ValidationError as exc:
            raise _entry_fields_error(exc) from None

    @field_validator("importance", "version", mode="before")
    @classmethod
    def _no_bools(cls, value: Any, info: ValidationInfo) -> Any:
        # pydantic would read True as 1; validate_entry refuses bools too.
        if isinstance(value, bool):
            raise EntryValidationError(str(info.field_name), "must be a number, not a bool")
        return value

    @model_validator(mode="after")
    def _check_rules(self) -> MemoryEntry:
        # Runs inside pydantic validation, when __dict__ holds exactly the
        # validated fields (no instance state yet): read them from there.
        _check_fields(self.__dict__)
        return self

    def model_dump(
        self, *, include: IncEx | None = None, exclude: IncEx | None = None, **options: Any
    ) -> dict[str, Any]:
        """Pydantic's ``model_dump``; ``include`` / ``exclude`` may name ``metadata``."""
        return super().model_dump(
            include=_field_names(include), exclude=_field_names(exclude), **options
        )

    def model_dump_json(
        self, *, include: IncEx | None = None, exclude: IncEx | None = None, **options: Any
    ) -> str:
        """Pydantic's ``model_dump_json``; ``include`` / ``exclude`` may name ``metadata``."""
        return super().model_dump_json(
            include=_field_names(include), exclude=_field_names(exclude), **options
        )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler, /
    ) -> JsonSchemaValue:
        # The output schema is the fields' own (under their public names), not
        # that of ``_public_names``'s return type.
        if handler.mode == "serialization":
            core_schema = _without_model_serializer(core_schema)
        return handler(core_schema)

    @model_serializer(mode="wrap")
    def _public_names(self, handler: SerializerFunctionWrapHandler) -> Any:
        # ``metadata`` under its public name even when by_alias is False (the
        # configuration makes the alias the default).  Kept minimal: it runs
        # for every entry serialised.
        data = handler(self)
        if isinstance(data, dict) and _METADATA_FIELD in data:
            data[_METADATA_ALIAS] = data.pop(_METADATA_FIELD)
        return data

    @property
    def is_expired(self) -> bool:
        """True once ``expires_at`` has passed (the boundary counts as expired)."""
        if self.expires_at is None:
            return False
        return utcnow() >= self.expires_at

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "metadata":
            name = "metadata_"
        super().__setattr__(name, value)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy with its own SQLAlchemy state (pydantic's would share this entry's).

        ``update`` values are taken as they are (not checked, as in pydantic);
        ``deep`` copies the content and metadata too.  :meth:`copy_entry` is
        the checked-JSON alternative the stores use.
        """
        from firefly_orm.entry_fields import field_values  # it builds on this module

        values = field_values(self)
        fields = {name: values[name] for name in _FIELD_NAMES}
        if update:
            fields.update((_field_name(name), value) for name, value in update.items())
        if deep:
            fields = copy.deepcopy(fields)
        entry = type(self)._from_values(fields)
        fields_set = set(self.__pydantic_fields_set__)
        fields_set.update(_field_name(name) for name in update or ())
        object.__setattr__(entry, "__pydantic_fields_set__", fields_set)
        return cast(Self, entry)

    def copy_entry(self, **changes: Any) -> MemoryEntry:
        """A detached deep copy, optionally with some fields changed."""
        data = self.to_dict()
        data.update(changes)
        return MemoryEntry.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python dict of every field (deep-copied; datetimes stay ``datetime``)."""
        return {
            "entry_id": self.entry_id,
            "namespace": self.namespace,
            "scope": MemoryScope(self.scope),
            "key": self.key,
            "content": _deep_copy_json(self.content),
            "metadata": _deep_copy_json(self.metadata_),
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "importance": self.importance,
            "version": self.version,
            "user_id": self.user_id,
            "search_text": self.search_text,
            "search_language": self.search_language,
        }

    def to_json_dict(self) -> dict[str, Any]:
        """JSON-ready dict (ISO-8601 datetimes), as the file store writes it."""
        data = self.to_dict()
        data["scope"] = str(data["scope"])
        data["created_at"] = self.created_at.isoformat()
        data["expires_at"] = self.expires_at.isoformat() if self.expires_at else None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryEntry:
        """Build an entry from :meth:`to_dict` / :meth:`to_json_dict` output.

        Missing fields take their defaults; unknown fields are an error.
        ISO-8601 strings become datetimes and a scope string a
        :class:`MemoryScope`; nothing else is coerced or checked.  This is the
        fast path for *trusted* values, several times cheaper than the
        constructor: the stores build the entries they read with it (the SQL
        stores with ``_from_values``, faster still).  An entry built here from
        bad values is refused when written (stores call :func:`validate_entry`);
        for untrusted input use ``MemoryEntry(**data)`` or ``model_validate``.
        """
        values = dict(data)
        if "metadata" in values:
            values["metadata_"] = values.pop("metadata")
        unknown = set(values) - _FIELD_NAMES
        if unknown:
            raise EntryValidationError(sorted(unknown)[0], "unknown MemoryEntry field")
        for name in ("created_at", "expires_at"):
            raw = values.get(name)
            if isinstance(raw, str):
                values[name] = datetime.fromisoformat(raw)
        if values.get("scope") is not None:
            values["scope"] = MemoryScope(values["scope"])
        if "entry_id" not in values:
            values["entry_id"] = new_entry_id()
        if "created_at" not in values:
            values["created_at"] = utcnow()
        for name, default in _DEFAULTS.items():
            if name not in values:
                values[name] = default() if callable(default) else default
        return cls._from_values(values)

    @classmethod
    def _from_values(cls, values: dict[str, Any]) -> MemoryEntry:
        """Fast construction from a complete dict of attribute values (trusted input).

        Skips SQLModel's per-attribute ``__init__`` (about 35x faster), which
        matters when a store turns thousands of rows into entries.
        """
        if not _fast_path_ready:
            _prepare_fast_path()
        obj: MemoryEntry = _class_manager().new_instance()
        obj.__dict__.update(values)
        object.__setattr__(obj, "__pydantic_fields_set__", set(values))
        return obj


def _field_name(name: str) -> str:
    """The attribute name of a field given by name or public name."""
    return _METADATA_FIELD if name == _METADATA_ALIAS else name


def _field_names(selection: IncEx | None) -> IncEx | None:
    """A pydantic include/exclude selection with ``metadata`` read as the field's name."""
    if isinstance(selection, set | frozenset) and _METADATA_ALIAS in selection:
        names: set[Any] = set(selection) - {_METADATA_ALIAS}
        return names | {_METADATA_FIELD}
    if isinstance(selection, Mapping) and _METADATA_ALIAS in selection:
        renamed: dict[Any, Any] = {
            (_METADATA_FIELD if name == _METADATA_ALIAS else name): value
            for name, value in selection.items()
        }
        return renamed
    return selection


def _without_model_serializer(schema: Any) -> Any:
    """``schema`` with its model's custom serializer removed (for the JSON schema only)."""
    if schema.get("type") == "model":
        return {key: value for key, value in schema.items() if key != "serialization"}
    inner = schema.get("schema")
    if isinstance(inner, dict):
        return {**schema, "schema": _without_model_serializer(inner)}
    return schema


def _deep_copy_json(value: Any) -> Any:
    if isinstance(value, dict | list):
        return json.loads(json.dumps(value))
    return value


_DEFAULTS: dict[str, Any] = {
    "namespace": "",
    "scope": MemoryScope.WORKING,
    "key": None,
    "content": None,
    "metadata_": dict,
    "expires_at": None,
    "importance": 0.5,
    "version": 1,
    "user_id": None,
    "search_text": None,
    "search_language": None,
}
_fast_path_ready = False


def _prepare_fast_path() -> None:
    global _fast_path_ready
    _registry.configure()
    _fast_path_ready = True


def _class_manager() -> Any:
    return sa.orm.attributes.manager_of_class(MemoryEntry)


class _MetadataDescriptor:
    """Class access -> SQLAlchemy MetaData; instance access -> the entry's dict."""

    def __get__(self, obj: MemoryEntry | None, owner: type | None = None) -> Any:
        if obj is None:
            return metadata
        return obj.metadata_

    def __set__(self, obj: MemoryEntry, value: dict[str, Any]) -> None:
        obj.metadata_ = value


type.__setattr__(MemoryEntry, "metadata", _MetadataDescriptor())

_FIELD_NAMES = frozenset(MemoryEntry.model_fields)
_METADATA_ALIAS = str(MemoryEntry.model_fields[_METADATA_FIELD].alias)


# --------------------------------------------------------------------------- validation


def _check_text(field: str, value: str) -> None:
    if "\x00" in value:
        raise EntryValidationError(field, "must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise EntryValidationError(
            field, "must be valid Unicode (it contains a lone surrogate)"
        ) from None


def validate_namespace(namespace: Any) -> str:
    """Return ``namespace`` if it is a usable namespace, else raise."""
    if not isinstance(namespace, str) or not namespace:
        raise EntryValidationError("namespace", "must be a non-empty string")
    _check_text("namespace", namespace)
    return namespace


def version_exhausted(entry_id: str) -> EntryValidationError:
    """The error for an update of an entry already at :data:`MAX_ENTRY_VERSION`."""
    return EntryValidationError(
        "version",
        f"entry {entry_id!r} is at the largest version ({MAX_ENTRY_VERSION}) "
        "and cannot be updated; write a new entry instead",
    )


def validate_user_id(user_id: Any) -> str:
    """Return ``user_id`` if it is a usable user id (a non-empty string), else raise."""
    if not isinstance(user_id, str) or not user_id:
        raise EntryValidationError("user_id", "must be a non-empty string")
    if len(user_id) > MAX_USER_ID_LENGTH:
        raise EntryValidationError("user_id", f"must be at most {MAX_USER_ID_LENGTH} characters")
    _check_text("user_id", user_id)
    return user_id


def validate_search_language(language: Any, field: str = "search_language") -> str:
    """Return ``language`` if it is a well-formed text-search configuration name, else raise.

    A lower-case identifier (letters, digits, ``_``; at most 63 characters), such
    as ``"simple"`` or ``"english"``.  Whether PostgreSQL has that configuration
    is checked by PostgreSQL when it indexes or searches (an unknown one fails the
    write, and nothing is written); the name is always bound as a parameter,
    never put into SQL text.  ``field`` names the argument in the error.
    """
    if not isinstance(language, str) or not _SEARCH_LANGUAGE_RE.fullmatch(language):
        raise EntryValidationError(
            field,
            f"{language!r} is not a text-search configuration name "
            "(lower-case letters, digits and underscores, at most 63 characters)",
        )
    return language


def _check_search_text(text: Any) -> None:
    if not isinstance(text, str):
        raise EntryValidationError("search_text", f"must be a string, got {type(text).__name__}")
    if len(text) > MAX_SEARCH_TEXT_LENGTH:
        raise EntryValidationError(
            "search_text", f"must be at most {MAX_SEARCH_TEXT_LENGTH} characters, got {len(text)}"
        )
    _check_text("search_text", text)


def validate_key(key: Any) -> str:
    """Return ``key`` if it is a usable lookup key, else raise."""
    if not isinstance(key, str):
        raise EntryValidationError("key", f"must be a string, got {type(key).__name__}")
    _check_text("key", key)
    return key


def key_prefix_upper_bound(prefix: str) -> str | None:
    """The smallest string above every string starting with ``prefix`` (``None``: no bound).

    Every string ``s`` starting with ``prefix`` has ``prefix <= s < bound`` in
    code-point order, which is the order of UTF-8 bytes, of ``COLLATE "C"`` and of
    MongoDB's string comparison; and every storable (surrogate-free) string in
    ``[prefix, bound)`` starts with ``prefix``.  So a key-prefix filter is one
    index range.  Trailing U+10FFFF characters have no successor and are dropped;
    the successor of U+D7FF is U+E000 (surrogates are not storable text).  The
    empty prefix, or one of only U+10FFFF characters, has no upper bound.
    """
    stem = prefix.rstrip("\U0010ffff")
    if not stem:
        return None
    following = ord(stem[-1]) + 1
    if 0xD800 <= following <= 0xDFFF:
        following = 0xE000
    return stem[:-1] + chr(following)


def _check_aware(field: str, value: Any, *, optional: bool) -> None:
    if value is None and optional:
        return
    if not isinstance(value, datetime):
        raise EntryValidationError(field, f"must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise EntryValidationError(
            field, "must be timezone-aware (naive datetimes are rejected; use UTC)"
        )
    try:
        value.astimezone(UTC)
    except OverflowError:
        raise EntryValidationError(field, "is out of range once converted to UTC") from None


def validate_entry(entry: Any, namespace: str | None = None) -> MemoryEntry:
    """Check an entry before it is written; raise :class:`EntryValidationError`.

    One pass over every field: ``content`` and ``metadata`` follow
    :func:`validate_json_value` (nesting depth, colliding keys, JSON types);
    ``version`` is an integer in ``0..MAX_ENTRY_VERSION`` (the version column's
    range; the store bumps it on every later write).  Returns the entry so
    callers can chain.  Nothing is modified.
    """
    if not isinstance(entry, MemoryEntry):
        raise EntryValidationError("entry", f"must be a MemoryEntry, got {type(entry).__name__}")
    if namespace is not None:
        validate_namespace(namespace)
    # Imported here: entry_fields builds on this module.
    from firefly_orm.entry_fields import field_values

    _check_fields(field_values(entry))
    return entry


def _check_fields(fields: Mapping[str, Any]) -> None:
    """The rules of :func:`validate_entry`, over a mapping of field values."""
    entry_id = fields["entry_id"]
    if not isinstance(entry_id, str) or not entry_id or len(entry_id) > 64:
        raise EntryValidationError("entry_id", "must be a non-empty string of at most 64 chars")
    _check_text("entry_id", entry_id)
    scope = fields["scope"]
    try:
        MemoryScope(scope)
    except ValueError:
        raise EntryValidationError(
            "scope", f"must be one of {', '.join(_SCOPE_VALUES)}, got {scope!r}"
        ) from None
    if fields["key"] is not None:
        validate_key(fields["key"])
    if fields["user_id"] is not None:
        validate_user_id(fields["user_id"])
    if fields["search_text"] is not None:
        _check_search_text(fields["search_text"])
    if fields["search_language"] is not None:
        validate_search_language(fields["search_language"])
    importance = fields["importance"]
    if (
        isinstance(importance, bool)
        or not isinstance(importance, int | float)
        or math.isnan(importance)
        or not 0.0 <= importance <= 1.0
    ):
        raise EntryValidationError("importance", f"must be between 0.0 and 1.0, got {importance!r}")
    validate_json_value("content", fields["content"])
    metadata_value = fields[_METADATA_FIELD]
    if not isinstance(metadata_value, dict):
        raise EntryValidationError("metadata", "must be a JSON object (dict)")
    validate_json_value("metadata", metadata_value)
    _check_aware("created_at", fields["created_at"], optional=False)
    _check_aware("expires_at", fields["expires_at"], optional=True)
    version = fields["version"]
    if isinstance(version, bool) or not isinstance(version, int):
        raise EntryValidationError("version", f"must be an integer, got {type(version).__name__}")
    if not 0 <= version <= MAX_ENTRY_VERSION:
        raise EntryValidationError(
            "version", f"must be between 0 and {MAX_ENTRY_VERSION}, got {version}"
        )


#: Longest rendering of a rejected value in an error message.
_ERROR_VALUE_REPR = reprlib.Repr()
_ERROR_VALUE_REPR.maxstring = _ERROR_VALUE_REPR.maxother = 60


class EntryFieldsError(EntryValidationError, ValidationError):
    """``MemoryEntry(...)`` or ``MemoryEntry.model_validate(...)`` rejected a field.

    Both an :class:`~firefly_orm.errors.EntryValidationError` (``field`` names
    the first rejected field; the message reads ``"<field>: <problem>"``) and a
    pydantic ``ValidationError`` (``errors()`` lists every problem with its
    location), so code written for either catches it, and pydantic (a
    ``TypeAdapter``, a FastAPI request body) reports it field by field.
    """

    def __init__(self, *args: Any) -> None:
        # ``ValidationError.from_exception_data`` builds the error and passes
        # pydantic's own arguments here; ``_entry_fields_error`` sets ``field``.
        self.field = "entry"

    def __str__(self) -> str:
        problems = self.errors(include_url=False)
        first = problems[0]
        broken = first.get("ctx", {}).get("error")
        if isinstance(broken, EntryValidationError):
            text = str(broken)
        else:
            location = [str(part) for part in first["loc"][1:]]
            where = f"at {' '.join(location)}: " if location else ""
            problem = (
                "unknown MemoryEntry field"
                if first["type"] == "extra_forbidden"
                else f"{first['msg']}, got {_ERROR_VALUE_REPR.repr(first['input'])}"
            )
            text = f"{self.field}: {where}{problem}"
        more = len(problems) - 1
        return f"{text} (and {more} more problem{'s' if more > 1 else ''})" if more else text


def _input_value(data: Any, field: str) -> Any:
    """The value ``data`` (a validation input) gives ``field``, ``None`` if none."""
    names = (field, _METADATA_FIELD) if field == _METADATA_ALIAS else (field,)
    for name in names:
        if isinstance(data, Mapping):
            if name in data:
                return data[name]
        elif hasattr(data, name):
            return getattr(data, name)
    return None


def _public_field(name: str) -> str:
    return _METADATA_ALIAS if name == _METADATA_FIELD else name


def _entry_fields_error(exc: ValidationError) -> EntryFieldsError:
    """Pydantic's error about an entry, as an :class:`EntryFieldsError`.

    A broken rule (raised by ``_check_rules`` over the whole entry, so pydantic
    gives it no location) is located at the field it names, with that field's
    input value.
    """
    details: list[InitErrorDetails] = []
    for problem in exc.errors(include_url=False):
        detail = InitErrorDetails(type=problem["type"], loc=problem["loc"], input=problem["input"])
        ctx = problem.get("ctx")
        if ctx is not None:
            detail["ctx"] = ctx
            broken = ctx.get("error")
            if isinstance(broken, EntryValidationError) and not problem["loc"]:
                detail["loc"] = (broken.field,)
                detail["input"] = _input_value(problem["input"], broken.field)
        details.append(detail)
    error = EntryFieldsError.from_exception_data(exc.title, details)
    location = details[0]["loc"]
    if location:
        error.field = _public_field(str(location[0]))
    return error
