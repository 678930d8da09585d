"""How :class:`~firefly_orm.conversation.ConversationMemory` branches, rewinds and pops.

:class:`ConversationBranches` holds the operation methods of the branch tree
(:mod:`~firefly_orm.conversation._branch`) and of rewinding and popping
(:mod:`~firefly_orm.conversation._rewind`); each validates its arguments and
runs one unit of work (retried on a lost race), checked against the bound
user's ownership in that same unit of work.
:class:`~firefly_orm.conversation.ConversationMemory` derives the public
forms (``branch`` / ``async_branch``...).
"""

from __future__ import annotations

import uuid

from firefly_orm.bridges._steps import Operation, Transaction
from firefly_orm.conversation._append import Policy
from firefly_orm.conversation._branch import BranchLink, read_branches, read_parent
from firefly_orm.conversation._branch import branch as branch_op
from firefly_orm.conversation._model import ConversationTurn, check_conversation_id, check_int
from firefly_orm.conversation._owner import OwnedLayer
from firefly_orm.conversation._rewind import (
    KeepPart,
    pop_turn,
    purge_rewound,
    read_rewound,
    rewind,
)
from firefly_orm.errors import EntryValidationError
from firefly_orm.tokens import TokenEstimator

__all__ = ["ConversationBranches"]


