"""The conversation tree and listing of :class:`~firefly_orm.manager.MemoryManager`.

:class:`ManagerConversations` (a base of the manager) forwards branch, rewind,
pop and copy, the branch tree, the conversation list, usage totals and the
scoped state (:meth:`~ManagerConversations.get_state`,
:meth:`~ManagerConversations.update_state`) to the manager's
:class:`~firefly_orm.conversation.ConversationMemory` (bound to the manager's
user when the manager is).  A conversation the manager makes with
:meth:`~ManagerConversations.branch` or
:meth:`~ManagerConversations.copy_conversation` counts as one it started: a
fork's :meth:`~firefly_orm.manager.MemoryManager.clear_all` clears it.
"""

from __future__ import annotations

from firefly_orm.bridges._steps import MemoryLayer, Operation, async_method, delegate, sync_method
from firefly_orm.conversation import ConversationMemory

__all__ = ["ManagerConversations"]


def _conversation_of(manager: ManagerConversations) -> ConversationMemory:
    return manager._conversation


class ManagerConversations(MemoryLayer):
    """Branch, rewind, copy, the branch tree, the list, usage and state of the conversations."""

    _conversation: ConversationMemory

    def _record_started(self, conversation_id: str) -> str:
        """Remember a conversation this manager started (the manager defines it)."""
        raise NotImplementedError  # pragma: no cover - MemoryManager overrides it

    def _branch(
        self, conversation_id: str, at_turn: int, *, new_conversation_id: str | None = None
    ) -> Operation[str]:
        """Branch a conversation at a turn; return the new conversation's id.

        :meth:`ConversationMemory.branch <firefly_orm.conversation.ConversationMemory.branch>`
        on the manager's conversations; the branch counts as a conversation
        this manager started.  Editing an earlier user message is
        ``branch(cid, turn_id - 1)`` then :meth:`add_turn` on the branch.
        """
        target = yield from self._conversation._branch(
            conversation_id, at_turn, new_conversation_id=new_conversation_id
        )
        return self._record_started(target)

    def _copy_conversation(
        self, conversation_id: str, *, new_conversation_id: str | None = None
    ) -> Operation[str]:
        """Copy a conversation to a new id; return the new id.

        :meth:`ConversationMemory.copy_conversation
        <firefly_orm.conversation.ConversationMemory.copy_conversation>` on the
        manager's conversations; the copy counts as a conversation this
        manager started.
        """
        target = yield from self._conversation._copy_conversation(
            conversation_id, new_conversation_id=new_conversation_id
        )
        return self._record_started(target)

    _branches = delegate(ConversationMemory._branches, _conversation_of)
    _parent_of = delegate(ConversationMemory._parent_of, _conversation_of)
    _rewind = delegate(ConversationMemory._rewind, _conversation_of)
    _get_rewound_turns = delegate(ConversationMemory._get_rewound_turns, _conversation_of)
    _purge_rewound = delegate(ConversationMemory._purge_rewound, _conversation_of)
    _pop_turn = delegate(ConversationMemory._pop_turn, _conversation_of)
    _conversation_info = delegate(ConversationMemory._conversation_info, _conversation_of)
    _update_conversation = delegate(ConversationMemory._update_conversation, _conversation_of)
    _list_conversations = delegate(ConversationMemory._list_conversations, _conversation_of)
    _usage_totals = delegate(ConversationMemory._usage_totals, _conversation_of)
    # Scoped state (ADK's app:, user:, temp: and own keys); a state delta with a
    # turn is add_turn's state_delta= (forwarded with add_turn).
    _get_state = delegate(ConversationMemory._get_state, _conversation_of)
    _update_state = delegate(ConversationMemory._update_state, _conversation_of)

    branch = sync_method(_branch)
    copy_conversation = sync_method(_copy_conversation)
    branches = sync_method(_branches)
    parent_of = sync_method(_parent_of)
    rewind = sync_method(_rewind)
    get_rewound_turns = sync_method(_get_rewound_turns)
    purge_rewound = sync_method(_purge_rewound)
    pop_turn = sync_method(_pop_turn)
    conversation_info = sync_method(_conversation_info)
    update_conversation = sync_method(_update_conversation)
    list_conversations = sync_method(_list_conversations)
    usage_totals = sync_method(_usage_totals)
    get_state = sync_method(_get_state)
    update_state = sync_method(_update_state)

    async_branch = async_method(_branch)
    async_copy_conversation = async_method(_copy_conversation)
    async_branches = async_method(_branches)
    async_parent_of = async_method(_parent_of)
    async_rewind = async_method(_rewind)
    async_get_rewound_turns = async_method(_get_rewound_turns)
    async_purge_rewound = async_method(_purge_rewound)
    async_pop_turn = async_method(_pop_turn)
    async_conversation_info = async_method(_conversation_info)
    async_update_conversation = async_method(_update_conversation)
    async_list_conversations = async_method(_list_conversations)
    async_usage_totals = async_method(_usage_totals)
    async_get_state = async_method(_get_state)
    async_update_state = async_method(_update_state)
