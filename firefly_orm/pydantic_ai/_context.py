"""What a :class:`~firefly_orm.pydantic_ai.MemoryAgent` run reads before its model call.

One read transaction that checks who owns the conversation and assembles the
context of the run's first model request
(:func:`firefly_orm.assemble.assemble_context`, as
:meth:`MemoryManager.assemble_context
<firefly_orm.manager.MemoryManager.assemble_context>` does).  The check and
the context are read in the same transaction, so a conversation another user
creates in between is never read.

A run may start a conversation (a new id: its first turn creates it), which a
manager bound to a user would refuse to read (a missing conversation is "not
found" to it): hence this transaction, which accepts a missing conversation
for the run's user and refuses another user's with the same
:class:`~firefly_orm.errors.ConversationNotFoundError` as the layers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from firefly_orm.assemble import AssembleRequest, ContextShares
from firefly_orm.assemble import assemble_context as assemble_transaction
from firefly_orm.bridges._steps import Operation, Transaction
from firefly_orm.conversation._owner import claim, owner_row
from firefly_orm.manager import MemoryManager
from firefly_orm.protocols import UnitOfWork

__all__ = ["ContextOptions", "Loaded", "load_context"]


@dataclass(frozen=True)
class ContextOptions:
    """A :class:`MemoryAgent`'s context options (checked when the agent is built)."""

    max_tokens: int | None = None
    max_messages: int | None = None
    recall_limit: int = 5
    min_importance: float = 0.0
    shares: ContextShares | None = None


@dataclass(frozen=True)
class Loaded:
    """What the read gave: whether the conversation exists, and the run's context."""

    exists: bool
    context: list[Any]


def load_context(
    memory: MemoryManager,
    conversation_id: str,
    *,
    user_id: str | None,
    query: str,
    options: ContextOptions,
) -> Operation[Loaded]:
    """Read ``conversation_id``'s context for a run of ``user_id`` (one read transaction).

    ``user_id`` ``None`` (an unbound manager, a run for nobody): any
    conversation.  Otherwise the conversation must be missing (the run
    creates it) or ``user_id``'s.

    Raises:
        ConversationNotFoundError: The conversation is another user's (or
            nobody's, for a run of a user); nothing was read.
    """
    request = _request(memory, conversation_id, query, options)
    return (yield from Transaction.read(_checked_context, request, user_id))


def _checked_context(uow: UnitOfWork, request: AssembleRequest, user_id: str | None) -> Loaded:
    """Transaction: the owner check, then the context, in one snapshot."""
    row = owner_row(uow, request.conversation_id)
    claim(row, user_id, request.conversation_id)
    return Loaded(row is not None, assemble_transaction(uow, request))


def _request(
    memory: MemoryManager, conversation_id: str, query: str, options: ContextOptions
) -> AssembleRequest:
    """The :class:`AssembleRequest` ``memory.assemble_context`` would make for these options."""
    return memory._assemble_request(
        conversation_id,
        max_tokens=options.max_tokens,
        max_messages=options.max_messages,
        query=query,
        recall_limit=options.recall_limit,
        min_importance=options.min_importance,
        shares=options.shares,
        style="pydantic-ai",
    )
