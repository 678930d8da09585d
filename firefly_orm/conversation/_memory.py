"""The :class:`ConversationMemory` class: validates inputs and runs the operations.

Each public method is defined once, as an operation method ``_<name>``
returning an :data:`~firefly_orm.bridges._steps.Operation` (validation, then
one of :mod:`firefly_orm.conversation._ops`); ``<name>`` and ``async_<name>``
are derived from it by :func:`~firefly_orm.bridges._steps.sync_method` and
:func:`~firefly_orm.bridges._steps.async_method`.

Here: the configuration, creating a conversation and adding a turn, and every
public form.  The other operation methods are in two internal bases: the reads
in :mod:`~firefly_orm.conversation._memory_reads`, the edits, erasure,
clearing, export/import and repair in
:mod:`~firefly_orm.conversation._memory_changes`.
"""

from __future__ import annotations

import copy
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from firefly_orm.bridges._release import SessionHold, released_before_callouts
from firefly_orm.bridges._steps import (
    Operation,
    arun,
    async_method,
    run,
    sync_method,
)
from firefly_orm.conversation import _ops as ops
from firefly_orm.conversation._codec import encode_raw_messages
from firefly_orm.conversation._idempotency import check_idempotency_key, fingerprint
from firefly_orm.conversation._memory_batch import ConversationBatches
from firefly_orm.conversation._memory_branch import ConversationBranches
from firefly_orm.conversation._memory_changes import ConversationChanges
from firefly_orm.conversation._memory_listing import ConversationListing
from firefly_orm.conversation._memory_reads import ConversationReads
from firefly_orm.conversation._memory_search import ConversationSearch, make_embedding
from firefly_orm.conversation._messages import estimate_turn
from firefly_orm.conversation._model import (
    AsyncSummarizer,
    ConversationTurn,
    Summarizer,
    check_conversation_id,
    check_metadata,
    check_text,
)
from firefly_orm.conversation._plan import Limits
from firefly_orm.conversation._policies import (
    Observer,
    check_observer,
    make_limits,
)
from firefly_orm.conversation._state import check_state_delta, with_state
from firefly_orm.conversation._state_layer import ConversationState
from firefly_orm.entry import validate_user_id
from firefly_orm.errors import EntryValidationError
from firefly_orm.store import InMemoryStore, MemoryStore
from firefly_orm.tokens import TokenEstimator

if TYPE_CHECKING:
    from firefly_orm.long_term._embedding import EmbedderLike
    from firefly_orm.long_term._memory import LongTermMemory
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
    "text_search",
)


