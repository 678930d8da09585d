"""A SQLite statement interrupted by a cancelled task (or Ctrl-C) must not keep the file locked.

When an exit exception (``asyncio.CancelledError``, ``KeyboardInterrupt``) interrupts
a statement, SQLAlchemy invalidates the connection and closes it without closing
the statement's cursor.  On SQLite that is not enough: a statement still under
way (an ``INSERT ... RETURNING`` whose row was not fetched yet, a ``SELECT`` with
rows left) keeps its transaction, and with it the file's locks, through
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
    """Close the cursor of a statement an exit exception interrupted, before SQLAlchemy
    closes its connection (after an ordinary error SQLAlchemy closes the cursor itself)."""
    exc = context.original_exception
    if isinstance(exc, Exception) or _is_greenlet_exit(exc):
        return  # an error: SQLAlchemy closes its cursor; a greenlet being killed: no waiting
    # The execution context's: ``ExceptionContext.cursor`` is declared, but not
    # set by SQLAlchemy 2.1's implementation.
    cursor = getattr(context.execution_context, "cursor", None)
    if cursor is None:
        return
    try:
        # aiosqlite: queued on the connection's thread before the close that
        # follows, even if the task is cancelled again while it waits here.
        cursor.close()
    except BaseException:  # the exit exception in flight is the one to raise
        logger.debug("closing the cursor of an interrupted statement failed", exc_info=True)


def _is_greenlet_exit(exc: BaseException) -> bool:
    greenlet = sys.modules.get("greenlet")  # optional: loaded when async code runs
    return greenlet is not None and isinstance(exc, greenlet.GreenletExit)


def close_interrupted_cursors(sync_engine: Engine) -> None:
    """Install the listener on ``sync_engine`` (once: a second call adds nothing)."""
    if not event.contains(sync_engine, "handle_error", _close_interrupted_cursor):
        event.listen(sync_engine, "handle_error", _close_interrupted_cursor)
