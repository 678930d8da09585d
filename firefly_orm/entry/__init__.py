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
``search_language`` (see :mod:`firefly_orm._search`).

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

The rules themselves, the limits and :class:`MemoryScope` live in the
internal ``_rules`` module, the clock and the ids in ``_ids``, the JSON value
rules and wrapper in ``_json``, and the model in ``_model``; every public name
is re-exported here, where it is documented and imported from.

The stores build the entries they *read* with :meth:`MemoryEntry.from_dict`
(and the SQL stores with the internal ``_from_values``): trusted values, no
coercion, no checks, several times cheaper than the constructor.  (pydantic's
``model_construct`` skips the checks too, but its entries lack SQLAlchemy's
instance state: use :meth:`~MemoryEntry.from_dict`.)

Serialised (``model_dump``, ``model_dump_json``, a ``TypeAdapter``), an entry
shows its metadata under the public name ``metadata`` whatever ``by_alias``
says, and the output validates back into an equal entry.
"""

from firefly_orm.entry._ids import derived_entry_id, new_entry_id, utcnow
from firefly_orm.entry._json import (
    JSON_WRAPPER_KEY,
    MAX_JSON_DEPTH,
    check_json_structure,
    is_json_wrapper,
    unwrap_stored_json,
    validate_json_value,
    wrap_json_for_storage,
)
from firefly_orm.entry._json import (
    NUL_WRAPPER_KEY as NUL_WRAPPER_KEY,  # former name, still importable here
)
from firefly_orm.entry._json import decode_json_from_jsonb as decode_json_from_jsonb
from firefly_orm.entry._json import encode_json_for_jsonb as encode_json_for_jsonb
from firefly_orm.entry._model import TABLE_NAME, MemoryEntry, metadata, validate_entry
from firefly_orm.entry._model import JSONValue as JSONValue  # the column types, importable here
from firefly_orm.entry._model import UTCDateTime as UTCDateTime
from firefly_orm.entry._rules import (
    DEFAULT_SEARCH_LANGUAGE,
    MAX_ENTRY_VERSION,
    MAX_SEARCH_TEXT_LENGTH,
    MAX_USER_ID_LENGTH,
    EntryFieldsError,
    MemoryScope,
    key_prefix_upper_bound,
    validate_key,
    validate_namespace,
    validate_search_language,
    validate_user_id,
    version_exhausted,
)

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
