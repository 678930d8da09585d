"""The :class:`ConversationMemory` class: validates inputs and runs the operations.

Each public method is defined once, as an operation method ``_<name>``
returning an :data:`~firefly_orm.bridges.steps.Operation` (validation, then
one of :mod:`firefly_orm.conversation.ops`); ``<name>`` and ``async_<name>``
are derived from it by :func:`~firefly_orm.bridges.steps.sync_method` and
:func:`~firefly_orm.bridges.steps.async_method`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from firefly_orm.bridges.steps import (
    MemoryLayer,
    Operation,
    Transaction,
    arun,
    async_method,
    run,
    sync_method,
)
from firefly_orm.conversation import ops
from firefly_orm.conversation.codec import encode_raw_messages
from firefly_orm.conversation.model import (
    AsyncSummarizer,
    ConversationTurn,
    Summarizer,
    check_conversation_id,
    check_int,
    check_metadata,
    check_text,
)
from firefly_orm.conversation.plan import HeadState
from firefly_orm.conversation.repair import (
    Inconsistency,
    repair_conversation,
    verify_conversation,
)
from firefly_orm.conversation.rows import archive_namespace, conversation_namespace
from firefly_orm.conversation.transfer import (
    import_conversations,
    parse_import,
    parse_imports,
    read_export,
)
from firefly_orm.store import InMemoryStore, MemoryStore
from firefly_orm.tokens import TokenEstimator

__all__ = ["ConversationMemory"]


class ConversationMemory(MemoryLayer):
    """Token-budgeted conversations, persisted through a store.

    Args:
        max_tokens: Token budget of a conversation (history and retained turns).
        summarize_threshold: Eviction happens only when the total exceeds both this
            and ``max_tokens``; it then trims down to ``max_tokens``.  (So a
            threshold below ``max_tokens`` changes nothing; a higher one lets the
            stored conversation grow to the threshold before trimming.)
        estimator: Counts the tokens of ``"{user_prompt}\\n{assistant_response}"``;
            default :class:`TokenEstimator`.
        summarizer: Called with the evicted turns (oldest first, preceded by the
            previous summary as a synthetic turn, see
            :func:`~firefly_orm.conversation.summary_input`); what it returns
            becomes :meth:`get_summary`.  Sync callable, async callable, or an
            object with ``async_summarize``.  Without one, evicted turns are
            dropped and the summary is left unchanged.
        store: Where conversations live; default a new :class:`InMemoryStore`.
        keep_evicted: Move evicted turns to ``conversation-archive:<id>`` (see
            :meth:`get_archived_turns`) instead of deleting them.

    Turn ids are unique and increasing within a conversation, also across
    evictions; :meth:`clear` forgets the conversation, so ids restart at 0.
    If the summarizer raises, :meth:`add_turn` raises that error and nothing is
    written (the turn is not added).  A new ``ConversationMemory`` over the same
    store resumes every conversation.  :meth:`verify` and :meth:`repair` check
    and rebuild a conversation's head from its stored turns (a safety net for
    stores whose writes are not atomic).
    """

    def __init__(
        self,
        *,
        max_tokens: int = 4096,
        summarize_threshold: int = 3072,
        estimator: TokenEstimator | None = None,
        summarizer: Summarizer | None = None,
        store: MemoryStore | None = None,
        keep_evicted: bool = False,
    ) -> None:
        if estimator is not None and not callable(getattr(estimator, "estimate", None)):
            raise TypeError("estimator must have an estimate(text) -> int method")
        if summarizer is not None and not (
            callable(summarizer) or isinstance(summarizer, AsyncSummarizer)
        ):
            raise TypeError("summarizer must be callable or have an async_summarize method")
        self._policy = ops.Policy(
            max_tokens=check_int("max_tokens", max_tokens, 1),
            summarize_threshold=check_int("summarize_threshold", summarize_threshold, 0),
            keep_evicted=bool(keep_evicted),
        )
        self._estimator = estimator if estimator is not None else TokenEstimator()
        self._summarizer = summarizer
        super().__init__(store if store is not None else InMemoryStore())

    # ------------------------------------------------------------------ settings
    @property
    def max_tokens(self) -> int:
        """Token budget of a conversation."""
        return self._policy.max_tokens

    @property
    def summarize_threshold(self) -> int:
        """Eviction only happens above this total (and above ``max_tokens``)."""
        return self._policy.summarize_threshold

    @property
    def keep_evicted(self) -> bool:
        """Whether evicted turns are archived instead of deleted."""
        return self._policy.keep_evicted

    @property
    def estimator(self) -> TokenEstimator:
        """The token estimator."""
        return self._estimator

    def __repr__(self) -> str:
        return (
            f"ConversationMemory(max_tokens={self.max_tokens}, "
            f"summarize_threshold={self.summarize_threshold}, "
            f"summarizer={'set' if self._summarizer is not None else None}, "
            f"keep_evicted={self.keep_evicted}, store={self._store!r})"
        )

    # ------------------------------------------------------------------ operations
    def _new_conversation(self) -> Operation[str]:
        """Create an empty conversation and return its id (32 hex characters)."""
        return ops.new_conversation(uuid.uuid4().hex)

    def _add_turn(
        self,
        conversation_id: str,
        user_prompt: str,
        assistant_response: str,
        raw_messages: Sequence[Any] | None = None,
        *,
        metadata: Mapping[str, Any] | None = None,
    ) -> Operation[ConversationTurn]:
        """Add a turn (creating the conversation if needed), evicting as needed.

        From async code (``async_add_turn``) an async summarizer is awaited and a
        sync one runs in a worker thread, so the event loop is not blocked.

        Returns:
            The stored turn, with its ``turn_id`` and ``token_estimate``.

        Raises:
            EntryValidationError: A bad id, prompt, response or metadata.
            TypeError: ``raw_messages`` cannot be stored (nothing is written).
            ConcurrencyError: Too much contention on this conversation.
        """
        conversation_id = check_conversation_id(conversation_id)
        prompt = check_text("user_prompt", user_prompt)
        response = check_text("assistant_response", assistant_response)
        checked_metadata = check_metadata(metadata)
        encoded = encode_raw_messages(raw_messages)
        turn = ConversationTurn(
            user_prompt=prompt,
            assistant_response=response,
            raw_messages=list(raw_messages or []),
            token_estimate=self._estimate(prompt, response),
            metadata=checked_metadata,
        )
        return ops.add_turn(
            conversation_id, ops.EncodedTurn(turn, encoded), self._policy, self._summarizer
        )

    def _get_message_history(self, conversation_id: str) -> Operation[list[Any]]:
        """The raw messages of the newest contiguous turns fitting ``max_tokens``.

        Walks from the newest turn back and stops at the first turn that does not
        fit, then flattens the kept turns' ``raw_messages`` in chronological
        order.  Unknown id -> ``[]``.  A newest turn larger than the budget gives
        ``[]`` (kept from the module this is modelled on).  The summary is not
        injected; read it with :meth:`get_summary`.
        """
        conversation_id = check_conversation_id(conversation_id)
        return (yield from Transaction.read(ops.read_history, conversation_id, self.max_tokens))

    def _get_turns(self, conversation_id: str) -> Operation[list[ConversationTurn]]:
        """Every retained turn, oldest first (unknown id -> ``[]``)."""
        namespace = conversation_namespace(check_conversation_id(conversation_id))
        return (yield from Transaction.read(ops.read_turns, namespace))

    def _get_archived_turns(self, conversation_id: str) -> Operation[list[ConversationTurn]]:
        """Turns evicted while ``keep_evicted`` was on, oldest first."""
        namespace = archive_namespace(check_conversation_id(conversation_id))
        return (yield from Transaction.read(ops.read_turns, namespace))

    def _get_total_tokens(self, conversation_id: str) -> Operation[int]:
        """Sum of the retained turns' token estimates (unknown id -> 0)."""
        head = yield from self._head(conversation_id)
        return head.total_tokens

    def _get_summary(self, conversation_id: str) -> Operation[str | None]:
        """The summary of the evicted turns, or ``None``."""
        head = yield from self._head(conversation_id)
        return head.summary

    def _clear(self, conversation_id: str) -> Operation[None]:
        """Forget a conversation: turns, archive, summary, head and index row."""
        conversation_id = check_conversation_id(conversation_id)
        return (yield from Transaction.write(ops.clear_conversations, [conversation_id]))

    def _clear_all(self) -> Operation[None]:
        """Forget every conversation of the store."""
        return (yield from Transaction.write(ops.clear_conversations, None))

    def _conversation_ids(self) -> Operation[list[str]]:
        return (yield from Transaction.read(ops.read_conversation_ids))

    def _export_conversation(self, conversation_id: str) -> Operation[dict[str, Any]]:
        """Export a conversation as a JSON-ready dict.

        Shape: ``{"conversation_id", "turns": [{"turn_id", "user_prompt",
        "assistant_response", "token_estimate", "metadata", "timestamp"}, ...],
        "summary", "total_tokens"}``.  A turn with raw messages also has a
        ``"raw_messages"`` key holding their portable JSON form, which
        :meth:`import_conversation` turns back into ``ModelMessage`` objects.
        Unknown id -> the same shape with no turns.
        """
        conversation_id = check_conversation_id(conversation_id)
        return (yield from Transaction.read(read_export, conversation_id))

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
        re-estimated.  No eviction happens on import; the next :meth:`add_turn`
        trims the conversation to the budget.  A large import refreshes the
        store's planner statistics once committed (as :meth:`import_conversations`).
        """
        parsed = parse_import(data, conversation_id, self._estimate)
        (cid,) = yield from import_conversations([parsed])
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
        :data:`~firefly_orm.conversation.transfer.ANALYZE_AFTER_ROWS` turns asks
        a SQL store to refresh its planner statistics (PostgreSQL ``ANALYZE``,
        see :meth:`SQLAlchemyStore.analyze <firefly_orm.sql.SQLAlchemyStore.analyze>`);
        that step never fails the import (a failure is logged as a warning).

        Returns:
            The conversation ids, in the order of ``items``.

        Raises:
            EntryValidationError: An invalid item (named by position and id).
        """
        parsed = parse_imports(list(items), conversation_id, self._estimate)
        return (yield from import_conversations(parsed))

    def _verify(self, conversation_id: str) -> Operation[list[Inconsistency]]:
        """Check a conversation's head against its stored turns; write nothing.

        Compares what the head caches (``turn_count``, ``total_tokens``,
        ``total_messages`` when it has one, a ``next_turn_id`` above every
        stored or archived turn id, its conversation id, a string-or-none
        summary) and the conversation's index row with the turns actually
        stored.  The head is read under the lock a writer takes, so on the SQL
        stores a concurrent :meth:`add_turn` is never reported; elsewhere a
        write in progress can show up (:meth:`repair` re-checks it safely).

        Returns:
            One :class:`~firefly_orm.conversation.repair.Inconsistency` per
            difference (``field``, ``found``, ``expected``); empty when the
            conversation is consistent.

        Raises:
            EntryValidationError: A bad id.
            NotFoundError: No such conversation in the store.
            StoreCorruptedError: A stored turn is unreadable.
        """
        return (yield from verify_conversation(check_conversation_id(conversation_id)))

    def _repair(self, conversation_id: str) -> Operation[list[Inconsistency]]:
        """Rebuild a conversation's head from its stored turns; return what changed.

        One unit of work: the head is recomputed from the turns (the summary
        text and a higher ``next_turn_id`` are kept, turn ids are never reused)
        and saved at the version read, like every writer (retried on a lost
        race), so it never overwrites a newer head; a missing index row is
        added (rebuilt rows keep the conversation's owner).  A consistent
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
        return (yield from repair_conversation(check_conversation_id(conversation_id)))

    def _head(self, conversation_id: str) -> Operation[HeadState]:
        return (yield from Transaction.read(ops.read_head, check_conversation_id(conversation_id)))

    def _estimate(self, user_prompt: str, assistant_response: str) -> int:
        return int(self._estimator.estimate(f"{user_prompt}\n{assistant_response}"))

    # ------------------------------------------------------------------ public forms
    new_conversation = sync_method(_new_conversation)
    add_turn = sync_method(_add_turn)
    get_message_history = sync_method(_get_message_history)
    get_turns = sync_method(_get_turns)
    get_archived_turns = sync_method(_get_archived_turns)
    get_total_tokens = sync_method(_get_total_tokens)
    get_summary = sync_method(_get_summary)
    clear = sync_method(_clear)
    clear_all = sync_method(_clear_all)
    export_conversation = sync_method(_export_conversation)
    import_conversation = sync_method(_import_conversation)
    import_conversations = sync_method(_import_conversations)
    verify = sync_method(_verify)
    repair = sync_method(_repair)

    async_new_conversation = async_method(_new_conversation)
    async_add_turn = async_method(_add_turn)
    async_get_message_history = async_method(_get_message_history)
    async_get_turns = async_method(_get_turns)
    async_get_archived_turns = async_method(_get_archived_turns)
    async_get_total_tokens = async_method(_get_total_tokens)
    async_get_summary = async_method(_get_summary)
    async_clear = async_method(_clear)
    async_clear_all = async_method(_clear_all)
    async_export_conversation = async_method(_export_conversation)
    async_import_conversation = async_method(_import_conversation)
    async_import_conversations = async_method(_import_conversations)
    async_verify = async_method(_verify)
    async_repair = async_method(_repair)

    @property
    def conversation_ids(self) -> list[str]:
        """Ids of the stored conversations, in creation order (reads the store)."""
        return run(self._store, self._conversation_ids())

    async def async_conversation_ids(self) -> list[str]:
        """Async twin of :attr:`conversation_ids`."""
        return await arun(self._store, self._conversation_ids())
