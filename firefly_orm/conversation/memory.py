"""The :class:`ConversationMemory` class: validates inputs and runs the operations.

Each public method is defined once, as an operation method ``_<name>``
returning an :data:`~firefly_orm.bridges.steps.Operation` (validation, then
one of :mod:`firefly_orm.conversation.ops`); ``<name>`` and ``async_<name>``
are derived from it by :func:`~firefly_orm.bridges.steps.sync_method` and
:func:`~firefly_orm.bridges.steps.async_method`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

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
from firefly_orm.conversation.edits import (
    KEEP,
    TurnEdit,
    delete_turn,
    erase_user_entries,
    update_turn,
)
from firefly_orm.conversation.idempotency import check_idempotency_key, fingerprint
from firefly_orm.conversation.messages import estimate_turn
from firefly_orm.conversation.model import (
    AsyncSummarizer,
    ConversationTurn,
    Summarizer,
    check_conversation_id,
    check_int,
    check_metadata,
    check_text,
)
from firefly_orm.conversation.plan import HeadState, Limits
from firefly_orm.conversation.policies import (
    Observer,
    SummarizeEvent,
    TrimEvent,
    check_observer,
    make_limits,
    notify,
)
from firefly_orm.conversation.reads import (
    read_context,
    read_history,
    read_recent,
    read_recent_messages,
    read_user_conversations,
)
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
from firefly_orm.entry import validate_user_id
from firefly_orm.errors import EntryValidationError
from firefly_orm.store import InMemoryStore, MemoryStore
from firefly_orm.tokens import TokenEstimator

if TYPE_CHECKING:
    from firefly_orm.long_term.memory import LongTermMemory
    from firefly_orm.long_term.promotion import Promotion, Scorer

__all__ = ["ConversationMemory"]

logger = logging.getLogger("firefly_orm")

#: The configuration keys :meth:`ConversationMemory.to_dict` carries.
_CONFIG_KEYS = (
    "max_tokens",
    "summarize_threshold",
    "max_messages",
    "pin_count",
    "recent_count",
    "keep_evicted",
)


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
        max_messages: Keep at most this many model messages (a turn counts
            ``len(raw_messages)``, or 2 without raw messages), enforced with
            ``max_tokens`` when a turn is added and when history is read.
        pin_count: The first turns of a conversation are never evicted (they
            count against the limits; a configuration where they alone leave no
            room is refused).
        recent_count: When eviction starts, every unpinned turn but the newest
            ``recent_count`` is evicted (and summarized) at once.
        on_trim: Called with a :class:`~firefly_orm.conversation.TrimEvent`
            after a write that evicted turns has committed.
        on_summarize: Called with a :class:`~firefly_orm.conversation.SummarizeEvent`
            after a new summary has been committed.  Observers run outside the
            unit of work; what they raise is logged, never raised.
        long_term: Promote evicted turns to this
            :class:`~firefly_orm.long_term.LongTermMemory` (it must use the same
            store): each evicted turn is rated by ``promotion_scorer`` and those
            at or above ``importance_threshold`` become long-term items in the
            same unit of work as the eviction
            (:mod:`firefly_orm.long_term.promotion`).
        auto_promote: Set ``False`` to keep ``long_term`` without promoting.
        importance_threshold: The lowest score promoted (0.0-1.0).
        promotion_scorer: Rates an evicted turn, ``turn -> float`` (sync or
            async; called outside the unit of work like the summarizer); default
            :func:`~firefly_orm.long_term.promotion.default_scorer`.

    Token estimates cover what the model sees: the text of a turn's raw
    messages (prompts, answers, tool names, arguments and results) when it has
    some, one estimate per message, else ``"{user_prompt}\\n{assistant_response}"``.

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
        max_messages: int | None = None,
        pin_count: int = 0,
        recent_count: int = 0,
        on_trim: Observer | None = None,
        on_summarize: Observer | None = None,
        long_term: LongTermMemory | None = None,
        auto_promote: bool = True,
        importance_threshold: float | None = None,
        promotion_scorer: Scorer | None = None,
    ) -> None:
        if estimator is not None and not callable(getattr(estimator, "estimate", None)):
            raise TypeError("estimator must have an estimate(text) -> int method")
        if summarizer is not None and not (
            callable(summarizer) or isinstance(summarizer, AsyncSummarizer)
        ):
            raise TypeError("summarizer must be callable or have an async_summarize method")
        self._limits = make_limits(
            max_tokens=max_tokens,
            summarize_threshold=summarize_threshold,
            max_messages=max_messages,
            pin_count=pin_count,
            recent_count=recent_count,
        )
        self._on_trim = check_observer("on_trim", on_trim)
        self._on_summarize = check_observer("on_summarize", on_summarize)
        self._estimator = estimator if estimator is not None else TokenEstimator()
        self._summarizer = summarizer
        super().__init__(store if store is not None else InMemoryStore())
        self._long_term = long_term
        promotion = _promotion(
            self._store, long_term, auto_promote, importance_threshold, promotion_scorer
        )
        self._policy = ops.Policy(
            limits=self._limits, keep_evicted=bool(keep_evicted), promotion=promotion
        )

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
    def max_messages(self) -> int | None:
        """At most this many model messages (``None``: no limit)."""
        return self._limits.max_messages

    @property
    def pin_count(self) -> int:
        """How many of the first turns are never evicted."""
        return self._limits.pin_count

    @property
    def recent_count(self) -> int:
        """How many of the newest unpinned turns an eviction keeps at least."""
        return self._limits.recent_count

    @property
    def limits(self) -> Limits:
        """Every limit, as the planner takes them."""
        return self._limits

    def config(self) -> dict[str, Any]:
        """The configuration as a JSON-ready dict (what :meth:`to_dict` carries)."""
        return {name: getattr(self, name) for name in _CONFIG_KEYS}

    @property
    def long_term(self) -> LongTermMemory | None:
        """The long-term memory evicted turns are promoted to, or ``None``."""
        return self._long_term

    @property
    def promotion(self) -> Promotion | None:
        """How evicted turns are promoted (``None``: they are not)."""
        return self._policy.promotion

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
            f"keep_evicted={self.keep_evicted}, max_messages={self.max_messages}, "
            f"pin_count={self.pin_count}, recent_count={self.recent_count}, "
            f"store={self._store!r})"
        )

    # ------------------------------------------------------------------ operations
    def _new_conversation(self, *, user_id: str | None = None) -> Operation[str]:
        """Create an empty conversation and return its id (32 hex characters).

        ``user_id``: the user it belongs to (see :meth:`user_conversations`,
        :meth:`erase_user`); every row written for it is tagged with that user.
        """
        owner = None if user_id is None else validate_user_id(user_id)
        return ops.new_conversation(uuid.uuid4().hex, owner)

    def _add_turn(
        self,
        conversation_id: str,
        user_prompt: str,
        assistant_response: str,
        raw_messages: Sequence[Any] | None = None,
        *,
        metadata: Mapping[str, Any] | None = None,
        user_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> Operation[ConversationTurn]:
        """Add a turn (creating the conversation if needed), evicting as needed.

        ``user_id``: a new conversation belongs to that user; an existing one
        must already (else ``EntryValidationError``, nothing written).  After
        the commit the ``on_trim`` / ``on_summarize`` observers are told.
        With ``long_term``, evicted turns scored at or above the threshold are
        promoted in the same unit of work.

        ``idempotency_key``: makes the append exactly-once.  A retry with the
        same key (after an error that left you unsure whether the turn was
        stored, such as a connection lost after COMMIT) returns the turn
        already stored instead of adding another, for
        :data:`~firefly_orm.conversation.idempotency.IDEMPOTENCY_WINDOW` (a
        day); the same key with a different prompt, answer or raw messages
        raises ``EntryValidationError``.  Observers are told only once.

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
        owner = None if user_id is None else validate_user_id(user_id)
        key = check_idempotency_key(idempotency_key)
        encoded = encode_raw_messages(raw_messages)
        tokens, per_message = estimate_turn(self._estimator, prompt, response, encoded)
        turn = ConversationTurn(
            user_prompt=prompt,
            assistant_response=response,
            raw_messages=list(raw_messages or []),
            token_estimate=tokens,
            metadata=checked_metadata,
        )
        appended = yield from ops.add_turn(
            conversation_id,
            ops.EncodedTurn(
                turn,
                encoded,
                per_message,
                owner,
                key,
                None if key is None else fingerprint(prompt, response, encoded),
            ),
            self._policy,
            self._summarizer,
        )
        plan = appended.plan
        if plan is None:
            logger.debug(
                "conversation %r: turn %d was already added under idempotency key %r",
                conversation_id,
                appended.turn.turn_id,
                key,
            )
            return appended.turn
        if plan.evicted_turn_ids:
            evicted = plan.evicted_turns
            event = TrimEvent(
                conversation_id=conversation_id,
                reason=plan.reason or "max_tokens",
                evicted_turn_ids=plan.evicted_turn_ids,
                turns_removed=len(evicted),
                messages_removed=sum(t.message_count for t in evicted),
                turns_remaining=plan.turn_count,
                messages_remaining=plan.total_messages,
                tokens_remaining=plan.total_tokens,
                promoted_ids=appended.promoted_ids,
            )
            logger.debug("conversation %r trimmed: %s", conversation_id, event)
            yield from notify(self._on_trim, event)
        if appended.new_summary is not None:
            yield from notify(
                self._on_summarize,
                SummarizeEvent(conversation_id, appended.new_summary, plan.evicted_turn_ids),
            )
        return appended.turn

    def _get_message_history(self, conversation_id: str) -> Operation[list[Any]]:
        """The raw messages of the newest contiguous turns within the limits.

        Walks from the newest turn back and stops at the first turn that does not
        fit ``max_tokens`` (and ``max_messages``), then flattens the kept turns'
        ``raw_messages`` in chronological order; it never starts on a turn that
        opens with a tool result.  Unknown id -> ``[]``.  A newest turn larger
        than the budget gives ``[]`` (kept from the module this is modelled on).
        Neither the summary nor pinned turns are included: :meth:`get_context`
        gives what the next model call should get.
        """
        conversation_id = check_conversation_id(conversation_id)
        return (yield from Transaction.read(read_history, conversation_id, self._limits))

    def _get_context(self, conversation_id: str) -> Operation[list[Any]]:
        """What the next model call should get, within ``max_tokens`` and ``max_messages``.

        In order: the rolling summary (one message: a pydantic-ai
        ``SystemPromptPart`` request, or ``{"role": "system", ...}`` for dict
        messages) when it fits; the pinned turns (whole, while they fit); then
        the newest messages that fit, which may start inside a turn but never
        on a tool result whose call was cut, nor between a call and its result.
        Turns stored without raw messages become a prompt and an answer message
        in the same style.  Unknown id -> ``[]``.
        """
        conversation_id = check_conversation_id(conversation_id)
        return (
            yield from Transaction.read(
                read_context, conversation_id, self._limits, self._estimator
            )
        )

    def _get_recent(self, conversation_id: str, count: int) -> Operation[list[ConversationTurn]]:
        """The newest ``count`` retained turns, oldest first (one indexed read)."""
        conversation_id = check_conversation_id(conversation_id)
        count = check_int("count", count, 0)
        return (yield from Transaction.read(read_recent, conversation_id, count))

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
        return (yield from Transaction.read(read_recent_messages, conversation_id, count))

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
        never loses either change.  Use it to redact a message.

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
        )
        return (
            yield from update_turn(
                check_conversation_id(conversation_id),
                check_int("turn_id", turn_id, 0),
                edit,
                self._estimator,
            )
        )

    def _delete_turn(self, conversation_id: str, turn_id: int) -> Operation[bool]:
        """Delete one turn (retained or archived), keeping the head's totals exact.

        Returns:
            ``False`` when the conversation has no such turn.
        """
        return (
            yield from delete_turn(
                check_conversation_id(conversation_id), check_int("turn_id", turn_id, 0)
            )
        )

    def _user_conversations(
        self, user_id: str, *, limit: int | None = None, offset: int = 0
    ) -> Operation[list[str]]:
        """Ids of ``user_id``'s conversations, newest first, ``offset`` and ``limit`` paged.

        An indexed read on SQL and MongoDB (``user_id`` is indexed).
        """
        user_id = validate_user_id(user_id)
        limit = None if limit is None else check_int("limit", limit, 0)
        offset = check_int("offset", offset, 0)
        return (yield from Transaction.read(read_user_conversations, user_id, limit, offset))

    def _erase_user(self, user_id: str) -> Operation[None]:
        """Erase everything ``user_id`` left in the store, in one unit of work.

        Every row tagged with the user goes, in every namespace: their
        conversations, archives and summaries, and working-memory facts set
        for them (atomic on SQL; see the store's unit of work elsewhere).
        Other users' data is untouched.
        """
        user_id = validate_user_id(user_id)
        return (yield from Transaction.write(erase_user_entries, user_id))

    def _to_dict(self, conversation_id: str) -> Operation[dict[str, Any]]:
        """:meth:`export_conversation` plus ``"config"``: this memory's configuration."""
        exported = yield from self._export_conversation(conversation_id)
        return {**exported, "config": self.config()}

    @classmethod
    def _from_dict_parts(
        cls, data: Mapping[str, Any], options: Mapping[str, Any]
    ) -> ConversationMemory:
        config = data.get("config") or {}
        if not isinstance(config, Mapping) or not set(config) <= set(_CONFIG_KEYS):
            raise EntryValidationError("config", f"must be an object with keys {_CONFIG_KEYS}")
        return cls(**{**config, **options})

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, Any],
        *,
        conversation_id: str | None = None,
        **options: Any,
    ) -> ConversationMemory:
        """A memory configured as ``data["config"]`` says, with the conversation imported.

        ``options`` are constructor arguments (``store``, ``summarizer``,
        ``estimator``, observers) and win over the stored configuration.
        """
        memory = cls._from_dict_parts(data, options)
        memory.import_conversation(data, conversation_id=conversation_id)
        return memory

    @classmethod
    async def async_from_dict(
        cls,
        data: Mapping[str, Any],
        *,
        conversation_id: str | None = None,
        **options: Any,
    ) -> ConversationMemory:
        """Async twin of :meth:`from_dict`."""
        memory = cls._from_dict_parts(data, options)
        await memory.async_import_conversation(data, conversation_id=conversation_id)
        return memory

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
    get_context = sync_method(_get_context)
    get_recent = sync_method(_get_recent)
    get_recent_messages = sync_method(_get_recent_messages)
    update_turn = sync_method(_update_turn)
    delete_turn = sync_method(_delete_turn)
    user_conversations = sync_method(_user_conversations)
    erase_user = sync_method(_erase_user)
    to_dict = sync_method(_to_dict)

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
    async_get_context = async_method(_get_context)
    async_get_recent = async_method(_get_recent)
    async_get_recent_messages = async_method(_get_recent_messages)
    async_update_turn = async_method(_update_turn)
    async_delete_turn = async_method(_delete_turn)
    async_user_conversations = async_method(_user_conversations)
    async_erase_user = async_method(_erase_user)
    async_to_dict = async_method(_to_dict)

    @property
    def conversation_ids(self) -> list[str]:
        """Ids of the stored conversations, in creation order (reads the store)."""
        return run(self._store, self._conversation_ids())

    async def async_conversation_ids(self) -> list[str]:
        """Async twin of :attr:`conversation_ids`."""
        return await arun(self._store, self._conversation_ids())


def _promotion(
    store: MemoryStore,
    long_term: LongTermMemory | None,
    auto_promote: bool,
    threshold: float | None,
    scorer: Scorer | None,
) -> Promotion | None:
    """The promotion a :class:`ConversationMemory` is configured for (checked), or ``None``."""
    from firefly_orm.long_term.memory import LongTermMemory
    from firefly_orm.long_term.promotion import (
        DEFAULT_IMPORTANCE_THRESHOLD,
        Promotion,
        check_threshold,
        default_scorer,
    )

    checked = DEFAULT_IMPORTANCE_THRESHOLD if threshold is None else check_threshold(threshold)
    if scorer is not None and not callable(scorer):
        raise TypeError("promotion_scorer must be a callable taking a turn")
    if long_term is None or not auto_promote:
        return None
    if not isinstance(long_term, LongTermMemory):
        raise TypeError(f"long_term must be a LongTermMemory, got {type(long_term).__name__}")
    if long_term.store is not store:
        raise ValueError(
            "long_term must use the conversation's store (promotion writes in the "
            "same unit of work as the eviction)"
        )
    return Promotion(long_term, scorer if scorer is not None else default_scorer, checked)
