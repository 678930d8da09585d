"""Upstream's ``memory.store``: the protocol and the stdlib-backed stores.

``MemoryStore`` is firefly_orm's runtime-checkable protocol (the same five
methods); ``InMemoryStore`` is firefly_orm's.  ``FileStore`` is firefly_orm's
(upstream's had no lifecycle methods, so nothing changes shape) and
``SQLiteStore`` firefly_orm's with the awaitable
``initialize``/``close``/``cleanup_expired`` of the compatible database stores.

Files and tables written by upstream's ``FileStore`` / ``SQLiteStore`` are not
read by firefly_orm's stores (their layouts differ), so these two look for them
where they open: upstream data never imported into the store is refused
(:class:`~firefly_orm.upstream_import.UpstreamDataFoundError`, naming the
import to run, nothing written), or imported once with ``import_upstream=True``.
"""

from __future__ import annotations

from firefly_orm.compat.firefly.memory._file import FileStore
from firefly_orm.compat.firefly.memory._sql import SQLiteStore
from firefly_orm.store import InMemoryStore, MemoryStore

__all__ = ["FileStore", "InMemoryStore", "MemoryStore", "SQLiteStore"]
