"""Entries read back from any store serialise and validate back (issue 16, item 4).

The stores build the entries they read on their fast paths (the SQL row
converter, ``MemoryEntry.from_dict``), without the constructor's checks; what a
web response or a JSON log makes of them must still name the metadata
``metadata`` and validate back into equal entries.  Every memory-layer backend
(in-memory, files, SQLite, PostgreSQL, MongoDB), read by a new store object.
"""

from __future__ import annotations

import json

from entry_samples import sample_entries
from pydantic import TypeAdapter
from store_backends import OpenedBackend

from firefly_orm.entry import MemoryEntry

ENTRIES = TypeAdapter(list[MemoryEntry])
PUBLIC_FIELDS = sorted("metadata" if n == "metadata_" else n for n in MemoryEntry.model_fields)


def test_entries_read_back_from_every_store_serialise_and_validate_back(
    layer_backend: OpenedBackend,
) -> None:
    store = layer_backend.store
    saved = sample_entries()
    for entry in saved:
        store.save("rt", entry)
    read = layer_backend.reopen().load("rt")
    assert sorted(e.entry_id for e in read) == sorted(e.entry_id for e in saved)
    by_id = {e.entry_id: e for e in read}
    text = ENTRIES.dump_json(read)
    for item in json.loads(text):
        assert sorted(item) == PUBLIC_FIELDS
        want = by_id[item["entry_id"]]
        assert item["metadata"] == want.metadata_
    for got in ENTRIES.validate_json(text):
        want = by_id[got.entry_id]
        assert got.to_dict() == want.to_dict()
        assert got.model_dump(mode="json") == want.model_dump(mode="json")
