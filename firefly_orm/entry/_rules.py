"""The rules an entry's fields obey, and the error that names the broken one.

The vocabulary and limits of the fields (:class:`MemoryScope`,
:data:`MAX_ENTRY_VERSION`, :data:`MAX_USER_ID_LENGTH`,
:data:`MAX_SEARCH_TEXT_LENGTH`, :data:`DEFAULT_SEARCH_LANGUAGE`), the checks of
single values the stores and layers share (:func:`validate_namespace`,
:func:`validate_key`, :func:`validate_user_id`, :func:`validate_search_language`),
:func:`~firefly_orm.entry.validate_entry`'s checks over a whole entry's fields,
and :class:`EntryFieldsError`, what the constructor of
:class:`~firefly_orm.entry.MemoryEntry` raises.

Every public name here is re-exported from :mod:`firefly_orm.entry`, its public
home.  The model module imports this one (its validators call the rules); this
module never imports the model (the metadata field's alias is a constant here,
which the model's field uses), so there is no import cycle.
"""

from __future__ import annotations

import enum
import re
import reprlib
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TypeGuard

from pydantic import ValidationError
from pydantic_core import InitErrorDetails

from firefly_orm.entry._json import validate_json_value
from firefly_orm.errors import EntryValidationError

__all__ = [
    "DEFAULT_SEARCH_LANGUAGE",
    "EntryFieldsError",
    "MAX_ENTRY_VERSION",
    "MAX_SEARCH_TEXT_LENGTH",
    "MAX_USER_ID_LENGTH",
    "MemoryScope",
    "key_prefix_upper_bound",
    "validate_key",
    "validate_namespace",
    "validate_search_language",
    "validate_user_id",
    "version_exhausted",
]

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


class MemoryScope(enum.StrEnum):
    """What kind of memory an entry belongs to (compares equal to plain strings)."""

    CONVERSATION = "conversation"
    WORKING = "working"
    LONG_TERM = "long_term"


_SCOPE_VALUES = tuple(s.value for s in MemoryScope)
#: The metadata field's Python name (``metadata`` is taken on declarative
#: classes); its public name is the field's alias (``_METADATA_ALIAS``).
_METADATA_FIELD = "metadata_"
#: The metadata field's public name, used in input and output: its alias.
_METADATA_ALIAS = "metadata"


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


def check_bound_user(user_id: Any, bound: str | None, serving: str) -> str:
    """``user_id``, validated; where the caller is ``bound`` to a user, it must be that user.

    ``serving`` names the caller in the error (``"this memory serves user 'ada' only"``).

    Raises:
        EntryValidationError: A bad ``user_id``, or another user than ``bound``.
    """
    checked = validate_user_id(user_id)
    if bound is not None and checked != bound:
        raise EntryValidationError("user_id", f"this {serving} serves user {bound!r} only")
    return checked


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


def is_number(value: object) -> TypeGuard[int | float]:
    """Whether ``value`` is a number: an ``int`` or ``float``, never a bool, never NaN."""
    # value == value is False only for NaN (math.isnan would overflow on a huge int).
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value


def check_unit_interval(
    value: Any, field: str, message: str = "must be a number from 0.0 to 1.0"
) -> float:
    """``value`` as a float if it is a number from 0.0 to 1.0 (an importance, a threshold).

    A bool, NaN or anything outside the interval raises
    :class:`~firefly_orm.errors.EntryValidationError` naming ``field``, with
    ``message`` followed by the value.
    """
    if not is_number(value) or not 0.0 <= value <= 1.0:
        raise EntryValidationError(field, f"{message}, got {value!r}")
    return float(value)


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
    check_unit_interval(fields["importance"], "importance", "must be between 0.0 and 1.0")
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
