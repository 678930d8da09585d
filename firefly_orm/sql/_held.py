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
  still in one (SQLAlchemy's, or SQLite's alone: a ``COMMIT`` that failed, an
  interrupt just after ``BEGIN IMMEDIATE``) is rolled back, so no lock outlives
  its operation.  A connection that is closed, invalidated (its sqlite3
  connection is closed too), given other execution options by its user, or
  whose rollback failed, is closed and not kept.
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

    __slots__ = ("busy", "conn", "dbapi", "gone", "options", "thread")

    def __init__(self, conn: Connection, thread: threading.Thread) -> None:
        self.conn = conn
        #: The sqlite3 connection itself: an invalidated detached Connection
        #: lets go of it without closing it, so it is closed from here.
        self.dbapi: Any = conn.connection.dbapi_connection
        self.busy = True
        #: Closed and forgotten (the thread takes a new one next time).
        self.gone = False
        #: The execution options it was handed out with (an immutable mapping,
        #: replaced by any change): one a caller changed is not used again.
        self.options = conn.get_execution_options()
        self.thread = weakref.ref(thread)

    def ended(self) -> bool:
        """Whether the thread that took it has ended."""
        thread = self.thread()
        return thread is None or not thread.is_alive()

    def close(self) -> None:
        """Close the connection (and the sqlite3 one, however SQLAlchemy left it)."""
        for closing in (self.conn.close, self.dbapi.close):
            try:
                closing()
            except Exception:
                logger.warning("closing a held SQLite connection failed", exc_info=True)


class HeldConnections:
    """The held connections of one engine (see the module docstring).

    Args:
        engine: The engine to take connections from (the store's default
            variant: schema map and events; modes set their options per use).
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._local = threading.local()
        #: Every live slot, by ``id()`` of its Connection (read without the lock).
        self._slots: dict[int, _Slot] = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._closed = False

    def take(self, options: dict[str, Any]) -> Connection | None:
        """The thread's connection with ``options`` set, or ``None`` (use the pool).

        ``None`` while the thread's connection is in use, after :meth:`close`,
        and in a child process forked after this was built.
        """
        if os.getpid() != self._pid:
            return None  # a forked child: the parent's connections are not its own
        slot: _Slot | None = getattr(self._local, "slot", None)
        if slot is None or slot.gone:
            slot = self._new_slot()
            if slot is None:
                return None
        else:
            with self._lock:
                if slot.busy or slot.gone or self._closed:
                    return None
                slot.busy = True
        try:
            conn = slot.conn.execution_options(**options)
            slot.options = conn.get_execution_options()
        except BaseException:
            self._discard(slot)
            raise
        return conn

    def give_back(self, conn: Connection) -> bool:
        """End the use of ``conn``; ``False``: it is not a held one (close it yourself).

        A connection still in a transaction (SQLAlchemy's, or only SQLite's: a
        failed ``COMMIT``, an interrupt just after ``BEGIN IMMEDIATE``) is
        rolled back; one that is closed, invalidated, changed by its user, or
        whose rollback failed, is closed and not used again.
        """
        if os.getpid() != self._pid:
            return False
        slot = self._slots.get(id(conn))
        if slot is None or slot.conn is not conn:
            return False
        try:
            reusable = _reusable(slot)
        except BaseException:
            self._discard(slot)
            raise
        with self._lock:
            if reusable and not self._closed and not slot.gone:
                slot.busy = False
                return True
        self._discard(slot)
        return True

    def close(self) -> None:
        """Close every idle held connection; busy ones close when given back."""
        if os.getpid() != self._pid:
            return  # a forked child leaves its parent's connections alone
        with self._lock:
            self._closed = True
            idle = [slot for slot in self._slots.values() if not slot.busy]
            for slot in idle:
                slot.gone = True
                del self._slots[id(slot.conn)]
        for slot in idle:
            slot.close()

    # ------------------------------------------------------------------ internals
    def _new_slot(self) -> _Slot | None:
        """A new busy slot for this thread (``None`` once closed)."""
        if self._closed:
            return None
        conn = self._engine.connect()
        try:
            conn.detach()
            slot = _Slot(conn, threading.current_thread())
        except BaseException:
            conn.close()
            raise
        with self._lock:
            closed = self._closed
            ended = [old for old in self._slots.values() if not old.busy and old.ended()]
            for old in ended:
                old.gone = True
                del self._slots[id(old.conn)]
            if not closed:
                self._slots[id(conn)] = slot
        for old in ended:
            old.close()  # their threads have ended
        if closed:
            slot.close()
            return None
        self._local.slot = slot
        return slot

    def _discard(self, slot: _Slot) -> None:
        with self._lock:
            slot.gone = True
            if self._slots.get(id(slot.conn)) is slot:
                del self._slots[id(slot.conn)]
        slot.close()


def _reusable(slot: _Slot) -> bool:
    """End what is left of ``slot``'s transaction; whether the connection may be used again."""
    conn = slot.conn
    if conn.closed or conn.invalidated or conn.get_execution_options() is not slot.options:
        return False
    try:
        if conn.get_transaction() is not None:
            conn.rollback()
        if slot.dbapi.in_transaction:  # open in SQLite though not in SQLAlchemy
            slot.dbapi.rollback()
    except Exception:
        logger.warning("rolling back a held SQLite connection failed", exc_info=True)
        return False
    return True