class ConversationBranches(OwnedLayer):
    """Branch, rewind, pop and the branch tree (a base of ``ConversationMemory``).

    Bound to a user, each refuses a conversation that is missing or another
    user's with :class:`~firefly_orm.errors.ConversationNotFoundError`.
    """

    _estimator: TokenEstimator
    _policy: Policy

    def _branch(
        self, conversation_id: str, at_turn: int, *, new_conversation_id: str | None = None
    ) -> Operation[str]:
        """Branch a conversation at a turn; return the new conversation's id.

        One unit of work: the new conversation holds copies of the retained
        turns up to and including ``at_turn`` (same ids, texts, raw messages,
        metadata and times; copies, so that every store works alike and
        neither side's later changes reach the other), its own head (totals
        recomputed from those turns, next turn id ``at_turn + 1``), the
        summary only when it covers no turn after ``at_turn`` (else none),
        and the same owner.  The tree is recorded: :meth:`parent_of` on the
        branch and :meth:`branches` on the conversation give the link.  The
        source is not changed; an append racing the branch is either in the
        source before the branch is read or after it (never half seen).

        Editing an earlier user message is ``branch(cid, turn_id - 1)`` then
        :meth:`add_turn` on the branch with the edited prompt (for turn 0,
        start a new conversation).

        Args:
            conversation_id: The conversation to branch.
            at_turn: A retained turn id of it: the branch's last turn.
            new_conversation_id: The branch's id (default: a new one); it must
                not name an existing conversation.

        Raises:
            EntryValidationError: A bad argument, or ``new_conversation_id``
                exists.
            ConversationNotFoundError: No such conversation (bound: or it is
                another user's).
            NotFoundError: ``at_turn`` is not a retained turn of it.
        """
        conversation_id = check_conversation_id(conversation_id)
        at_turn = check_int("at_turn", at_turn, 0)
        target = check_conversation_id(
            uuid.uuid4().hex if new_conversation_id is None else new_conversation_id
        )
        if target == conversation_id:
            raise EntryValidationError("new_conversation_id", "must differ from conversation_id")
        step = branch_op(conversation_id, target, at_turn, text_search=self._policy.text_search)
        yield from self._as_owner(conversation_id, step)
        return target

    def _branches(self, conversation_id: str) -> Operation[list[BranchLink]]:
        """The branches made from a conversation, oldest first.

        Each is a :class:`~firefly_orm.conversation.BranchLink`
        (``conversation_id``: the branch, ``parent_id``, ``at_turn``, ``created_at``).

        A branch that was cleared since is no longer listed; a branch made
        from a branch is listed under that branch (walk the tree with
        :meth:`branches` and :meth:`parent_of`).
        """
        conversation_id = check_conversation_id(conversation_id)
        step = Transaction.read(read_branches, conversation_id)
        return (yield from self._as_owner(conversation_id, step))

    def _parent_of(self, conversation_id: str) -> Operation[BranchLink | None]:
        """The :class:`~firefly_orm.conversation.BranchLink` of a branch to the conversation
        it was made from (``None``: not a branch).

        The parent may have been cleared since (the link stays, as the
        branch's history: :meth:`exists` tells).
        """
        conversation_id = check_conversation_id(conversation_id)
        step = Transaction.read(read_parent, conversation_id)
        return (yield from self._as_owner(conversation_id, step))

    def _rewind(self, conversation_id: str, to_turn: int) -> Operation[list[int]]:
        """Drop every retained turn after ``to_turn``, in one unit of work.

        The dropped turns move to the archive (``conversation-archive:<id>``)
        marked as rewound: :meth:`get_rewound_turns` reads them (they also
        show in :meth:`get_archived_turns`) until :meth:`purge_rewound`
        deletes them (:meth:`clear` and :meth:`erase_user` delete them too).
        The head's token, message and turn totals are recomputed from the
        turns kept; turn ids are not reused (the next turn gets the id it
        would have had).  ``to_turn=-1`` drops every turn.  An append racing
        the rewind is either rewound or kept whole, never lost nor doubled.

        Returns:
            The ids of the dropped turns, oldest first (``[]``: nothing after
            ``to_turn``, nothing written).

        Raises:
            EntryValidationError: A bad argument, or ``to_turn`` is before the
                last turn the summary covers (a summary is not split: branch
                instead).
            ConversationNotFoundError: No such conversation (bound: or it is
                another user's).
        """
        conversation_id = check_conversation_id(conversation_id)
        to_turn = check_int("to_turn", to_turn, -1)
        return (yield from self._as_owner(conversation_id, rewind(conversation_id, to_turn)))

    def _get_rewound_turns(self, conversation_id: str) -> Operation[list[ConversationTurn]]:
        """The turns :meth:`rewind` dropped and keeps until :meth:`purge_rewound`, oldest first."""
        conversation_id = check_conversation_id(conversation_id)
        step = Transaction.read(read_rewound, conversation_id)
        return (yield from self._as_owner(conversation_id, step))

    def _purge_rewound(self, conversation_id: str) -> Operation[int]:
        """Delete the turns rewinds kept (evicted turns stay archived); return how many."""
        conversation_id = check_conversation_id(conversation_id)
        return (yield from self._as_owner(conversation_id, purge_rewound(conversation_id)))

    def _pop_turn(
        self, conversation_id: str, *, keep: KeepPart | None = None
    ) -> Operation[ConversationTurn | None]:
        """Remove the newest retained turn in ONE unit of work; return it as it was.

        The undo of the last :meth:`add_turn`: the turn is deleted (not
        archived) and the head's totals move by its estimates.  Two pops
        racing each other (or an append) each take a different turn.

        Args:
            keep: Pop only part of the turn: ``keep(turn)`` returns the
                ``(user_prompt, assistant_response, raw_messages)`` the turn
                keeps (its estimate is redone), or ``None`` to remove it
                whole.  It runs inside the unit of work, maybe more than once
                (on a retry), so it must be a pure function of the turn (the
                OpenAI Agents session pops one item this way).

        Returns:
            The newest turn before the pop, ``None`` when there is none
            (unbound: also for a missing conversation).

        Raises:
            ConversationNotFoundError: Bound, and the conversation is missing
                or another user's.
        """
        conversation_id = check_conversation_id(conversation_id)
        if keep is not None and not callable(keep):
            raise TypeError("keep must be callable")
        op = pop_turn(conversation_id, keep, self._estimator, text_search=self._policy.text_search)
        return (yield from self._as_owner(conversation_id, op))
