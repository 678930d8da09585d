"""JSON values as firefly_orm stores them: the checks every store applies, and the wrapper.

* :func:`validate_json_value` (and its structural half
  :func:`check_json_structure`): the rules for ``content``, ``metadata`` and
  conversation raw messages, checked before anything is written.
* The JSON wrapper: one encoding for values a database cannot hold as they are,
  shared by the PostgreSQL JSONB column and the MongoDB codec.

Both are re-exported from :mod:`firefly_orm.entry`.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic_core import from_json

from firefly_orm.errors import EntryValidationError

__all__ = [
    "JSON_WRAPPER_KEY",
    "MAX_JSON_DEPTH",
    "NUL_WRAPPER_KEY",
    "check_json_structure",
    "decode_json_from_jsonb",
    "encode_json_for_jsonb",
    "is_json_wrapper",
    "load_json",
    "unwrap_stored_json",
    "validate_json_value",
    "wrap_json_for_storage",
]

#: The deepest nesting of lists and dicts accepted in ``content`` and ``metadata``
#: (``[]`` and ``{}`` are depth 1, ``[[1]]`` depth 2; the metadata dict itself
#: counts).  Deeper values are refused by :func:`validate_entry`.
MAX_JSON_DEPTH = 100


# --------------------------------------------------------------------------- reading JSON text


def load_json(text: str | bytes) -> Any:
    """The value of a JSON text, as :func:`json.loads` reads it, parsed faster.

    pydantic-core's parser (a dependency through pydantic) reads a stored row
    several times faster than :func:`json.loads`, and gives the same values
    (big integers, floats to the last bit, the last of duplicate keys).  Where
    it refuses a text (an escaped lone surrogate, nesting deeper than its
    limit), :func:`json.loads` reads it, or raises its own error: so every text
    reads as it always did.
    """
    try:
        return from_json(text)
    except ValueError:
        return json.loads(text)


# --------------------------------------------------------------------------- JSON wrapper
# One encoding for JSON values a database cannot hold as they are, shared by
# every backend that needs it (PostgreSQL JSONB here, MongoDB in its codec):
# such a value is stored as ``{JSON_WRAPPER_KEY: "<its JSON text>"}``.  Each
# backend decides what it cannot hold; values that already look like a wrapper
# are always wrapped too, so decoding stays reversible.

#: The single key of a wrapped JSON value.
JSON_WRAPPER_KEY = "__firefly_orm_json__"
#: Former name of :data:`JSON_WRAPPER_KEY` (same value).
NUL_WRAPPER_KEY = JSON_WRAPPER_KEY


def is_json_wrapper(value: Any) -> bool:
    """True if ``value`` has the shape of a wrapped JSON value."""
    return isinstance(value, dict) and len(value) == 1 and JSON_WRAPPER_KEY in value


def wrap_json_for_storage(value: Any, *, text: str, unstorable: bool) -> Any:
    """``value`` as a backend stores it.

    Args:
        value: The JSON value to store.
        text: Its JSON text (as the backend's encoder wrote it); this is what
            a wrapper holds.
        unstorable: The backend's verdict: ``True`` if it cannot hold
            ``value`` as it is.

    Returns:
        ``{JSON_WRAPPER_KEY: text}`` when ``unstorable`` or when ``value``
        already looks like a wrapper; otherwise ``value`` itself.
    """
    if unstorable or is_json_wrapper(value):
        return {JSON_WRAPPER_KEY: text}
    return value


def unwrap_stored_json(value: Any) -> Any:
    """Inverse of :func:`wrap_json_for_storage` (other values pass through)."""
    if is_json_wrapper(value) and isinstance(value[JSON_WRAPPER_KEY], str):
        return load_json(value[JSON_WRAPPER_KEY])
    return value


def encode_json_for_jsonb(value: Any) -> Any:
    """Make a JSON value storable in JSONB, reversibly.

    JSONB rejects ``\\u0000`` inside strings and turns floats such as ``1e20``
    into integers.  Such values are wrapped (:func:`wrap_json_for_storage`);
    the JSON text escapes NUL as the six characters ``\\u0000``, which JSONB
    accepts.
    """
    text = json.dumps(value, ensure_ascii=False)
    unstorable = "\\u0000" in text or _has_exponent_float(value, text)
    return wrap_json_for_storage(value, text=text, unstorable=unstorable)


def decode_json_from_jsonb(value: Any) -> Any:
    """Inverse of :func:`encode_json_for_jsonb` (:func:`unwrap_stored_json`)."""
    return unwrap_stored_json(value)


def _has_exponent_float(value: Any, text: str | None = None) -> bool:
    """True if ``value`` holds a float JSONB would turn into an int (e.g. ``1e20``).

    JSONB stores numbers as ``numeric``: ``1e20`` comes back as the integer
    ``100000000000000000000``.  Floats whose JSON form has an exponent are
    therefore stored through the wrapper, which keeps the JSON text verbatim.
    """
    if text is not None and "e" not in text and "E" not in text:
        return False
    if isinstance(value, float):
        return "e" in repr(value)
    if isinstance(value, dict):
        return any(_has_exponent_float(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_exponent_float(v) for v in value)
    return False


def _json_key_text(key: Any) -> str | None:
    """The object key JSON writes for dict key ``key`` (``None``: not a JSON key type)."""
    if isinstance(key, str):
        return str.__str__(key)
    if key is None or isinstance(key, bool | int | float):
        # json.dumps writes these keys as it writes the values (1 -> "1",
        # True -> "true", None -> "null", 1.5 -> "1.5").
        return json.dumps(key)
    return None


def check_json_structure(field: str, value: Any) -> None:
    """Depth and key checks, iteratively (a hostile value cannot exhaust the stack).

    The structural half of :func:`validate_json_value`, for callers that must
    check a value before handing it to ``json.dumps`` (which would recurse).
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
            if not all(isinstance(k, str) for k in item):
                seen: set[str] = set()
                for key in item:
                    text = _json_key_text(key)
                    if text in seen:
                        raise EntryValidationError(
                            field,
                            f"has dict keys that collide once converted to JSON strings "
                            f"(several keys become {text!r}, e.g. 1 and '1')",
                        )
                    if text is not None:
                        seen.add(text)
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > MAX_JSON_DEPTH:
            raise EntryValidationError(
                field,
                f"is nested more than {MAX_JSON_DEPTH} levels deep (or contains a reference cycle)",
            )
        stack.extend((child, depth + 1) for child in children)


def validate_json_value(field: str, value: Any) -> None:
    """Raise :class:`EntryValidationError` naming ``field`` unless ``value`` is storable JSON.

    The rules every store applies to ``content`` and ``metadata``:

    * JSON-serialisable (dicts, lists/tuples, str, int, float, bool, ``None``),
      no NaN or infinity, no lone surrogates in strings;
    * lists and dicts nested at most :data:`MAX_JSON_DEPTH` levels deep
      (checked iteratively: a 10,000-deep value is refused, not a
      ``RecursionError``);
    * dict keys are strings, or ``int`` / ``float`` / ``bool`` / ``None``, which
      are stored as JSON writes them (``1`` -> ``"1"``) and come back as strings;
      a dict whose keys collide after that conversion (``{1: "a", "1": "b"}``)
      is refused, since storing it would silently lose a value.
    """
    check_json_structure(field, value)
    _check_json(field, value)


def _check_json(field: str, value: Any) -> None:
    try:
        json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise EntryValidationError(
            field, "must be valid Unicode (a string contains a lone surrogate)"
        ) from None
    except (TypeError, ValueError) as exc:
        raise EntryValidationError(field, f"must be JSON-serialisable ({exc})") from None