class ConversationMemory(
    ConversationReads,
    ConversationChanges,
    ConversationBatches,
    ConversationBranches,
    ConversationListing,
    ConversationState,
):
    """Token-budgeted conversations, persisted through a store.

    Args:
        max_tokens: Token budget of a conversation (history and retained
            turns); ``None`` turns the token limit off (then only
            ``max_messages`` and ``summarize_threshold`` bound it).
        summarize_threshold: When the summed token estimates exceed it, the
            oldest turns are evicted (and summarised) down to it, whatever
            ``max_tokens`` is; a threshold above ``max_tokens`` lets the stored
            conversation grow to the threshold, then trims it to ``max_tokens``
            (eviction in batches).  ``None`` (the default) or ``0``: no
            threshold, turns are evicted above ``max_tokens``, down to it.
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
        user_id: Bind the memory to one user (``None``: unbound, an admin view
            of every conversation).  A bound memory serves that user only: the
            conversations it creates (by :meth:`new_conversation`,
            :meth:`add_turn` or an import) are the user's, and every read, write,
            edit, clear and export of a conversation that is missing or another
            user's raises :class:`~firefly_orm.errors.ConversationNotFoundError`
            (the same error, so ids cannot be probed), nothing written;
            :meth:`clear_all` clears the user's conversations only and a
            ``user_id`` argument naming someone else is refused.  Hand request
            handlers a bound memory (:meth:`for_user`).
        embedder: Find past turns by meaning too (:meth:`search_conversations`
            in ``"semantic"`` or ``"hybrid"`` mode): a pydantic-ai
            ``Embedder``, an ``EmbeddingModel`` or a model name.  Turns added
            by :meth:`add_turn` and :meth:`add_turns` are embedded before their
            unit of work opens (one embedding request per call, batched) and
            their vectors stored with them, on a store that keeps vectors
            (:mod:`firefly_orm.vector`).  Without one, turns are found by
            their words only.
        text_search: Index the text of the turns this memory writes (added,
            imported, copied, branched or edited) for :meth:`search_conversations`
            (the default).  ``False``: turn rows are written without
            ``search_text``, so the store spends nothing on its full-text
            index for them (SQLite's FTS5 tokenizing, PostgreSQL's ``tsvector``
            and GIN entries, MongoDB's word list): an append costs about what
            plain SQLAlchemy code writing the messages costs (see
            ``bench/README.md``), and no search finds those turns.  A turn this
            memory rewrites (an edit, a pop's remainder) leaves the index, and
            its vector goes with its ``search_text``, as always.  Turns already
            stored keep their entries until rewritten.  Not with an
            ``embedder``: a turn's vector is kept only while its
            ``search_text`` is, so vectors need indexed turns.

    Token estimates cover what the model sees: the text of a turn's raw
    messages (prompts, answers, tool names, arguments and results) when it has
    some, one estimate per message, else ``"{user_prompt}\\n{assistant_response}"``.

    Turn ids are unique and increasing within a conversation, also across
    evictions; :meth:`clear` forgets the conversation, so ids restart at 0.
    If the summarizer raises, :meth:`add_turn` raises that error and nothing is
    written (the turn is not added).  A new ``ConversationMemory`` over the same
    store resumes every conversation.  :meth:`verify` and :meth:`repair` check
    and rebuild a conversation's head from its stored turns (a safety net for
    stores whose writes are not atomic).  :meth:`branch` starts a new
    conversation from the turns up to one turn (editing an earlier message is
    ``branch`` + :meth:`add_turn`; :meth:`branches` / :meth:`parent_of` walk
    the tree), :meth:`rewind` drops the later turns (kept until
    :meth:`purge_rewound`) and :meth:`pop_turn` the newest, each in one unit of
    work that a concurrent append never interleaves with.  :meth:`get_state` /
    :meth:`update_state` keep a conversation's state in Google ADK's scopes
    (``app:``, ``user:``, the conversation's own keys; ``temp:`` never stored),
    and ``add_turn(..., state_delta=...)`` stores a change with the turn, all
    or nothing.
    """

    def __init__(
        self,
        *,
        max_tokens: int | None = 4096,
        summarize_threshold: int | None = None,
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
        user_id: str | None = None,
        embedder: EmbedderLike | None = None,
        text_search: bool = True,
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
        self._user_id = None if user_id is None else validate_user_id(user_id)
        self._embedding = make_embedding(embedder)
        self._long_term = long_term
        self._promotion = _promotion(
            self._store, long_term, auto_promote, importance_threshold, promotion_scorer
        )
        if not isinstance(text_search, bool):
            raise EntryValidationError("text_search", f"must be a bool, got {text_search!r}")
        if not text_search and self._embedding is not None:
            raise EntryValidationError(
                "text_search",
                "cannot be False with an embedder: a turn's vector is kept only while "
                "its search_text is",
            )
        self._policy = ops.Policy(
            limits=self._limits,
            keep_evicted=bool(keep_evicted),
            promotion=self._promotion,
            text_search=text_search,
        )

    # ------------------------------------------------------------------ settings
    @property
    def max_tokens(self) -> int | None:
        """Token budget of a conversation (``None``: no token limit)."""
        return self._policy.max_tokens

    @property
    def summarize_threshold(self) -> int | None:
        """Tokens evict above this total, down to it (``None`` or ``0``: above ``max_tokens``)."""
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
        """The configuration as a JSON-ready dict (what :meth:`to_dict` carries).

        ``"text_search"`` is there only when it is ``False`` (releases before it
        refuse the key, so a default memory's dict stays readable by them).
        """
        config = {name: getattr(self, name) for name in _CONFIG_KEYS}
        if config["text_search"]:
            del config["text_search"]
        return config

    @property
    def user_id(self) -> str | None:
        """The user this memory is bound to, or ``None`` (unbound: every conversation)."""
        return self._user_id

    def for_user(self, user_id: str) -> ConversationMemory:
        """This memory (same store and configuration) bound to ``user_id``.

        Raises:
            EntryValidationError: A bad ``user_id``, or this memory is bound to
                another user.
        """
        user_id = self._own_user(user_id)
        view = copy.copy(self)
        view._user_id = user_id
        return view

    @property
    def long_term(self) -> LongTermMemory | None:
        """The long-term memory evicted turns are promoted to, or ``None``."""
        return self._long_term

    @property
    def promotion(self) -> Promotion | None:
        """How evicted turns are promoted (``None``: they are not)."""
        return self._promotion

    @property
    def keep_evicted(self) -> bool:
        """Whether evicted turns are archived instead of deleted."""
        return self._policy.keep_evicted

    @property
    def text_search(self) -> bool:
        """Whether the turn rows this memory writes are in the store's full-text index."""
        return self._policy.text_search

    @property
    def estimator(self) -> TokenEstimator:
        """The token estimator."""
        return self._estimator

    def __repr__(self) -> str:
        return (
            f"ConversationMemory(max_tokens={self.max_tokens}, "
            f"summarize_threshold={self.summarize_threshold}, "
            f"summarizer={'set' if self._summarizer is not None else None}, "
            f"keep_evicted={self.keep_evicted}, text_search={self.text_search}, "
            f"max_messages={self.max_messages}, "
            f"pin_count={self.pin_count}, recent_count={self.recent_count}, "
            f"user_id={self._user_id!r}, store={self._store!r})"
        )

    # ------------------------------------------------------------------ operations
    def _new_conversation(self, *, user_id: str | None = None) -> Operation[str]:
        """Create an empty conversation and return its id (32 hex characters).

        ``user_id``: the user it belongs to (see :meth:`user_conversations`,
        :meth:`erase_user`); every row written for it is tagged with that user.
        Default: the user this memory is bound to.
        """
        owner = self._acting_user(user_id)
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
        state_delta: Mapping[str, Any] | None = None,
    ) -> Operation[ConversationTurn]:
        """Add a turn (creating the conversation if needed), evicting as needed.

        ``user_id`` (default: the user this memory is bound to): a new
        conversation belongs to that user; an existing one must already (else
        ``ConversationNotFoundError``, nothing written).  After
        the commit the ``on_trim`` / ``on_summarize`` observers are told.
        With ``long_term``, evicted turns scored at or above the threshold are
        promoted in the same unit of work.

        ``idempotency_key``: makes the append exactly-once.  A retry with the
        same key (after an error that left you unsure whether the turn was
        stored, such as a connection lost after COMMIT) returns the turn
        already stored instead of adding another, for
        :data:`~firefly_orm.conversation._idempotency.IDEMPOTENCY_WINDOW` (a
        day); the same key with a different prompt, answer or raw messages
        raises ``EntryValidationError``.  Observers are told only once.

        ``state_delta``: a state change stored in the turn's unit of work (see
        :meth:`update_state` for the scopes; ``temp:`` keys are dropped), so
        the turn and the state change commit together or not at all.  A retry
        with the same ``idempotency_key`` that finds the turn stored does not
        apply it again (a later change of the same keys stays).

        From async code (``async_add_turn``) an async summarizer is awaited and a
        sync one runs in a worker thread, so the event loop is not blocked.

        Returns:
            The stored turn, with its ``turn_id`` and ``token_estimate``.

        Raises:
            EntryValidationError: A bad id, prompt, response, metadata or
                state delta (nothing is written).
            ConversationNotFoundError: The conversation is another user's.
            TypeError: ``raw_messages`` cannot be stored (nothing is written).
            ConcurrencyError: Too much contention on this conversation.
        """
        conversation_id = check_conversation_id(conversation_id)
        prompt = check_text("user_prompt", user_prompt)
        response = check_text("assistant_response", assistant_response)
        checked_metadata = check_metadata(metadata)
        owner = self._acting_user(user_id)
        key = check_idempotency_key(idempotency_key)
        state = check_state_delta(state_delta)
        encoded = encode_raw_messages(raw_messages)
        tokens, per_message = estimate_turn(self._estimator, prompt, response, encoded)
        turn = ConversationTurn(
            user_prompt=prompt,
            assistant_response=response,
            raw_messages=list(raw_messages or []),
            token_estimate=tokens,
            metadata=checked_metadata,
        )
        (vector,) = yield from self._embed_turns([turn])  # before the unit of work opens
        appended = yield from released_before_callouts(  # no summarizer inside your transaction
            with_state(
                ops.add_turn(
                    conversation_id,
                    ops.EncodedTurn(
                        turn,
                        encoded,
                        per_message,
                        owner,
                        key,
                        None if key is None else fingerprint(prompt, response, encoded),
                        vector=vector,
                    ),
                    self._policy,
                    self._summarizer,
                ),
                conversation_id,
                state,
                owner,
                replayed=None if key is None else _replayed,
            ),
            SessionHold.of(self._store, warn=False),
        )
        if appended.plan is None:
            logger.debug(
                "conversation %r: turn %d was already added under idempotency key %r",
                conversation_id,
                appended.turn.turn_id,
                key,
            )
        yield from self._report(conversation_id, appended)
        return appended.turn

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

    # ------------------------------------------------------------------ public forms
    new_conversation = sync_method(_new_conversation)
    add_turn = sync_method(_add_turn)
    add_turns = sync_method(ConversationBatches._add_turns)
    add = sync_method(ConversationBatches._add)
    add_many = sync_method(ConversationBatches._add_many)
    get_message_history = sync_method(ConversationReads._get_message_history)
    get_turns = sync_method(ConversationReads._get_turns)
    get_archived_turns = sync_method(ConversationReads._get_archived_turns)
    get_total_tokens = sync_method(ConversationReads._get_total_tokens)
    get_summary = sync_method(ConversationReads._get_summary)
    clear = sync_method(ConversationChanges._clear)
    clear_all = sync_method(ConversationChanges._clear_all)
    export_conversation = sync_method(ConversationChanges._export_conversation)
    import_conversation = sync_method(ConversationChanges._import_conversation)
    copy_conversation = sync_method(ConversationChanges._copy_conversation)
    import_conversations = sync_method(ConversationChanges._import_conversations)
    verify = sync_method(ConversationChanges._verify)
    repair = sync_method(ConversationChanges._repair)
    get_context = sync_method(ConversationReads._get_context)
    get_recent = sync_method(ConversationReads._get_recent)
    get_recent_messages = sync_method(ConversationReads._get_recent_messages)
    update_turn = sync_method(ConversationChanges._update_turn)
    delete_turn = sync_method(ConversationChanges._delete_turn)
    user_conversations = sync_method(ConversationReads._user_conversations)
    erase_user = sync_method(ConversationChanges._erase_user)
    to_dict = sync_method(_to_dict)
    exists = sync_method(ConversationReads._exists)
    owner_of = sync_method(ConversationReads._owner_of)
    search_conversations = sync_method(ConversationSearch._search_conversations)
    branch = sync_method(ConversationBranches._branch)
    branches = sync_method(ConversationBranches._branches)
    parent_of = sync_method(ConversationBranches._parent_of)
    rewind = sync_method(ConversationBranches._rewind)
    get_rewound_turns = sync_method(ConversationBranches._get_rewound_turns)
    purge_rewound = sync_method(ConversationBranches._purge_rewound)
    pop_turn = sync_method(ConversationBranches._pop_turn)
    copy = sync_method(ConversationChanges._copy_conversation)
    conversation_info = sync_method(ConversationListing._conversation_info)
    update_conversation = sync_method(ConversationListing._update_conversation)
    generate_title = sync_method(ConversationListing._generate_title)
    list_conversations = sync_method(ConversationListing._list_conversations)
    usage_totals = sync_method(ConversationListing._usage_totals)
    get_state = sync_method(ConversationState._get_state)
    update_state = sync_method(ConversationState._update_state)

    async_new_conversation = async_method(_new_conversation)
    async_add_turn = async_method(_add_turn)
    async_add_turns = async_method(ConversationBatches._add_turns)
    async_add = async_method(ConversationBatches._add)
    async_add_many = async_method(ConversationBatches._add_many)
    async_get_message_history = async_method(ConversationReads._get_message_history)
    async_get_turns = async_method(ConversationReads._get_turns)
    async_get_archived_turns = async_method(ConversationReads._get_archived_turns)
    async_get_total_tokens = async_method(ConversationReads._get_total_tokens)
    async_get_summary = async_method(ConversationReads._get_summary)
    async_clear = async_method(ConversationChanges._clear)
    async_clear_all = async_method(ConversationChanges._clear_all)
    async_export_conversation = async_method(ConversationChanges._export_conversation)
    async_import_conversation = async_method(ConversationChanges._import_conversation)
    async_copy_conversation = async_method(ConversationChanges._copy_conversation)
    async_import_conversations = async_method(ConversationChanges._import_conversations)
    async_verify = async_method(ConversationChanges._verify)
    async_repair = async_method(ConversationChanges._repair)
    async_get_context = async_method(ConversationReads._get_context)
    async_get_recent = async_method(ConversationReads._get_recent)
    async_get_recent_messages = async_method(ConversationReads._get_recent_messages)
    async_update_turn = async_method(ConversationChanges._update_turn)
    async_delete_turn = async_method(ConversationChanges._delete_turn)
    async_user_conversations = async_method(ConversationReads._user_conversations)
    async_erase_user = async_method(ConversationChanges._erase_user)
    async_to_dict = async_method(_to_dict)
    async_exists = async_method(ConversationReads._exists)
    async_owner_of = async_method(ConversationReads._owner_of)
    async_conversation_info = async_method(ConversationListing._conversation_info)
    async_update_conversation = async_method(ConversationListing._update_conversation)
    async_generate_title = async_method(ConversationListing._generate_title)
    async_list_conversations = async_method(ConversationListing._list_conversations)
    async_usage_totals = async_method(ConversationListing._usage_totals)
    async_get_state = async_method(ConversationState._get_state)
    async_update_state = async_method(ConversationState._update_state)
    async_search_conversations = async_method(ConversationSearch._search_conversations)
    async_branch = async_method(ConversationBranches._branch)
    async_branches = async_method(ConversationBranches._branches)
    async_parent_of = async_method(ConversationBranches._parent_of)
    async_rewind = async_method(ConversationBranches._rewind)
    async_get_rewound_turns = async_method(ConversationBranches._get_rewound_turns)
    async_purge_rewound = async_method(ConversationBranches._purge_rewound)
    async_pop_turn = async_method(ConversationBranches._pop_turn)
    async_copy = async_method(ConversationChanges._copy_conversation)

    @property
    def conversation_ids(self) -> list[str]:
        """Ids of the stored conversations (bound: the user's), oldest first (reads the store)."""
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
    from firefly_orm.long_term._memory import LongTermMemory
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


def _replayed(appended: ops.Appended) -> bool:
    """Whether an append found its idempotency key's turn already stored (it wrote nothing)."""
    return appended.plan is None
