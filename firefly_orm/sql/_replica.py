"""Read replicas: which server a store's reads go to, and the read-your-writes rule.

A store given a replica (``replica_url=``) sends its **reads** there: the
single-statement reads (``load``, ``load_by_key``, search, listings) and the
read-only units of work the memory layers open for history, turn listings,
recall and exports.  Everything that writes, and every read inside a write,
runs on the primary.

Read-your-writes: for :attr:`ReadRouter.window` seconds after this process
last wrote through any store on the same primary (a committed or attempted
write, a migration), its reads go to the primary too, so an agent never
reads a history without the turn it has just added.  The rule is per process
and per primary server, not per namespace: a read-only unit of work does not
say up front which namespaces it will read, so a per-namespace rule would
send a transaction that reads several of them to a server missing one.  Set
the window above the replica's worst replay lag.  Inside
:func:`consistent_reads` (and for ``unit_of_work(read_only=True,
consistent=True)``) reads go to the primary whatever the window says: what
another process wrote a moment ago is only certain to be there.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from firefly_orm.errors import EntryValidationError
from firefly_orm.sql._engines import Engines

__all__ = ["DEFAULT_REPLICA_WINDOW", "ReadRouter", "consistent_reads"]

#: Seconds after a write of this process during which its reads stay on the primary.
DEFAULT_REPLICA_WINDOW = 10.0

#: Primary server (its URL, secrets hidden) -> ``time.monotonic()`` of this process's last write.
_LAST_WRITE: dict[str, float] = {}
#: True inside :func:`consistent_reads` (per thread and per asyncio task).
_CONSISTENT: ContextVar[bool] = ContextVar("firefly_orm_consistent_reads", default=False)


@contextmanager
def consistent_reads() -> Iterator[None]:
    """Every read of every store inside the block goes to its primary (not a replica).

    The flag lives in a :class:`~contextvars.ContextVar`: it holds for the
    calling thread, or the calling asyncio task and what it awaits.
    """
    token = _CONSISTENT.set(True)
    try:
        yield
    finally:
        _CONSISTENT.reset(token)


def validate_window(window: float) -> float:
    """``window`` as a float, or :class:`EntryValidationError` (finite, at least 0)."""
    if isinstance(window, bool) or not isinstance(window, int | float):
        raise EntryValidationError("replica_window", "must be a number of seconds")
    if not math.isfinite(window) or window < 0:
        raise EntryValidationError("replica_window", "must be a finite number of seconds >= 0")
    return float(window)


class ReadRouter:
    """Chooses the engines of each read: the replica's, or the primary's (see the module).

    Args:
        primary: The store's engines (every write, and reads that must see them).
        replica: The replica's engines, or ``None`` (every read on the primary).
        window: Seconds after a write of this process during which reads stay
            on the primary.
    """

    def __init__(
        self,
        primary: Engines,
        replica: Engines | None = None,
        window: float = DEFAULT_REPLICA_WINDOW,
    ) -> None:
        self.primary = primary
        self.replica = replica
        self.window = validate_window(window)

    def _server(self) -> str:
        return self.primary.display_url()

    def wrote(self) -> None:
        """Note that this process (just) wrote to the primary."""
        if self.replica is not None:
            _LAST_WRITE[self._server()] = time.monotonic()

    def for_read(self, *, consistent: bool = False) -> Engines:
        """The engines a read runs on now (``consistent``: the primary's)."""
        replica = self.replica
        if replica is None or consistent or _CONSISTENT.get():
            return self.primary
        last = _LAST_WRITE.get(self._server())
        if last is not None and time.monotonic() - last < self.window:
            return self.primary
        return replica
