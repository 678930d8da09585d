"""One SQLAlchemy ``Connection`` held per thread, for a SQLite file the store opened itself.

A store's operations on SQLite are short (a statement or two), so taking a
connection from the pool and giving it back around each one is a large part
of their cost: a ``Connection`` object, the pool's checkout and check-in and
its reset, about 30 us of a 300 us ``add_turn``.  A file SQLite connection
costs the database nothing while it is idle (outside a transaction it holds no
lock), so :class:`HeldConnections` keeps one per thread instead, the way a
hand-written ``sqlite3`` store keeps a connection per thread:

* The first operation of a thread checks a connection out of the engine's pool
  and *detaches* it (:meth:`sqlalchemy.engine.Connection.detach`): the pool's
  ``connect`` events have run on it (WAL, ``busy_timeout``, ``synchronous``),
  its engine's events and execution options (the schema map) stay, and it no
  longer counts against the pool's size, so any number of threads may hold one
  while the pool keeps serving everything else.
* Later operations of the thread take it again, with the execution options of
  their mode (``BEGIN IMMEDIATE`` for writes, none for single statements: see
  :mod:`firefly_orm.sql._engines`).  While it is in use (a unit of work open on
  the thread, and a second operation started inside it) the second one checks
  a connection out of the pool, as before.
* Each operation still ends its own transaction; on the way back a connection
  still in one is rolled back, and a connection SQLAlchemy invalidated (or one
  whose rollback failed) is closed and not kept.
* When a thread ends, its connection is closed by the next thread that takes a
  connection for the first time; :meth:`HeldConnections.close` (the store's
  ``close()``) closes every idle one at once and each busy one when its
  operation gives it back.  A forked child process never uses its parent's
  connections: it starts with none (SQLite connections must not cross a
  ``fork``), and leaves the inherited ones untouched.

Only for engines the store built from a file URL: a caller's engine is the
caller's, and its pool decides.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from typing import Any

from sqlalchemy.engine import Connection, Engine

__all__ = ["HeldConnections"]

logger = logging.getLogger("firefly_orm")


class _Slot:
    """A thread's held connection, and whether an operation is using it."""

    __slots__ = ("busy", "conn", "gone", "thread")

    def __init__(self, conn: Connection, thread: threading.Thread) -> None:
        self.conn = conn
        self.busy = False
        #: Closed and forgotten (the thread takes a new one next time).
        self.gone = False
        self.thread = weakref.ref(thread)

    def ended(self) -> bool:
        """Whether the thread that took it has ended."""
        thread = self.thread()
        return thread is None or not thread.is_alive()


class HeldConnections:
    """The held connections of one engine (see the module docstring).

    Args:
        engine: The engine to take connections from (the store's default
            variant: schema map and events; modes set their options per use).
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._local = threading.local()
        self._slots: list[_Slot] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._closed = False

    def take(self, options: dict[str, Any]) -> Connection | None:
        """The thread's connection with ``options`` set, or ``None`` (use the pool).

        ``None`` while the thread's connection is in use, after :meth:`close`,
        and in a child process forked after this was built.
        """
        slot: _Slot | None = getattr(self._local, "slot", None)
        if slot is None or slot.gone:
            slot = self._new_slot()
            if slot is None:
                return None
        elif slot.busy or self._closed or os.getpid() != self._pid:
            return None
        slot.busy = True
        return slot.conn.execution_options(**options)

    def give_back(self, conn: Connection) -> bool:
        """End the use of ``conn``; ``False``: it is not a held one (close it yourself)."""
        slot: _Slot | None = getattr(self._local, "slot", None)
        if slot is None or slot.conn is not conn:
            slot = self._owner(conn)  # given back by another thread than took it
            if slot is None:
                return False
        keep = not self._closed
        if keep and not conn.invalidated and conn.in_transaction():
            try:
                conn.rollback()
            except Exception:
                logger.warning("rolling back a held SQLite connection failed", exc_info=True)
                keep = False
        if keep and not conn.invalidated:
            slot.busy = False
            return True
        self._forget(slot)
        _close_quietly(conn)
        return True

    def close(self) -> None:
        """Close every idle held connection; busy ones close when given back."""
        with self._lock:
            self._closed = True
            idle = [slot for slot in self._slots if not slot.busy]
            self._slots = [slot for slot in self._slots if slot.busy]
        for slot in idle:
            slot.gone = True
            _close_quietly(slot.conn)

    # ------------------------------------------------------------------ internals
    def _new_slot(self) -> _Slot | None:
        if self._closed or os.getpid() != self._pid:
            return None
        conn = self._engine.connect()
        try:
            conn.detach()
        except BaseException:
            conn.close()
            raise
        slot = _Slot(conn, threading.current_thread())
        with self._lock:
            closed = self._closed
            ended = [old for old in self._slots if not old.busy and old.ended()]
            if not closed:
                self._slots = [old for old in self._slots if old not in ended]
                self._slots.append(slot)
        for old in ended:
            _close_quietly(old.conn)  # their threads have ended
        if closed:
            _close_quietly(conn)
            return None
        self._local.slot = slot
        return slot

    def _owner(self, conn: Connection) -> _Slot | None:
        with self._lock:
            for slot in self._slots:
                if slot.conn is conn:
                    return slot
        return None

    def _forget(self, slot: _Slot) -> None:
        slot.gone = True
        with self._lock:
            if slot in self._slots:
                self._slots.remove(slot)


def _close_quietly(conn: Connection) -> None:
    try:
        conn.close()
    except Exception:
        logger.warning("closing a held SQLite connection failed", exc_info=True)
