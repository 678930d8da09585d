"""No transaction held across a model call: an operation's hold on a caller's session.

A store bound to a caller's session (``store.bind_session(session)``: the
:class:`~firefly_orm.protocols.JoinsSession` fact) runs our reads and writes
in SAVEPOINTs of that session, and the first of them begins the session's
transaction.  Left open while the model thinks, it keeps the app's pooled
connection ``idle in transaction`` for the whole call (seconds, or a timeout):
the connection is out of the pool, its snapshot and locks held.

A :class:`SessionHold`, taken when a run (of :mod:`firefly_orm.pydantic_ai`'s
``MemoryAgent``, or any operation that calls out) starts, decides whose
transaction it is.  The session had none and nothing pending (no new, changed or deleted
objects): then what the run's reads (and its tools) begin is the run's own,
and :meth:`SessionHold.release` commits it (the reads wrote nothing; what a
tool wrote is the tool's doing, as on a store of its own) before each model
request, so the connection goes back to the pool, ``idle``.  Otherwise the
transaction is the caller's: it is never ended here, and a warning says the
connection stays in a transaction across the model call (end it before the
run).

:func:`released_before_callouts` does the same for a write operation that
calls out (a summarizer, a promotion scorer) after a first attempt began the
session's transaction and wrote nothing: the transaction is ended before the
call-out.  The turn a run stores is written last, in a SAVEPOINT of the
session, and left for the caller to commit with its own rows.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, TypeVar, cast

from firefly_orm.bridges._relay import each_step
from firefly_orm.bridges._steps import CallOut, LocksRows, Operation, Sleep, Step, Transaction
from firefly_orm.protocols import JoinsSession, MemoryStore, declares

if TYPE_CHECKING:  # SQLAlchemy's session types, imported when a store joins a session
    from sqlalchemy.ext.asyncio import AsyncSession
    from sqlalchemy.orm import Session

__all__ = ["SessionHold", "released_before_callouts"]

logger = logging.getLogger("firefly_orm")

T = TypeVar("T")


def _sync_session(session: object) -> Session | None:
    """The sync ``Session`` of ``session`` (an ``AsyncSession``'s own), else ``None``."""
    from sqlalchemy.ext.asyncio import AsyncSession
    from sqlalchemy.orm import Session

    if isinstance(session, AsyncSession):
        return session.sync_session
    return session if isinstance(session, Session) else None


def _idle(session: Session) -> bool:
    """Whether ``session`` has no transaction and nothing pending (a read would begin one)."""
    return not session.in_transaction() and not (session.new or session.dirty or session.deleted)


class SessionHold:
    """A run's view of the caller's session of its store (see the module docstring).

    Take it with :meth:`of` before the run's first read; for a store that
    joins no session, every method does nothing.

    Args:
        session: The caller's ``Session`` or ``AsyncSession`` (``None``: none).
        owned: Whether the transactions begun from now on are the run's own.
    """

    def __init__(self, session: Session | AsyncSession | None, owned: bool) -> None:
        self._sync = _sync_session(session)
        #: The AsyncSession whose commit is awaited (``None``: a sync Session).
        self._async: AsyncSession | None = (
            None if session is None or session is self._sync else cast("AsyncSession", session)
        )
        self.owned = owned and self._sync is not None

    @classmethod
    def of(cls, store: MemoryStore, *, warn: bool = True) -> SessionHold:
        """The hold of a run on ``store``, taken now (no I/O).

        ``warn``: log a warning when the session already has a transaction
        (the caller's, which stays open across the model call).
        """
        if not declares(store, JoinsSession):
            return cls(None, False)
        session = cast(JoinsSession, store).session
        sync = _sync_session(session)
        if sync is None:
            return cls(None, False)
        owned = _idle(sync)
        if not owned and warn:
            logger.warning(
                "the session this memory is bound to is already in a transaction (or has "
                "pending changes): it stays open across the model call, holding its "
                "connection 'idle in transaction'; commit or roll back before the run"
            )
        return cls(cast("Session | AsyncSession", session), owned)

    @property
    def joined(self) -> bool:
        """Whether the store joins a caller's session at all."""
        return self._sync is not None

    def idle(self) -> bool:
        """Whether the session has no transaction (and nothing pending) right now."""
        return self._sync is not None and _idle(self._sync)

    def _endable(self) -> Session | None:
        """The sync session when it holds a transaction of the run's that may end now."""
        sync = self._sync
        if not self.owned or sync is None or not sync.in_transaction():
            return None
        if sync.get_nested_transaction() is not None:  # inside one of our SAVEPOINTs
            return None
        return sync

    def release(self) -> None:
        """End the run's transaction in the session (commit), if it has one (sync code)."""
        sync = self._endable()
        if sync is None:
            return
        if self._async is not None:  # sync code cannot await its commit
            return
        sync.commit()
        logger.debug("ended the session's transaction before the model call")

    async def arelease(self) -> None:
        """End the run's transaction in the session (commit), if it has one (async code)."""
        sync = self._endable()
        if sync is None:
            return
        if self._async is not None:
            await self._async.commit()
        else:
            sync.commit()
        logger.debug("ended the session's transaction before the model call")


class _Release(Step[None]):
    """A step: :meth:`SessionHold.release` (sync) or :meth:`SessionHold.arelease` (async)."""

    def __init__(self, hold: SessionHold) -> None:
        self.hold = hold

    def perform(self, store: MemoryStore) -> None:
        self.hold.release()

    async def aperform(self, store: MemoryStore) -> None:
        await self.hold.arelease()


#: Steps that write nothing (anything else may have written).
_READS = (CallOut, Sleep, LocksRows)


def released_before_callouts(op: Operation[T], hold: SessionHold) -> Operation[T]:
    """``op``, with the run's transaction in the session ended before each call-out.

    Only while ``op`` has written nothing: a :class:`Transaction` step that
    committed, or any other step that is not a read, ends the releases (what
    ``op`` wrote is the caller's to commit).  A call-out that runs inside a
    transaction step of its own (a store that queues writers on a row lock)
    is not reached here.
    """
    if not hold.owned:
        return (yield from op)
    written = False
    release = _Release(hold)

    def before(step: Step[Any]) -> Step[None] | None:
        return release if isinstance(step, CallOut) and not written else None

    def after(step: Step[Any]) -> None:
        nonlocal written
        if isinstance(step, Transaction):
            written = written or step.commit
        elif not isinstance(step, _READS):
            written = True

    return (yield from each_step(op, before=before, after=after))
