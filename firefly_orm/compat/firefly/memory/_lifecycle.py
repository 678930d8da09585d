"""Upstream's awaitable lifecycle calls on firefly_orm's stores.

Upstream's database stores have ``async def initialize()``, ``close()`` and
``cleanup_expired()``; firefly_orm's are synchronous, with ``async_*`` twins.
:func:`lifecycle_call` gives the compatible stores one method that serves both
worlds without ever blocking an event loop:

* called while an event loop runs in the calling thread, it returns the
  ``async_*`` coroutine (native async driver), which does nothing until it is
  awaited -- exactly upstream's shape, ``await store.initialize()``;
* called where no event loop runs (plain sync code, a worker thread, or the
  argument of ``asyncio.run(store.initialize())`` being evaluated), there is no
  loop to block, so the sync form runs at once and an already finished
  coroutine is returned: awaiting it (or handing it to ``asyncio.run``) gives
  the result, dropping it is harmless.

So ``await store.initialize()``, ``asyncio.run(store.initialize())`` and a plain
``store.initialize()`` in sync code all initialise the store.  The one shape that
does nothing is upstream's too: calling it inside a running loop without
``await`` (Python then warns that the coroutine was never awaited).

:func:`lifecycle_call` is a bridge between sync and async code, so it lives with
the others (:mod:`firefly_orm.bridges._loop_thread`) and is re-exported here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from firefly_orm.bridges._loop_thread import lifecycle_call
from firefly_orm.errors import DatabaseConnectionError

__all__ = ["CONNECT_FAILURE_PREFIX", "failed_to_connect", "lifecycle_call"]

#: How upstream's connection failures begin (its users match on it).
CONNECT_FAILURE_PREFIX = "Failed to connect to"


@contextmanager
def failed_to_connect(database: str) -> Iterator[None]:
    """Re-raise a :class:`DatabaseConnectionError` with upstream's message prefix.

    The message becomes ``"Failed to connect to <database>: <firefly_orm's
    message>"`` (secrets already hidden); the original error is the ``__cause__``.
    """
    try:
        yield
    except DatabaseConnectionError as exc:
        if str(exc).startswith(CONNECT_FAILURE_PREFIX):
            raise
        raise DatabaseConnectionError(f"{CONNECT_FAILURE_PREFIX} {database}: {exc}") from exc
