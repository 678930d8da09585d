"""The MongoDB store with upstream's lifecycle shapes (needs the ``mongo`` extra)."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, Self

from firefly_orm.compat.firefly.memory._lifecycle import failed_to_connect, lifecycle_call
from firefly_orm.mongo._store import MongoDBStore as _MongoDBStore

__all__ = ["MongoDBStore"]

_DATABASE = "MongoDB"


class MongoDBStore(_MongoDBStore):
    """:class:`firefly_orm.MongoDBStore` with upstream's awaitable lifecycle.

    ``MongoDBStore(url, *, database="firefly_memory", collection="entries",
    pool_size=10)`` as upstream.  ``await store.initialize()`` connects, pings
    and creates the indexes; ``await store.close()`` closes the client;
    ``await store.cleanup_expired()`` returns how many entries it deleted.
    From sync code without an event loop the same calls do the work at once.

    Documents are firefly_orm's (real BSON dates, so expiry works); a
    collection written by upstream is brought over with
    :func:`firefly_orm.upstream_import.import_upstream` into ANOTHER collection
    or database (the two index sets cannot share one collection).
    """

    def initialize(self) -> Coroutine[Any, Any, None]:  # type: ignore[override]
        """Connect, ping and create the indexes (idempotent); ``await store.initialize()``.

        Raises:
            DatabaseConnectionError: The server cannot be reached; the message
                starts with ``"Failed to connect to MongoDB"``.
        """
        return lifecycle_call(self._initialize_now, self.async_initialize)

    def close(self) -> Coroutine[Any, Any, None]:  # type: ignore[override]
        """Close the client the store created; ``await store.close()``."""
        return lifecycle_call(lambda: _MongoDBStore.close(self), self.async_close)

    def cleanup_expired(self) -> Coroutine[Any, Any, int]:  # type: ignore[override]
        """Delete expired entries in every namespace; ``await`` it for the count."""
        return lifecycle_call(
            lambda: _MongoDBStore.cleanup_expired(self), self.async_cleanup_expired
        )

    async def async_initialize(self) -> None:
        """Async form of the initialisation, upstream's message on failure."""
        with failed_to_connect(_DATABASE):
            await super().async_initialize()

    def _initialize_now(self) -> None:
        with failed_to_connect(_DATABASE):
            _MongoDBStore.initialize(self)

    def __enter__(self) -> Self:
        """``with store:`` initialises it with the sync form (from sync code)."""
        self._initialize_now()
        return self

    def __exit__(self, *exc: object) -> None:
        """Leaving ``with store:`` closes it with the sync form."""
        _MongoDBStore.close(self)
