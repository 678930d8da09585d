"""How :class:`~firefly_orm.conversation.ConversationMemory` changes and checks stored turns.

:class:`ConversationChanges` holds the operation methods besides adding a
turn: editing and deleting one turn (:mod:`~firefly_orm.conversation._edits`),
erasing a user, clearing, export and import
(:mod:`~firefly_orm.conversation._transfer`), verify and repair
(:mod:`~firefly_orm.conversation._repair`).  Each validates its arguments and
runs the operation of that module;
:class:`~firefly_orm.conversation.ConversationMemory` derives the public forms.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from firefly_orm.bridges._steps import Operation, Transaction, retrying
from firefly_orm.conversation import _ops as ops
from firefly_orm.conversation._codec import encode_raw_messages
from firefly_orm.conversation._edits import (
    KEEP,
    TurnEdit,
    delete_turn,
    erase_user_entries,
    update_turn,
)
from firefly_orm.conversation._memory_search import ConversationSearch
from firefly_orm.conversation._model import (
    ConversationTurn,
    check_conversation_id,
    check_int,
    check_metadata,
    check_text,
)
from firefly_orm.conversation._repair import (
    Inconsistency,
    repair_conversation,
    verify_conversation,
)
from firefly_orm.conversation._transfer import (
    copy_conversation,
    import_conversations,
    parse_import,
    parse_imports,
    read_export,
)
from firefly_orm.errors import EntryValidationError
from firefly_orm.tokens import TokenEstimator

__all__ = ["ConversationChanges"]


class ConversationChanges(ConversationSearch):
    """Edits, erasure, clearing, transfer and repair (a base of ``ConversationMemory``).

    Bound to a user, each of them refuses a conversation that is missing or
    another user's with :class:`~firefly_orm.errors.ConversationNotFoundError`,
    checked in the unit of work that changes it (imports may create
    conversations: they become the user's).
    """

    _estimator: TokenEstimator
    _policy: ops.Policy

    def _update_turn(
        self,
        conversation_id: str,
        turn_id: int,
        *,
        user_prompt: str | None = None,
        assistant_response: str | None = None,
        raw_messages: Any = KEEP,
        metadata: Mapping[str, Any] | None = None,
    ) -> Operation[ConversationTurn]:
        """Change one turn (retained or archived); its token estimate is redone.

        Arguments left out keep their value; ``raw_messages=None`` removes the
        raw messages.  The head's token and message totals move by the
        difference in the same unit of work, so a concurrent :meth:`add_turn`
        never loses either change.  Use it to redact a message.  With an
        ``embedder``, an edited prompt or answer is embedded before the unit of
        work opens and the turn's vector replaced with the turn.

        Raises:
            EntryValidationError: A bad id or value (nothing is written).
            NotFoundError: The conversation has no such turn.
        """
        edit = TurnEdit(
            user_prompt=None if user_prompt is None else check_text("user_prompt", user_prompt),
            assistant_response=(
                None
                if assistant_response is None
                else check_text("assistant_response", assistant_response)
            ),
            raw=KEEP if raw_messages is KEEP else encode_raw_messages(raw_messages),
            metadata=None if metadata is None else check_metadata(metadata),
            text_search=self._policy.text_search,
        )
        conversation_id = check_conversation_id(conversation_id)
        turn_id = check_int("turn_id", turn_id, 0)
        made = yield from self._edited_vector(
            conversation_id, turn_id, edit.user_prompt, edit.assistant_response
        )
        edit = edit if made is None else replace(edit, vector_text=made[0], vector=made[1])
        op = update_turn(conversation_id, turn_id, edit, self._estimator)
        return (yield from self._as_owner(conversation_id, op))

    def _delete_turn(self, conversation_id: str, turn_id: int) -> Operation[bool]:
        """Delete one turn (retained or archived), keeping the head's totals exact.

        Returns:
            ``False`` when the conversation has no such turn.
        """
        conversation_id = check_conversation_id(conversation_id)
        op = delete_turn(conversation_id, check_int("turn_id", turn_id, 0))
        return (yield from self._as_owner(conversation_id, op))

    def _erase_user(self, user_id: str) -> Operation[None]:
        """Erase everything ``user_id`` left in the store, in one unit of work.

        Every row tagged with the user goes, in every namespace: their
        conversations, archives and summaries, and working-memory facts set
        for them (atomic on SQL; see the store's unit of work elsewhere).
        Other users' data is untouched.  A memory bound to a user erases that
        user only (another ``user_id`` raises ``EntryValidationError``).
        """
        user_id = self._own_user(user_id)
        return (yield from Transaction.write(erase_user_entries, user_id))

    def _clear(self, conversation_id: str) -> Operation[None]:
        """Forget a conversation: turns, archive, summary, head and index row."""
        conversation_id = check_conversation_id(conversation_id)
        step = Transaction.write(ops.clear_conversations, [conversation_id])
        return (yield from self._as_owner(conversation_id, step))

    def _clear_all(self) -> Operation[None]:
        """Forget every conversation of the store (bound to a user: every one of theirs)."""
        return (yield from Transaction.write(ops.clear_conversations, None, self._user_id))

    def _copy_conversation(
        self, conversation_id: str, *, new_conversation_id: str | None = None
    ) -> Operation[str]:
        """Copy a conversation to a new id, in one unit of work; return the new id.

        The copy has the conversation's retained turns (ids, prompts, answers,
        raw messages, metadata, times), its summary and its own state keys, and
        the same owner; not its archive.  Writes to either one never reach the other.
        ``new_conversation_id``: the copy's id (default: a new one); a
        conversation there is replaced.

        Raises:
            EntryValidationError: A bad id.
            ConversationNotFoundError: No such conversation (bound to a user:
                or it is another user's).
        """
        conversation_id = check_conversation_id(conversation_id)
        target = check_conversation_id(
            uuid.uuid4().hex if new_conversation_id is None else new_conversation_id
        )
        if target == conversation_id:
            raise EntryValidationError("new_conversation_id", "must differ from conversation_id")
        step = Transaction.write(
            copy_conversation,
            conversation_id,
            target,
            self._estimate,
            text_search=self._policy.text_search,
        )
        yield from self._as_owner(conversation_id, retrying(step))
        return target

    def _export_conversation(self, conversation_id: str) -> Operation[dict[str, Any]]:
        """Export a conversation as a JSON-ready dict.

        Shape: ``{"conversation_id", "turns": [{"turn_id", "user_prompt",
        "assistant_response", "token_estimate", "metadata", "timestamp"}, ...],
        "summary", "total_tokens"}``.  A turn with raw messages also has a
        ``"raw_messages"`` key holding their portable JSON form, which
        :meth:`import_conversation` turns back into ``ModelMessage`` objects;
        a turn changed since it was added has ``"updated_at"``; a branch has
        ``"branch_of"`` (``conversation_id``, ``at_turn``, ``created_at``: what it
        was branched from; an import does not restore the link); ``"title"``,
        ``"tags"`` and ``"archived"`` appear when set.  Rewound and
        evicted turns (the archive) are not exported.
        Unknown id -> the same shape with no turns (bound to a user:
        ``ConversationNotFoundError``, as for another user's conversation).
        """
        conversation_id = check_conversation_id(conversation_id)
        step = Transaction.read(read_export, conversation_id)
        return (yield from self._as_owner(conversation_id, step))

    def _import_conversation(
        self, data: Mapping[str, Any], *, conversation_id: str | None = None
    ) -> Operation[str]:
        """Import a dict from :meth:`export_conversation`; return the conversation id.

        The id is ``conversation_id`` if given, else ``data["conversation_id"]``,
        else a new one.  The imported turns REPLACE the conversation's turns (and
        archive); the summary is replaced only when the import has one.  Missing
        turn fields default; ``turn_id`` defaults to the position, and ids that
        are not strictly increasing non-negative integers are renumbered
        0, 1, ... (a warning is logged).  A ``token_estimate <= 0`` is
        re-estimated.  ``title``, ``tags`` and ``archived`` are restored when
        the import has them (else the conversation keeps its own).  No eviction
        happens on import; the next :meth:`add_turn`
        trims the conversation to the budget.  A large import refreshes the
        store's planner statistics once committed (as :meth:`import_conversations`).
        Bound to a user, a new conversation becomes the user's and an existing
        one must be theirs (else ``ConversationNotFoundError``, nothing written).
        More than 500 turns (``IMPORT_BATCH_TURNS``) are written in units of
        work of 500, each leaving a consistent prefix of the import, so no
        transaction outlives a server's limit; after a failure, the same
        import run again resumes it (:meth:`import_conversations` stays one
        unit of work).
        """
        parsed = parse_import(data, conversation_id, self._estimate)
        (cid,) = yield from import_conversations(
            [parsed], self._user_id, batched=True, text_search=self._policy.text_search
        )
        return cid

    def _import_conversations(
        self, items: Sequence[Mapping[str, Any]], *, conversation_id: str | None = None
    ) -> Operation[list[str]]:
        """Import several dicts from :meth:`export_conversation`, all or nothing.

        Every item is validated (as by :meth:`import_conversation`) before
        anything is written, then all are written in one unit of work: a bad
        item or a failed write leaves every conversation as it was.
        ``conversation_id`` needs exactly one item; two items with the same id
        are refused.  Once committed, an import of at least
        :data:`~firefly_orm.conversation._transfer.ANALYZE_AFTER_ROWS` turns asks
        a SQL store to refresh its planner statistics (PostgreSQL ``ANALYZE``,
        see :meth:`SQLAlchemyStore.analyze <firefly_orm.sql.SQLAlchemyStore.analyze>`);
        that step never fails the import (a failure is logged as a warning).

        Returns:
            The conversation ids, in the order of ``items``.

        Raises:
            EntryValidationError: An invalid item (named by position and id).
        """
        parsed = parse_imports(list(items), conversation_id, self._estimate)
        return (
            yield from import_conversations(
                parsed, self._user_id, text_search=self._policy.text_search
            )
        )

    def _verify(self, conversation_id: str) -> Operation[list[Inconsistency]]:
        """Check a conversation's head against its stored turns; write nothing.

        Compares what the head caches (``turn_count``, ``total_tokens``,
        ``total_messages`` when it has one, a ``next_turn_id`` above every
        stored or archived turn id, its conversation id, a string-or-none
        summary) and the conversation's index row with the turns actually
        stored, and its branch links (``branch_of``: its parent lacks the row
        naming it; ``branches``: a row naming a branch that is gone).  The
        head is read under the lock a writer takes, so on the SQL stores a
        concurrent :meth:`add_turn` is never reported; elsewhere a write in
        progress can show up (:meth:`repair` re-checks it safely).

        Returns:
            One :class:`~firefly_orm.conversation._repair.Inconsistency` per
            difference (``field``, ``found``, ``expected``); empty when the
            conversation is consistent.

        Raises:
            EntryValidationError: A bad id.
            NotFoundError: No such conversation in the store.
            StoreCorruptedError: A stored turn is unreadable.
        """
        conversation_id = check_conversation_id(conversation_id)
        return (yield from self._as_owner(conversation_id, verify_conversation(conversation_id)))

    def _repair(self, conversation_id: str) -> Operation[list[Inconsistency]]:
        """Rebuild a conversation's head from its stored turns; return what changed.

        One unit of work: the head is recomputed from the turns (the summary
        text and a higher ``next_turn_id`` are kept, turn ids are never reused)
        and saved at the version read, like every writer (retried on a lost
        race), so it never overwrites a newer head; a missing index row is
        added (rebuilt rows keep the conversation's owner), and branch links
        are mended (the parent's missing row added, rows naming a gone branch
        deleted) without rewriting the head.  A consistent
        conversation is not written at all.  A change is logged at WARNING.
        On a store whose units of work are not atomic (MongoDB without
        transactions, a five-method store) run it while nobody writes to the
        conversation: a turn written there ahead of its head looks the same as
        a crash's leftover.

        Returns:
            The inconsistencies that were fixed (what :meth:`verify` reported);
            empty when nothing was changed.

        Raises:
            EntryValidationError: A bad id.
            NotFoundError: No such conversation in the store.
            StoreCorruptedError: A stored turn is unreadable (turns are never changed).
            ConcurrencyError: Too much contention on this conversation.
        """
        conversation_id = check_conversation_id(conversation_id)
        return (yield from self._as_owner(conversation_id, repair_conversation(conversation_id)))

    def _estimate(self, user_prompt: str, assistant_response: str) -> int:
        return int(self._estimator.estimate(f"{user_prompt}\n{assistant_response}"))
