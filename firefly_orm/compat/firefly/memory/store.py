"""Upstream's ``memory.store``: the protocol and the stdlib-backed stores.

``MemoryStore`` is firefly_orm's runtime-checkable protocol (the same five
methods); ``InMemoryStore`` and ``FileStore`` are firefly_orm's (upstream's had
no lifecycle methods, so nothing changes shape).  ``SQLiteStore`` is
firefly_orm's with the awaitable ``initialize``/``close``/``cleanup_expired`` of
the compatible database stores.

Files and tables written by upstream's ``FileStore`` / ``SQLiteStore`` are not
read by these stores (their layouts differ); import them once with
:func:`firefly_orm.upstream_import.import_upstream`.
"""

from __future__ import annotations

from firefly_orm.compat.firefly.memory._sql import SQLiteStore
from firefly_orm.file_store import FileStore
from firefly_orm.store import InMemoryStore, MemoryStore

__all__ = ["FileStore", "InMemoryStore", "MemoryStore", "SQLiteStore"]
