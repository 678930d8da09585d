"""The read operations of :class:`~firefly_orm.conversation.ConversationMemory`.

:class:`ConversationReads` holds the operation methods (``_get_context``,
``_get_turns``...) that validate a read's arguments and run one of
:mod:`firefly_orm.conversation._reads` (or :mod:`~firefly_orm.conversation._ops`)
in a read transaction; :class:`~firefly_orm.conversation.ConversationMemory`
derives their public ``get_*`` / ``async_get_*`` forms.
"""

from __future__ import annotations

from typing import Any

from firefly_orm.bridges._steps import Operation, Transaction
from firefly_orm.conversation import _ops as ops
from firefly_orm.conversation._model import ConversationTurn, check_conversation_id, check_int
from firefly_orm.conversation._owner import OwnedLayer, Ownership
from firefly_orm.conversation._plan import HeadState, Limits
from firefly_orm.conversation._reads import (
    read_context,
    read_history,
    read_recent,
    read_recent_messages,
    read_user_conversations,
)
from firefly_orm.conversation._rows import archive_namespace, conversation_namespace
from firefly_orm.errors import ConversationNotFoundError
from firefly_orm.tokens import TokenEstimator

__all__ = ["ConversationReads"]


class ConversationReads(OwnedLayer):
    """The read operations of a conversation memory (a base of ``ConversationMemory``).

    Bound to a user, every read of a conversation that is missing or another
    user's raises :class:`~firefly_orm.errors.ConversationNotFoundError`
    (unbound, a missing one reads as empty).
    """

    _limits: Limits
    _estimator: TokenEstimator

    def _get_message_history(self, conversation_id: str) -> Operation[list[Any]]:
        """The raw messages of the newest contiguous turns within the limits.

        Walks from the newest turn back and stops at the first turn that does not
        fit ``max_tokens`` (and ``max_messages``), then flattens the kept turns'
        ``raw_messages`` in chronological order; it never starts on a turn that
        opens with a tool result.  Unknown id -> ``[]``.  A newest turn larger
        than the budget is never dropped: its newest messages that fit come
        instead, else the whole turn (a tool call is never split from its
        result); the module this is modelled on gave ``[]``.
        Neither the summary nor pinned turns are included: :meth:`get_context`
        gives what the next model call should get.
        """
        conversation_id = check_conversation_id(conversation_id)
        step = Transaction.read(read_history, conversation_id, self._limits)
        return (yield from self._as_owner(conversation_id, step))

    def _get_context(self, conversation_id: str) -> Operation[list[Any]]:
        """What the next model call should get, within ``max_tokens`` and ``max_messages``.

        In order: the rolling summary (one message: a pydantic-ai
        ``SystemPromptPart`` request, or ``{"role": "system", ...}`` for dict
        messages) when it fits; the pinned turns (whole, while they fit); then
        the newest messages that fit, which may start inside a turn but never
        on a tool result whose call was cut, nor between a call and its result.
        Turns stored without raw messages become a prompt and an answer message
        in the same style.  Unknown id -> ``[]``.  The newest messages always
        come: when none fits beside the summary and pinned turns, the fewest
        newest messages a provider accepts (a call with its results) come over
        the budget.
        """
        conversation_id = check_conversation_id(conversation_id)
        step = Transaction.read(read_context, conversation_id, self._limits, self._estimator)
        return (yield from self._as_owner(conversation_id, step))

    def _get_recent(self, conversation_id: str, count: int) -> Operation[list[ConversationTurn]]:
        """The newest ``count`` retained turns, oldest first (one indexed read)."""
        conversation_id = check_conversation_id(conversation_id)
        count = check_int("count", count, 0)
        step = Transaction.read(read_recent, conversation_id, count)
        return (yield from self._as_owner(conversation_id, step))

    def _get_recent_messages(self, conversation_id: str, count: int) -> Operation[list[Any]]:
        """The newest ``count`` model messages, oldest first (one indexed read).

        "The last N messages" (what OpenAI Agents' ``session.get_items(limit=N)``
        gives), whatever the memory's limits, served by one
        ``ORDER BY key DESC LIMIT count`` read of the newest turns on the SQL
        stores.  The window may start inside a turn but, like every window,
        only at a message a history may open with (a user or system message),
        and never between a tool call and its result: so it holds fewer than
        ``count`` messages when the ``count``-th newest cannot open a history.
        Turns stored without raw messages give a prompt and an answer message
        in the style of the others (as :meth:`get_context`).  Unknown id or
        ``count=0`` -> ``[]``.

        Raises:
            EntryValidationError: A bad id, or ``count`` not an integer >= 0.
        """
        conversation_id = check_conversation_id(conversation_id)
        count = check_int("count", count, 0)
        step = Transaction.read(read_recent_messages, conversation_id, count)
        return (yield from self._as_owner(conversation_id, step))

    def _user_conversations(
        self, user_id: str, *, limit: int | None = None, offset: int = 0
    ) -> Operation[list[str]]:
        """Ids of ``user_id``'s conversations, newest first, ``offset`` and ``limit`` paged.

        An indexed read on SQL and MongoDB (``user_id`` is indexed).  A memory
        bound to a user refuses another user's id (``EntryValidationError``).
        """
        user_id = self._own_user(user_id)
        limit = None if limit is None else check_int("limit", limit, 0)
        offset = check_int("offset", offset, 0)
        return (yield from Transaction.read(read_user_conversations, user_id, limit, offset))

    def _get_turns(self, conversation_id: str) -> Operation[list[ConversationTurn]]:
        """Every retained turn, oldest first (unknown id -> ``[]``)."""
        conversation_id = check_conversation_id(conversation_id)
        step = Transaction.read(ops.read_turns, conversation_namespace(conversation_id))
        return (yield from self._as_owner(conversation_id, step))

    def _get_archived_turns(self, conversation_id: str) -> Operation[list[ConversationTurn]]:
        """Turns evicted while ``keep_evicted`` was on, oldest first."""
        conversation_id = check_conversation_id(conversation_id)
        step = Transaction.read(ops.read_turns, archive_namespace(conversation_id))
        return (yield from self._as_owner(conversation_id, step))

    def _get_total_tokens(self, conversation_id: str) -> Operation[int]:
        """Sum of the retained turns' token estimates (unknown id -> 0)."""
        head = yield from self._head(conversation_id)
        return head.total_tokens

    def _get_summary(self, conversation_id: str) -> Operation[str | None]:
        """The summary of the evicted turns, or ``None``."""
        head = yield from self._head(conversation_id)
        return head.summary

    def _conversation_ids(self) -> Operation[list[str]]:
        return (yield from Transaction.read(ops.read_conversation_ids, self._user_id))

    def _head(self, conversation_id: str) -> Operation[HeadState]:
        conversation_id = check_conversation_id(conversation_id)
        step = Transaction.read(ops.read_head, conversation_id)
        return (yield from self._as_owner(conversation_id, step))

    def _exists(self, conversation_id: str) -> Operation[bool]:
        """Whether ``conversation_id`` exists (bound to a user: and is the user's).

        Raises:
            EntryValidationError: A bad id.
        """
        found = yield from self._ownership(check_conversation_id(conversation_id))
        return found.exists

    def _owner_of(self, conversation_id: str) -> Operation[str | None]:
        """The ``user_id`` that owns ``conversation_id`` (``None``: nobody in particular).

        Raises:
            EntryValidationError: A bad id.
            ConversationNotFoundError: No such conversation (bound to a user:
                or it is another user's; the same error either way).
        """
        conversation_id = check_conversation_id(conversation_id)
        found: Ownership = yield from self._ownership(conversation_id)
        if not found.exists:
            raise ConversationNotFoundError(conversation_id)
        return found.owner
