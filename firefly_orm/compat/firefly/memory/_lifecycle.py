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
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Generator, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn, TypeVar

from firefly_orm.errors import DatabaseConnectionError

__all__ = ["CONNECT_FAILURE_PREFIX", "failed_to_connect", "lifecycle_call"]

T = TypeVar("T")

#: How upstream's connection failures begin (its users match on it).
CONNECT_FAILURE_PREFIX = "Failed to connect to"


class _Finished(Coroutine[Any, Any, T]):
    """A coroutine whose work is already done: awaiting it returns ``value``.

    A real coroutine object would warn "never awaited" when a sync caller drops
    it; this one has nothing left to run, so dropping it is silent.
    ``asyncio.run`` and ``await`` accept it like any coroutine.
    """

    __slots__ = ("_value",)

    def __init__(self, value: T) -> None:
        self._value = value

    def send(self, value: Any, /) -> NoReturn:
        raise StopIteration(self._value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None, /) -> NoReturn:
        if isinstance(typ, BaseException):
            raise typ
        raise typ if val is None else val

    def close(self) -> None:
        """Nothing to close: the work is done."""

    def __await__(self) -> Generator[Any, None, T]:
        return self._value
        yield  # pragma: no cover - makes this a generator that finishes at once

    def __repr__(self) -> str:
        return f"<finished lifecycle call: {self._value!r}>"


def lifecycle_call(
    now: Callable[[], T], later: Callable[[], Coroutine[Any, Any, T]]
) -> Coroutine[Any, Any, T]:
    """``later()`` when an event loop runs in this thread, else ``now()`` done at once.

    Args:
        now: The sync form (may block: no loop runs in this thread).
        later: The async form, returned un-awaited for the caller to await.

    Returns:
        A coroutine: ``later()``'s, or a finished one holding ``now()``'s result.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _Finished(now())
    return later()


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
