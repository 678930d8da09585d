"""Small test stores shared by several suites."""

from __future__ import annotations

import threading

from firefly_orm.entry import MemoryEntry
from firefly_orm.store import InMemoryStore


class ThreadRecordingStore:
    """A custom store with only the five sync methods (over an InMemoryStore),
    recording the name of the thread each call ran on in :attr:`threads`."""

    def __init__(self) -> None:
        self.inner = InMemoryStore()
        self.threads: list[str] = []

    def _seen(self) -> None:
        self.threads.append(threading.current_thread().name)

    def save(self, namespace: str, entry: MemoryEntry) -> None:
        self._seen()
        self.inner.save(namespace, entry)

    def load(self, namespace: str) -> list[MemoryEntry]:
        self._seen()
        return self.inner.load(namespace)

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        self._seen()
        return self.inner.load_by_key(namespace, key)

    def delete(self, namespace: str, entry_id: str) -> None:
        self._seen()
        self.inner.delete(namespace, entry_id)

    def clear(self, namespace: str) -> None:
        self._seen()
        self.inner.clear(namespace)
