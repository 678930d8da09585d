"""The store contract suite (firefly_orm.testing) against every backend, sync and async.

``store`` and ``mode`` come from conftest.py (one parameter per entry of
``BACKENDS`` x sync/async).  A second class runs the same suite against a
minimal custom store that only has the five protocol methods, exactly as a
third-party backend author would (sync mode only, best-effort unit of work).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from firefly_orm.entry import MemoryEntry, validate_entry, validate_key, validate_namespace
from firefly_orm.testing import StoreContract
from firefly_orm.uow import apply_version, sort_entries


class TestStoreContract(StoreContract):
    """Every built-in backend (see ``BACKENDS`` in conftest.py) x sync/async."""


class FiveMethodStore:
    """A custom store with only the five protocol methods (no async, no unit of work)."""

    def __init__(self) -> None:
        self._rows: dict[str, MemoryEntry] = {}  # entry_id -> entry (namespace inside)
        self._lock = threading.Lock()

    def save(self, namespace: str, entry: MemoryEntry) -> None:
        validate_entry(entry, namespace)
        copy = entry.copy_entry(namespace=namespace)
        with self._lock:
            self._rows[copy.entry_id] = apply_version(copy, self._rows.get(copy.entry_id))

    def load(self, namespace: str) -> list[MemoryEntry]:
        validate_namespace(namespace)
        with self._lock:
            rows = [e for e in self._rows.values() if e.namespace == namespace]
        return [e.copy_entry() for e in sort_entries(rows) if not e.is_expired]

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        validate_key(key)
        matches = [e for e in self.load(namespace) if e.key == key]
        return matches[-1] if matches else None

    def delete(self, namespace: str, entry_id: str) -> None:
        validate_namespace(namespace)
        with self._lock:
            entry = self._rows.get(entry_id)
            if entry is not None and entry.namespace == namespace:
                del self._rows[entry_id]

    def clear(self, namespace: str) -> None:
        validate_namespace(namespace)
        with self._lock:
            for entry_id in [i for i, e in self._rows.items() if e.namespace == namespace]:
                del self._rows[entry_id]


class TestFiveMethodStoreContract(StoreContract):
    """The published suite, used the way its module docstring tells backend authors to."""

    @pytest.fixture(params=["sync"])
    def mode(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    @pytest.fixture
    def store(self) -> Iterator[FiveMethodStore]:
        yield FiveMethodStore()
