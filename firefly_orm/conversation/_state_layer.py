"""The scoped-state operations of :class:`~firefly_orm.conversation.ConversationMemory`.

:class:`ConversationState` holds ``_get_state`` and ``_update_state`` (the rows
and rules are :mod:`firefly_orm.conversation._state`'s);
:class:`~firefly_orm.conversation.ConversationMemory` derives their public and
``async_`` forms, and gives ``add_turn`` / ``add_turns`` their ``state_delta``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from firefly_orm.bridges._steps import Operation, Transaction, retrying
from firefly_orm.conversation._model import check_conversation_id
from firefly_orm.conversation._ops import create_conversation
from firefly_orm.conversation._owner import OwnedLayer, owner_row
from firefly_orm.conversation._state import (
    TEMP_PREFIX,
    StateDelta,
    check_state_delta,
    merged_view,
    read_state,
    write_state,
)
from firefly_orm.protocols import UnitOfWork

__all__ = ["ConversationState", "update_state"]


def _view(
    uow: UnitOfWork, conversation_id: str, delta: StateDelta, user_id: str | None
) -> dict[str, Any]:
    """The merged view of the stored state, with the ``temp:`` keys of ``delta`` over it."""
    view = merged_view(*read_state(uow, conversation_id, user_id))
    view.update({TEMP_PREFIX + k: v for k, v in delta.temp.items()})
    return view


def update_state(
    uow: UnitOfWork, conversation_id: str, delta: StateDelta, user_id: str | None
) -> dict[str, Any]:
    """Transaction: apply ``delta`` (creating the conversation for ``user_id`` when it
    is missing); return the merged view after it, ``temp:`` keys included."""
    if owner_row(uow, conversation_id) is None:
        create_conversation(uow, conversation_id, user_id)
    owner = write_state(uow, conversation_id, delta, user_id)
    return _view(uow, conversation_id, delta, owner)


class ConversationState(OwnedLayer):
    """Per-conversation state in ADK's scopes (a base of ``ConversationMemory``).

    Keys prefixed ``app:`` are shared by every conversation of the store,
    ``user:`` by every conversation of the conversation's owner, ``temp:`` keys
    are never stored, any other key is the conversation's own.
    """

    def _get_state(
        self, conversation_id: str, *, user_id: str | None = None
    ) -> Operation[dict[str, Any]]:
        """The state of a conversation: its own keys, ``app:`` and ``user:`` keys, merged.

        One dict as Google ADK shows a session's state: the conversation's own
        keys as they are, the app-wide keys prefixed ``app:``, the keys of the
        conversation's owner prefixed ``user:`` (read in one unit of work).
        A conversation not stored yet has only the app's keys, and those of
        ``user_id`` (default: the user this memory is bound to).

        Raises:
            EntryValidationError: A bad id.
            ConversationNotFoundError: The conversation is another user's (a
                bound memory: or it does not exist).
        """
        conversation_id = check_conversation_id(conversation_id)
        owner = self._acting_user(user_id)
        step = Transaction.read(read_state, conversation_id, owner)
        app, user, own = yield from self._as_owner(conversation_id, step)
        return merged_view(app, user, own)

    def _update_state(
        self,
        conversation_id: str,
        delta: Mapping[str, Any],
        *,
        remove: Iterable[str] = (),
        user_id: str | None = None,
    ) -> Operation[dict[str, Any]]:
        """Set (``delta``) and delete (``remove``) state keys in one unit of work.

        Keys are routed by prefix: ``app:`` keys change the state every
        conversation of the store shares, ``user:`` keys the state of the
        conversation's owner, other keys the conversation's own; ``temp:``
        keys are never stored, only returned by this call.  Each key is a row
        of its own, so concurrent updates of different keys never lose one
        another (of the same key, the last commit wins).  A missing
        conversation is created (for ``user_id``, default the user this memory
        is bound to), as :meth:`add_turn` would.  Everything is checked first:
        on a bad key or value nothing is written.

        Returns:
            The merged state after the update (as :meth:`get_state`), with this
            call's ``temp:`` keys.

        Raises:
            EntryValidationError: A bad id, key or value (not JSON), a key both
                set and removed, or ``user:`` keys for a conversation without
                an owner (nothing written).
            ConversationNotFoundError: The conversation is another user's.
        """
        conversation_id = check_conversation_id(conversation_id)
        checked = check_state_delta(delta, remove, name="delta")
        owner = self._acting_user(user_id)
        if not checked.writes:
            step = Transaction.read(_view, conversation_id, checked, owner)
            return (yield from self._as_owner(conversation_id, step))
        return (
            yield from retrying(Transaction.write(update_state, conversation_id, checked, owner))
        )
