"""Who owns a conversation, and the checks a memory bound to a user runs.

A conversation's owner is the ``user_id`` of its head row (and of its index
row, which a conversation has before its first turn and which :func:`owner_row`
falls back to when a crash left no head).  A memory bound to a user
(:class:`OwnedLayer`: ``ConversationMemory(user_id=...)``, the manager's) runs
every operation naming a conversation through :func:`guarded` with
:func:`owned_by`, so the check reads the owner in the same unit of work as the
work itself, and a conversation that is missing or another user's raises the
same :class:`~firefly_orm.errors.ConversationNotFoundError`.  Creating writes
(adding a turn, importing) accept a missing conversation and make it the
user's: they :func:`claim` the head they read for update.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from firefly_orm.bridges._relay import each_step
from firefly_orm.bridges._steps import (
    HoldingTransaction,
    HoldingWork,
    MemoryLayer,
    Operation,
    Step,
    Transaction,
)
from firefly_orm.conversation._rows import HEAD_KEY, INDEX_NAMESPACE, conversation_namespace
from firefly_orm.entry import MemoryEntry
from firefly_orm.entry._rules import check_bound_user
from firefly_orm.errors import ConversationNotFoundError
from firefly_orm.protocols import UnitOfWork

__all__ = [
    "Ownership",
    "OwnedLayer",
    "claim",
    "each_step",
    "guarded",
    "owned_by",
    "owner_row",
    "read_ownership",
]

T = TypeVar("T")


def guarded(
    op: Operation[T] | Step[T],
    check: Callable[[UnitOfWork], object],
    *,
    writes_only: bool = False,
) -> Operation[T]:
    """``op`` (an operation or one step), with ``check(uow)`` run first in every
    unit of work it opens (``writes_only``: in every unit of work that commits).

    Each :class:`Transaction` and :class:`HoldingTransaction` step of ``op``
    (also those of the operations it composes, and every retry) runs
    ``check`` at the start of its unit of work, so the check and the work see
    the same transaction: what ``check`` raises rolls the unit of work back
    and reaches ``op`` at that step, as any failure of the work would.  Other
    steps pass unchanged.  Used to enforce a precondition that must hold in
    the same transaction as the work, such as who owns a conversation.
    """
    return each_step(op, lambda step: _guard(step, check, writes_only))


def _guard(step: Step[Any], check: Callable[[UnitOfWork], object], writes_only: bool) -> Step[Any]:
    """``step`` with ``check`` run first in its unit of work (other steps: unchanged)."""
    if isinstance(step, Transaction) and not (writes_only and not step.commit):
        inner = step.work

        def checked(uow: UnitOfWork) -> Any:
            check(uow)
            return inner(uow)

        return Transaction(checked, read_only=step.read_only, commit=step.commit)
    if isinstance(step, HoldingTransaction):
        holding = step.work

        def checked_holding(uow: UnitOfWork) -> HoldingWork[Any]:
            check(uow)
            return holding(uow)

        return HoldingTransaction(checked_holding)
    return step


def owner_row(uow: UnitOfWork, conversation_id: str) -> MemoryEntry | None:
    """The row that says who owns ``conversation_id``: its head, else its index row."""
    head = uow.entries.get_by_key(conversation_namespace(conversation_id), HEAD_KEY)
    if head is not None:
        return head
    return uow.entries.get_by_key(INDEX_NAMESPACE, conversation_id)


@dataclass(frozen=True)
class Ownership:
    """Whether a conversation exists, and its owner (``None``: nobody in particular)."""

    exists: bool
    owner: str | None = None


def read_ownership(uow: UnitOfWork, conversation_id: str) -> Ownership:
    """Transaction: :class:`Ownership` of ``conversation_id``."""
    row = owner_row(uow, conversation_id)
    return Ownership(False) if row is None else Ownership(True, row.user_id)


def claim(row: MemoryEntry | None, user_id: str | None, conversation_id: str) -> str | None:
    """The owner a write for ``user_id`` leaves ``conversation_id`` with.

    ``row`` is the conversation's stored head (or index row), ``None`` when it
    is new: a new conversation gets ``user_id``; an existing one keeps its
    owner, which must be ``user_id`` when one is given.

    Raises:
        ConversationNotFoundError: The conversation is someone else's.
    """
    if row is None:
        return user_id
    if user_id is not None and row.user_id != user_id:
        raise ConversationNotFoundError(conversation_id)
    return row.user_id


def owned_by(user_id: str, conversation_id: str) -> Callable[[UnitOfWork], None]:
    """A check: ``conversation_id`` exists and belongs to ``user_id``.

    Raises:
        ConversationNotFoundError: It does not exist, or it is someone else's.
    """

    def check(uow: UnitOfWork) -> None:
        row = owner_row(uow, conversation_id)
        if row is None or row.user_id != user_id:
            raise ConversationNotFoundError(conversation_id)

    return check


class OwnedLayer(MemoryLayer):
    """A memory layer that may be bound to one user (``_user_id``; ``None``: unbound).

    Bound, it serves that user only: :meth:`_as_owner` runs an operation on a
    conversation only when the user owns it, :meth:`_acting_user` refuses an
    explicit ``user_id`` argument naming another user.  Unbound (an admin
    memory), everything passes.
    """

    _user_id: str | None = None

    def _as_owner(self, conversation_id: str, op: Operation[T] | Step[T]) -> Operation[T]:
        """``op`` on ``conversation_id``, checked in each of its units of work when bound."""
        if self._user_id is None:
            return iter(op) if isinstance(op, Step) else op
        return guarded(op, owned_by(self._user_id, conversation_id))

    def _acting_user(self, user_id: str | None) -> str | None:
        """The user an operation acts for: ``user_id`` (see :meth:`_own_user`) or the bound user."""
        return self._user_id if user_id is None else self._own_user(user_id)

    def _own_user(self, user_id: str) -> str:
        """``user_id``, validated; bound, it must be the bound user.

        Raises:
            EntryValidationError: A bad ``user_id``, or one other than the bound user.
        """
        return check_bound_user(user_id, self._user_id, "memory")

    def _ownership(self, conversation_id: str) -> Operation[Ownership]:
        """The :class:`Ownership` of ``conversation_id`` as this layer may see it.

        Bound, another user's conversation reads as missing.
        """
        found = yield from Transaction.read(read_ownership, conversation_id)
        if self._user_id is not None and found.owner != self._user_id:
            return Ownership(False)
        return found
