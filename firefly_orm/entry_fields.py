"""Reading every field of a :class:`~firefly_orm.entry.MemoryEntry` cheaply.

An entry's fields are mapped attributes: each read goes through SQLAlchemy's
instrumented descriptor, several times the cost of a dict lookup, and the write
path reads every field of several entries per operation.  A detached entry (any
entry the stores build, and any built by its constructor) keeps every field in
its instance dict, so :func:`field_values` reads them there; an entry a Session
has expired (its dict lacks fields) is read through the descriptors, which load
what is missing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from firefly_orm.entry import MemoryEntry

__all__ = ["FIELD_NAMES", "field_values"]

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
