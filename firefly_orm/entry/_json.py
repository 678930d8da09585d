"""JSON values as firefly_orm stores them: the checks every store applies, and the wrapper.

* :func:`validate_json_value` (and its structural half
  :func:`check_json_structure`): the rules for ``content``, ``metadata`` and
  conversation raw messages, checked before anything is written.
* The JSON wrapper: one encoding for values a database cannot hold as they are,
  shared by the PostgreSQL JSONB column and the MongoDB codec.
* :func:`load_untrusted_json`: the one bounded reader of JSON text from
  outside (export files, upstream sources, Flyte directories): nesting depth,
  integer digits and size are limited *before* anything recursive runs, and
  every refusal is one :class:`JSONInputError` line.

The first two are re-exported from :mod:`firefly_orm.entry`.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from itertools import accumulate, repeat
from typing import Any

from pydantic_core import from_json

from firefly_orm.errors import EntryValidationError, FireflyOrmError

__all__ = [
    "JSON_WRAPPER_KEY",
    "MAX_INPUT_INT_DIGITS",
    "MAX_INPUT_JSON_DEPTH",
    "MAX_JSON_DEPTH",
    "NUL_WRAPPER_KEY",
    "JSONInputError",
    "check_json_structure",
    "decode_json_from_jsonb",
    "dump_json",
    "encode_json_for_jsonb",
    "is_json_wrapper",
    "load_json",
    "load_untrusted_json",
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


# --------------------------------------------------------------------------- untrusted JSON text

#: The deepest nesting :func:`load_untrusted_json` reads by default: well above
#: anything storable (:data:`MAX_JSON_DEPTH` plus the few levels a file wraps
#: a value in), well below what would exhaust the parser's stack.
MAX_INPUT_JSON_DEPTH = 256
#: The most digits an integer may have in :func:`load_untrusted_json` by
#: default: Python's own default for ``sys.set_int_max_str_digits`` (converting
#: longer digit strings takes time growing with the square of their length).
MAX_INPUT_INT_DIGITS = 4300

#: A JSON string token (escapes included); what lies between two is structure.
#: The closing quote is optional: a string left open runs to the end of the
#: text (as the parser sees it too), so no match ever fails after a long scan
#: and cutting out strings stays linear even in a text of unclosed quotes.
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STRING_OR_BRACKET = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)
_BRACKET_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


class JSONInputError(FireflyOrmError, ValueError):
    """A JSON text :func:`load_untrusted_json` refuses; the message is one line.

    The message is a predicate, to follow the name of what was read
    (``f"file notes.json {exc}"``): ``"is nested too deeply (more than 256
    levels; line 1, column 257)"``, ``"holds an integer of 5000 digits (at most
    4300 are read)"``, ``"is not JSON (Expecting value: line 1 column 1 (char 0))"``.
    """


def _depth_over(text: str, max_depth: int) -> bool:
    """Whether ``text``'s brackets (outside strings) nest deeper than ``max_depth``.

    Linear and iterative: strings are cut out and the brackets' running depth
    summed, all in C loops; a text with fewer brackets than ``max_depth`` is
    never scanned.
    """
    if text.count("[") + text.count("{") <= max_depth:
        return False
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(accumulate(map(_BRACKET_STEP.__getitem__, brackets)), default=0) > max_depth


def _where_too_deep(text: str, max_depth: int) -> str:
    """``"line 3, column 7"`` of the bracket that goes past ``max_depth``, and the
    top-level key it is under when the text is an object (``, under key 'a1'``)."""
    depth = 0
    key: str | None = None
    top_is_object = False
    for match in _STRING_OR_BRACKET.finditer(text):
        token = match.group()
        if token[0] == '"':
            if depth == 1 and top_is_object:
                key = token[1:-1] if len(token) > 1 and token.endswith('"') else token[1:]
            continue
        if depth == 0:
            top_is_object = token == "{"
        depth += _BRACKET_STEP[token]
        if depth > max_depth:
            start = match.start()
            line = text.count("\n", 0, start) + 1
            column = start - (text.rfind("\n", 0, start) + 1) + 1
            under = "" if key is None else f", under key {_short(key)}"
            return f"line {line}, column {column}{under}"
    return "somewhere"  # pragma: no cover - only called once _depth_over said so


def _short(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _int_reader(max_digits: int) -> Callable[[str], int]:
    """``parse_int`` for :func:`json.loads`: refuses integers longer than ``max_digits``."""

    def read(digits: str) -> int:
        count = len(digits) - digits.startswith("-")
        if max_digits and count > max_digits:
            raise JSONInputError(
                f"holds an integer of {count} digits (at most {max_digits} are read)"
            )
        try:
            return int(digits)
        except ValueError:  # the interpreter's own limit (sys.set_int_max_str_digits) is lower
            raise JSONInputError(
                f"holds an integer of {count} digits (at most "
                f"{sys.get_int_max_str_digits()} are read by this interpreter)"
            ) from None

    return read


def _refuse_constant(name: str) -> Any:
    raise JSONInputError(f"holds {name}, which is not JSON")


def load_untrusted_json(
    data: str | bytes,
    *,
    max_depth: int = MAX_INPUT_JSON_DEPTH,
    max_int_digits: int = MAX_INPUT_INT_DIGITS,
    max_size: int | None = None,
    object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None,
    allow_constants: bool = False,
) -> Any:
    """The value of a JSON text from outside the library, read within bounds.

    Every reader of a file or column someone else wrote (export files,
    upstream sources, Flyte directories) reads it through this function, so a
    hostile text gets one clear error instead of a traceback or a hang:

    * ``max_size``: the largest text read (bytes for ``bytes``, characters for
      ``str``; ``None``: no limit);
    * ``bytes`` must be UTF-8 (no byte-order mark);
    * ``max_depth``: lists and objects nested deeper are refused before the
      parser runs (checked iteratively, in linear time: a 100,000-deep
      ``[[[...`` is refused at once, not a ``RecursionError``);
    * ``max_int_digits``: integers with more digits are refused (the meaning
      of ``sys.set_int_max_str_digits``; ``0``: no limit of ours, the
      interpreter's still applies);
    * ``NaN`` and ``Infinity`` are refused unless ``allow_constants``;
    * ``object_pairs_hook`` as for :func:`json.loads`; a ``ValueError`` it
      raises (a repeated key, say) is reported as ``"is not JSON (...)"``.

    Raises:
        JSONInputError: The text is refused; its message says why, in one line.
    """
    if max_size is not None and len(data) > max_size:
        unit = "bytes" if isinstance(data, bytes) else "characters"
        raise JSONInputError(f"is larger than {max_size} {unit}")
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JSONInputError(
                f"is not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})"
            ) from None
    else:
        text = data
    if _depth_over(text, max_depth):
        raise JSONInputError(
            f"is nested too deeply (more than {max_depth} levels; "
            f"{_where_too_deep(text, max_depth)})"
        )
    try:
        return json.loads(
            text,
            parse_int=_int_reader(max_int_digits),
            parse_constant=None if allow_constants else _refuse_constant,
            object_pairs_hook=object_pairs_hook,
        )
    except JSONInputError:
        raise
    except RecursionError:  # pragma: no cover - the depth check comes first
        raise JSONInputError("is nested too deeply to be read") from None
    except ValueError as exc:  # JSONDecodeError, or the hook's refusal
        raise JSONInputError(f"is not JSON ({str(exc).splitlines()[0]})") from None


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


#: The encoder of :func:`dump_json`, built once (``json.dumps`` builds one per call
#: when given options).
_TEXT_ENCODER = json.JSONEncoder(ensure_ascii=False)


def dump_json(value: Any) -> str:
    """``json.dumps(value, ensure_ascii=False)``: a value's JSON text as the SQL stores write it."""
    return _TEXT_ENCODER.encode(value)


def encode_json_for_jsonb(value: Any) -> Any:
    """Make a JSON value storable in JSONB, reversibly.

    JSONB rejects ``\\u0000`` inside strings and turns floats such as ``1e20``
    into integers.  Such values are wrapped (:func:`wrap_json_for_storage`);
    the JSON text escapes NUL as the six characters ``\\u0000``, which JSONB
    accepts.
    """
    text = dump_json(value)
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
    Depth first, so a reference cycle is refused as soon as one path through it
    passes :data:`MAX_JSON_DEPTH`, however wide it is.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            if not all(map(isinstance, item, _STR)):
                _check_keys(field, item)
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > MAX_JSON_DEPTH:
            raise EntryValidationError(
                field,
                f"is nested more than {MAX_JSON_DEPTH} levels deep (or contains a reference cycle)",
            )
        below = depth + 1
        for child in children:
            if type(child) not in _SCALAR_TYPES:
                stack.append((child, below))


#: ``repeat(str)``, for checking a dict's keys in one C-level ``map``.
_STR = repeat(str)
#: Values with nothing inside to check (their exact types; subclasses are looked at).
_SCALAR_TYPES = frozenset({str, int, float, bool, type(None)})


def _check_keys(field: str, item: dict[Any, Any]) -> None:
    """Refuse a dict with keys that collide once JSON converts them to strings."""
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


#: ``json.dumps(value, allow_nan=False, ensure_ascii=False)``, the encoder built once
#: (``json.dumps`` builds one per call when given options).
_STRICT_ENCODER = json.JSONEncoder(allow_nan=False, ensure_ascii=False)


def _check_json(field: str, value: Any) -> None:
    try:
        _STRICT_ENCODER.encode(value).encode("utf-8")
    except UnicodeEncodeError:
        raise EntryValidationError(
            field, "must be valid Unicode (a string contains a lone surrogate)"
        ) from None
    except (TypeError, ValueError) as exc:
        raise EntryValidationError(field, f"must be JSON-serialisable ({exc})") from None
