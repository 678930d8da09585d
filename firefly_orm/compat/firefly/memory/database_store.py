"""Upstream's ``memory.database_store``: ``PostgreSQLStore`` and ``MongoDBStore``.

Both are firefly_orm's stores with upstream's asynchronous lifecycle::

    store = PostgreSQLStore(url="postgresql://app@db/app", schema_name="firefly_memory")
    await store.initialize()          # migrations, on the async engine
    memory = MemoryManager(store=store)
    ...
    removed = await store.cleanup_expired()
    await store.close()

``initialize()``, ``close()`` and ``cleanup_expired()`` return coroutines: inside
an event loop they run the ``async_*`` forms on the native async drivers and
never block the loop; called from sync code without a loop they do the work at
once (so ``asyncio.run(store.initialize())`` works too).  The sync
``save``/``load``/... and the ``async_*`` twins are firefly_orm's (upstream's
sync wrappers broke after their first call; these keep working).  A
connection failure in ``initialize()`` raises
``DatabaseConnectionError("Failed to connect to PostgreSQL: ...")`` (or
``MongoDB``), password hidden.

``MongoDBStore`` needs the ``mongo`` extra; it is imported when first named,
so this module imports without it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from firefly_orm.compat.firefly.exceptions import DatabaseConnectionError, DatabaseStoreError
from firefly_orm.compat.firefly.memory._sql import PostgreSQLStore

if TYPE_CHECKING:  # pragma: no cover - for type checkers only
    from firefly_orm.compat.firefly.memory._mongo import MongoDBStore

__all__ = ["DatabaseConnectionError", "DatabaseStoreError", "MongoDBStore", "PostgreSQLStore"]


def __getattr__(name: str) -> Any:
    if name == "MongoDBStore":
        module = importlib.import_module("firefly_orm.compat.firefly.memory._mongo")
        value = module.MongoDBStore
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
