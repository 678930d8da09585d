"""The :class:`MemoryEntry` model, its column types and its field reads (internal).

Documented and imported from :mod:`firefly_orm.entry`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from datetime import UTC, datetime
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
from pydantic_core import CoreSchema
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import registry
from sqlmodel import Field, SQLModel

from firefly_orm.entry import _rules
from firefly_orm.entry._ids import derived_entry_id, new_entry_id, utcnow
from firefly_orm.entry._json import (
    decode_json_from_jsonb,
    dump_json,
    encode_json_for_jsonb,
    load_json,
)
from firefly_orm.entry._rules import (
    _METADATA_ALIAS,
    _METADATA_FIELD,
    _SCOPE_VALUES,
    EntryFieldsError,
    MemoryScope,
    _entry_fields_error,
    validate_namespace,
)
from firefly_orm.errors import EntryValidationError

__all__ = [
    "FIELD_NAMES",
    "HEAD_ARCHIVED_COLUMN",
    "HEAD_UPDATED_COLUMN",
    "TABLE_NAME",
    "JSONValue",
    "MemoryEntry",
    "UTCDateTime",
    "field_values",
    "metadata",
    "validate_entry",
]

TABLE_NAME = "memory_entries"
#: Columns of the table that are no fields of :class:`MemoryEntry`: a conversation
#: head's ``updated_at`` ("" when it has none) and ``archived`` flag, written by
#: the SQL store (:func:`firefly_orm.sql._statements.entry_values`), NULL elsewhere.
HEAD_UPDATED_COLUMN = "head_updated_at"
HEAD_ARCHIVED_COLUMN = "head_archived"

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
            return dump_json(value)
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        if dialect.name == "postgresql":
            return decode_json_from_jsonb(value)
        if dialect.name == "sqlite":
            return None if value is None else load_json(value)
        return value


class _Base(SQLModel, registry=_registry):
    """Declarative base bound to the library's own metadata."""


def _where_set(column: str) -> dict[str, Any]:
    """The options of a partial index over the rows where ``column`` is not NULL (both dialects)."""
    where = sa.text(f"{column} IS NOT NULL")
    return {"postgresql_where": where, "sqlite_where": where}


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
            :mod:`firefly_orm._search`.
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
    __table_args__: ClassVar[tuple[Any, ...]] = (
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
            **_where_set("key"),
        ),
        sa.Index(
            "ix_memory_entries_user",
            "user_id",
            "namespace",
            "created_at",
            "entry_id",
            **_where_set("user_id"),
        ),
        sa.Index(
            "ix_memory_entries_expires_at",
            "expires_at",
            **_where_set("expires_at"),
        ),
        # A user's conversation list (migration 0010): columns the SQL store sets on
        # a conversation head (``conversation:<id>``, key ``head``) from its content
        # on every write, NULL on any other row; not fields of the entry.
        sa.Column(HEAD_UPDATED_COLUMN, sa.Text(), nullable=True),
        sa.Column(HEAD_ARCHIVED_COLUMN, sa.Boolean(create_constraint=False), nullable=True),
        sa.Index(
            "ix_memory_entries_head_updated",
            "user_id",
            HEAD_ARCHIVED_COLUMN,
            HEAD_UPDATED_COLUMN,
            "entry_id",
            **_where_set(HEAD_UPDATED_COLUMN),
        ),
        sa.Index(
            "ix_memory_entries_head_created",
            "user_id",
            HEAD_ARCHIVED_COLUMN,
            "created_at",
            "entry_id",
            **_where_set(HEAD_UPDATED_COLUMN),
        ),
    )
    # The listing columns are the table's, not mapped attributes of the entry.
    __mapper_args__ = {"exclude_properties": [HEAD_UPDATED_COLUMN, HEAD_ARCHIVED_COLUMN]}

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
        alias="metadata",  # _rules._METADATA_ALIAS (mypy wants a literal here)
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
        # Looked up in the rules module at each call: it is the one place the
        # rules live (validate_entry calls the same function there).
        _rules._check_fields(self.__dict__)
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

# --------------------------------------------------------------------------- field reads

#: Every field of an entry, by attribute name (``metadata_`` for the metadata).
FIELD_NAMES: frozenset[str] = frozenset(MemoryEntry.model_fields)


def field_values(entry: MemoryEntry) -> Mapping[str, Any]:
    """Every field of ``entry`` by attribute name (read it, do not change it).

    The mapping may be the entry's own instance dict (which holds more than the
    fields): copy what you keep, and read only :data:`FIELD_NAMES`.
    """
    values = entry.__dict__
    if values.keys() >= FIELD_NAMES:
        return values
    return {name: getattr(entry, name) for name in FIELD_NAMES}


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

    _rules._check_fields(field_values(entry))
    return entry


def keyed_row(
    namespace: str, scope: MemoryScope, key: str, content: Any, **fields: Any
) -> MemoryEntry:
    """A layer's row at ``key``: its id derived from namespace and key, so writing it
    again replaces it; ``fields`` are any other :class:`MemoryEntry` fields (trusted
    values, as :meth:`MemoryEntry.from_dict`)."""
    return MemoryEntry.from_dict(
        dict(
            entry_id=derived_entry_id(namespace, key),
            namespace=namespace,
            scope=scope,
            key=key,
            content=content,
            **fields,
        )
    )
