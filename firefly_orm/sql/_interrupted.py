"""A SQLite statement interrupted by a cancelled task (or Ctrl-C) must not keep the file locked.

When an exit exception (``asyncio.CancelledError``, ``KeyboardInterrupt``, an
``asyncio`` timeout) interrupts a statement, SQLAlchemy invalidates the connection
and closes it without closing the statement's cursor.  On SQLite that is not
enough: a statement not reset (an ``INSERT ... RETURNING`` whose row was not
fetched yet, a ``SELECT`` with rows left, an ``executemany`` whose cursor was never
closed) keeps its transaction, and with it the file's locks, through
``sqlite3_close_v2``: the connection lives on as a "zombie" until the cursor is
garbage-collected, and every other connection that wants to write waits on it
meanwhile, up to its busy timeout or for good.  aiosqlite makes that window
wide: it runs the statement and fetches its rows as two hand-offs to its
thread, and a task cancelled between them leaves the statement half read (the
statement itself is not cancelled: the thread runs it to the end).

:func:`close_interrupted_cursors` adds a ``handle_error`` listener to an engine
that closes that cursor first (``sqlite3`` resets its statement on close).  Every
SQLite engine a store runs on gets it: those it builds and those it is given.
"""

from __future__ import annotations

import logging
import sys

from sqlalchemy import event
from sqlalchemy.engine import Engine, ExceptionContext

__all__ = ["close_interrupted_cursors"]

logger = logging.getLogger("firefly_orm")


def _close_interrupted_cursor(context: ExceptionContext) -> None:
    """Close the cursor of a statement whose connection SQLAlchemy is about to close.

    That is an exit exception (a cancellation, Ctrl-C, an ``asyncio`` timeout) or a
    lost connection: SQLAlchemy closes the cursor itself after any other error.
    """
    if not context.is_disconnect or _is_greenlet_exit(context.original_exception):
        return  # a greenlet being killed: nothing may wait there
    # The execution context's: ``ExceptionContext.cursor`` is declared, but not
    # set by SQLAlchemy 2.1's implementation.
    cursor = getattr(context.execution_context, "cursor", None)
    if cursor is None:
        return
    try:
        # aiosqlite: the close is queued on the connection's thread at once, ahead of
        # the connection's own close, and awaited: the task ends when the statement the
        # thread is running does, however often it is cancelled meanwhile.
        cursor.close()
    except BaseException as exc:  # the exception in flight is the one to raise, unless
        if isinstance(exc, GeneratorExit) or _is_greenlet_exit(exc):
            raise  # the coroutine or greenlet is being closed: no other await may follow
        logger.debug("closing the cursor of an interrupted statement failed", exc_info=True)


def _is_greenlet_exit(exc: BaseException) -> bool:
    greenlet = sys.modules.get("greenlet")  # optional: loaded when async code runs
    return greenlet is not None and isinstance(exc, greenlet.GreenletExit)


def close_interrupted_cursors(sync_engine: Engine) -> None:
    """Install the listener on ``sync_engine``'s dialect, once: the dialect is shared by
    every ``execution_options()`` copy of the engine, and a second call adds nothing.

    It stays when the store closes (it acts only as described above).  SQLAlchemy
    stops at a ``handle_error`` listener that raises: one of the application's,
    registered before the store was built, that raises a new exception keeps this
    one from running.
    """
    dialect = sync_engine.dialect
    if not event.contains(dialect, "handle_error", _close_interrupted_cursor):
        event.listen(dialect, "handle_error", _close_interrupted_cursor)
