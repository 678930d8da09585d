"""The facade agents use: :class:`MemoryManager`.

One manager holds a :class:`~firefly_orm.conversation.ConversationMemory`
(token-budgeted conversation turns), a
:class:`~firefly_orm.working.WorkingMemory` (facts of one scope) and a
:class:`~firefly_orm.long_term.LongTermMemory` (facts and events recalled by
what they say) over one store; :meth:`MemoryManager.assemble_context` puts
the three into one budgeted context for the next model call.

``fork(working_scope_id=...)`` gives a sub-agent its own facts while it shares
the store, the conversations and the long-term memory.  ``clear_all()`` on a fork is deliberately
narrower than on the manager it came from: the module this is modelled on let a
child wipe every conversation of its parent; here a fork clears its own working
scope and only the conversations it started itself (with
:meth:`MemoryManager.new_conversation`), never the shared long-term memory.
Clear a shared conversation explicitly with
:meth:`MemoryManager.clear_conversation`.

Each method is written once as an operation that composes the conversation's
and the working memory's operations (:mod:`firefly_orm.bridges._steps`); its
``async_`` twin is derived from the same operation.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from firefly_orm._manager_conversations import ManagerConversations
from firefly_orm.assemble import (
    AssembleRequest,
    ContextShares,
    assemble_request,
    with_query_vector,
)
from firefly_orm.assemble import assemble_context as assemble_transaction
from firefly_orm.bridges._steps import (
    Operation,
    Transaction,
    async_method,
    delegate,
    retrying,
    sync_method,
)
from firefly_orm.conversation import ConversationMemory, Summarizer
from firefly_orm.conversation._model import check_conversation_id
from firefly_orm.conversation._ops import clear_conversations
from firefly_orm.conversation._transfer import copy_conversation
from firefly_orm.entry import derived_entry_id, validate_user_id
from firefly_orm.entry._rules import check_bound_user
from firefly_orm.errors import EntryValidationError
from firefly_orm.long_term import DEFAULT_NAMESPACE, EPISODIC, LongTermMemory
from firefly_orm.long_term._recall import RecallMode
from firefly_orm.long_term._with_conversations import MemoryHit, recall_with_conversations
from firefly_orm.long_term.promotion import Scorer
from firefly_orm.protocols import UnitOfWork
from firefly_orm.store import InMemoryStore, MemoryStore
from firefly_orm.working import WorkingMemory

if TYPE_CHECKING:
    from firefly_orm.config import MemorySettings
    from firefly_orm.long_term._embedding import EmbedderLike

__all__ = ["MemoryManager"]


def _conversation_of(manager: MemoryManager) -> ConversationMemory:
    return manager.conversation


def _working_of(manager: MemoryManager) -> WorkingMemory:
    return manager.working


def _long_term_of(manager: MemoryManager) -> LongTermMemory:
    return manager.long_term


class MemoryManager(ManagerConversations):
    """Conversation, working and long-term memory behind one object.

    Args:
        store: The store of conversations and facts; a new
            :class:`~firefly_orm.store.InMemoryStore` when ``None``.
        max_conversation_tokens: Token budget of a conversation's history
            (``None``: no token limit).
        summarize_threshold: Token total above which the oldest turns are
            evicted and summarised, down to it (passed to
            :class:`~firefly_orm.conversation.ConversationMemory`); ``None``
            (the default) or ``0``: above ``max_conversation_tokens``.
        working_scope_id: Scope of this manager's facts (``working:<scope_id>``).
        summarizer: Called with the evicted turns to build a conversation's summary
            (e.g. :func:`~firefly_orm.summarization.create_llm_summarizer`).
        max_messages: Conversation policy: at most this many model messages (see
            :class:`~firefly_orm.conversation.ConversationMemory`).
        pin_count: Conversation policy: how many first turns are never evicted.
        recent_count: Conversation policy: how many of the newest turns an
            eviction keeps at least.
        user_id: The user this manager works for, and the only one it serves:
            its new conversations, its facts and its long-term items belong to
            that user (:meth:`erase_user` removes them all), and every read,
            write, edit, clear and export of a conversation that is missing or
            another user's raises
            :class:`~firefly_orm.errors.ConversationNotFoundError` (see
            ``ConversationMemory(user_id=...)``).  ``None``: an unbound (admin)
            manager with access to every conversation; hand request handlers a
            bound one (:meth:`for_user`).
        long_term_namespace: The ``namespace`` of :attr:`long_term` (the
            :class:`~firefly_orm.long_term.LongTermMemory`).
        long_term_limit: The ``long_term_limit`` of :attr:`long_term`.
        episodic_retention_days: The ``episodic_retention_days`` of :attr:`long_term`.
        search_language: The ``language`` of :attr:`long_term`.
        auto_promote: Promote evicted conversation turns to :attr:`long_term`
            (off by default; see ``ConversationMemory(long_term=...)``).
        importance_threshold: The lowest score promoted
            (:mod:`firefly_orm.long_term.promotion`).
        promotion_scorer: Rates an evicted turn for promotion.
        embedder: The ``embedder`` of :attr:`long_term` and :attr:`conversation`
            (semantic and hybrid recall and search of past conversations; a
            pydantic-ai ``Embedder``, ``EmbeddingModel`` or model name): each
            added turn is embedded too.
        conversation_text_search: The ``text_search`` of :attr:`conversation`:
            ``False`` writes turns without full-text index entries (cheaper
            appends; text search of past conversations does not find them).

    Example:
        >>> mgr = MemoryManager()
        >>> cid = mgr.new_conversation()
        >>> _ = mgr.add_turn(cid, "Hi, I'm Ada", "Hello Ada!")
        >>> mgr.set_fact("user_name", "Ada")
        >>> mgr.get_working_context()
        'Working Memory:\\n- user_name: Ada'
    """

    def __init__(
        self,
        *,
        store: MemoryStore | None = None,
        max_conversation_tokens: int | None = 128_000,
        summarize_threshold: int | None = None,
        working_scope_id: str = "default",
        summarizer: Summarizer | None = None,
        max_messages: int | None = None,
        pin_count: int = 0,
        recent_count: int = 0,
        user_id: str | None = None,
        long_term_namespace: str = DEFAULT_NAMESPACE,
        long_term_limit: int | None = None,
        episodic_retention_days: float | None = None,
        search_language: str | None = None,
        auto_promote: bool = False,
        importance_threshold: float | None = None,
        promotion_scorer: Scorer | None = None,
        embedder: EmbedderLike | None = None,
        conversation_text_search: bool = True,
    ) -> None:
        super().__init__(store if store is not None else InMemoryStore())
        self._user_id = None if user_id is None else validate_user_id(user_id)
        self._long_term = LongTermMemory(
            store=self._store,
            namespace=long_term_namespace,
            user_id=self._user_id,
            language=search_language,
            long_term_limit=long_term_limit,
            episodic_retention_days=episodic_retention_days,
            embedder=embedder,
        )
        self._conversation = ConversationMemory(
            max_tokens=max_conversation_tokens,
            summarize_threshold=summarize_threshold,
            summarizer=summarizer,
            store=self._store,
            max_messages=max_messages,
            pin_count=pin_count,
            recent_count=recent_count,
            long_term=self._long_term,
            auto_promote=auto_promote,
            importance_threshold=importance_threshold,
            promotion_scorer=promotion_scorer,
            user_id=self._user_id,
            embedder=embedder,
            text_search=conversation_text_search,
        )
        self._working = WorkingMemory(
            store=self._store, scope_id=working_scope_id, user_id=self._user_id
        )
        self._parent: MemoryManager | None = None
        self._started: set[str] = set()
        self._started_lock = threading.Lock()
        self._copies: dict[str, str] = {}

    # ------------------------------------------------------------------ configuration
    @classmethod
    def from_config(
        cls,
        settings: MemorySettings | None = None,
        *,
        working_scope_id: str = "default",
        summarizer: Summarizer | None = None,
    ) -> MemoryManager:
        """A manager configured from ``FIREFLY_AGENTIC_MEMORY_*`` environment variables.

        The environment is read when this is called (no cached settings).  The
        store is built and initialised by :func:`firefly_orm.config.build_store`;
        when ``FIREFLY_AGENTIC_MEMORY_SUMMARY_MODEL`` is set and no ``summarizer``
        is given, an LLM summarizer on that model is used.

        Args:
            settings: Use these instead of reading the environment.
            working_scope_id: Scope of the manager's facts.
            summarizer: Overrides the configured summarizer.

        Raises:
            firefly_orm.config.ConfigurationError: Unknown backend, missing URL,
                invalid value (the message names the variable).
            firefly_orm.errors.MissingExtraError: The backend's extra is missing.
            firefly_orm.errors.DatabaseConnectionError: The database failed to
                initialise.
        """
        from firefly_orm.config import build_store

        settings, summarizer = _settings_and_summarizer(settings, summarizer)
        return cls._configured(settings, build_store(settings), working_scope_id, summarizer)

    @classmethod
    async def async_from_config(
        cls,
        settings: MemorySettings | None = None,
        *,
        working_scope_id: str = "default",
        summarizer: Summarizer | None = None,
    ) -> MemoryManager:
        """Async form of :meth:`from_config` (initialises the store asynchronously)."""
        from firefly_orm.config import async_build_store

        settings, summarizer = _settings_and_summarizer(settings, summarizer)
        store = await async_build_store(settings)
        return cls._configured(settings, store, working_scope_id, summarizer)

    @classmethod
    def _configured(
        cls,
        settings: MemorySettings,
        store: MemoryStore,
        working_scope_id: str,
        summarizer: Summarizer | None,
    ) -> MemoryManager:
        return cls(
            store=store,
            max_conversation_tokens=settings.max_conversation_tokens,
            summarize_threshold=settings.summarize_threshold,
            working_scope_id=working_scope_id,
            summarizer=summarizer,
            max_messages=settings.max_messages,
            pin_count=settings.pin_count,
            recent_count=settings.recent_count,
            long_term_namespace=settings.long_term_namespace,
            long_term_limit=settings.long_term_limit,
            episodic_retention_days=settings.episodic_retention_days,
            search_language=settings.search_language,
            auto_promote=settings.auto_promote,
            importance_threshold=settings.importance_threshold,
            embedder=settings.embedding_model,
            conversation_text_search=settings.conversation_text_search,
        )

    # ------------------------------------------------------------------ properties
    @property
    def conversation(self) -> ConversationMemory:
        """The conversation memory (shared with forks)."""
        return self._conversation

    @property
    def working(self) -> WorkingMemory:
        """This manager's working memory."""
        return self._working

    @property
    def long_term(self) -> LongTermMemory:
        """The long-term memory (shared with forks; bound to the manager's ``user_id``)."""
        return self._long_term

    @property
    def parent(self) -> MemoryManager | None:
        """The manager this one was forked from, or ``None``."""
        return self._parent

    @property
    def is_fork(self) -> bool:
        """Whether this manager was made by :meth:`fork`."""
        return self._parent is not None

    def __repr__(self) -> str:
        return (
            f"MemoryManager(store={type(self._store).__name__}, "
            f"working_scope_id={self._working.scope_id!r}, fork={self.is_fork})"
        )

    # ------------------------------------------------------------------ fork
    def fork(self, *, working_scope_id: str) -> MemoryManager:
        """A manager with its own facts that shares this one's store, conversations
        and long-term memory.

        Facts are isolated both ways (unless ``working_scope_id`` is this
        manager's own scope).  The fork's :meth:`clear_all` clears its working
        scope and the conversations it started, never the shared ones nor the
        long-term memory.
        """
        child = object.__new__(type(self))
        child._store = self._store
        child._conversation = self._conversation
        child._long_term = self._long_term
        child._user_id = self._user_id
        child._working = WorkingMemory(
            store=self._store, scope_id=working_scope_id, user_id=self._user_id
        )
        child._parent = self
        child._started = set()
        child._started_lock = threading.Lock()
        child._copies = {}
        return child

    def for_user(self, user_id: str, *, working_scope_id: str | None = None) -> MemoryManager:
        """This manager for one user: the same store and conversations, that user's memory.

        A fork (its :meth:`clear_all` never clears shared conversations) whose
        new conversations belong to ``user_id``, whose facts are the user's own
        part of ``working_scope_id`` (default: this manager's scope; see
        :func:`~firefly_orm.working.working_namespace`) and whose long-term
        memory is this one's, bound to the user.

        Raises:
            EntryValidationError: A bad ``user_id``, or this manager is bound
                to another user.
        """
        user_id = check_bound_user(user_id, self._user_id, "manager")
        scope = self._working.scope_id if working_scope_id is None else working_scope_id
        view = self.fork(working_scope_id=scope)
        shared = self._long_term
        view._user_id = user_id
        view._conversation = self._conversation.for_user(user_id)
        view._working = WorkingMemory(store=self._store, scope_id=scope, user_id=user_id)
        view._long_term = LongTermMemory(
            store=self._store,
            namespace=shared.namespace,
            user_id=user_id,
            language=shared.language,
            long_term_limit=shared.long_term_limit,
            episodic_retention_days=shared.episodic_retention_days,
            embedder=shared.embedder,
        )
        return view

    @property
    def user_id(self) -> str | None:
        """The user this manager works for, or ``None``."""
        return self._user_id

    def _record_started(self, conversation_id: str) -> str:
        if self._parent is not None:
            with self._started_lock:
                self._started.add(conversation_id)
        return conversation_id

    def _started_ids(self) -> list[str]:
        with self._started_lock:
            return sorted(self._started)

    def _forget_started(self, conversation_id: str) -> None:
        with self._started_lock:
            self._started.discard(conversation_id)

    # ------------------------------------------------------------------ conversations
    def _new_conversation(self) -> Operation[str]:
        """Start a conversation and return its id."""
        conversation_id = yield from self._conversation._new_conversation(user_id=self._user_id)
        return self._record_started(conversation_id)

    _add_turn = delegate(ConversationMemory._add_turn, _conversation_of)
    _get_message_history = delegate(ConversationMemory._get_message_history, _conversation_of)
    _verify_conversation = delegate(ConversationMemory._verify, _conversation_of)
    _repair_conversation = delegate(ConversationMemory._repair, _conversation_of)
    _erase_user = delegate(ConversationMemory._erase_user, _conversation_of)
    _user_conversations = delegate(ConversationMemory._user_conversations, _conversation_of)
    _get_context = delegate(ConversationMemory._get_context, _conversation_of)
    _get_recent_messages = delegate(ConversationMemory._get_recent_messages, _conversation_of)
    _conversation_exists = delegate(ConversationMemory._exists, _conversation_of)
    _owner_of = delegate(ConversationMemory._owner_of, _conversation_of)

    def _clear_conversation(self, conversation_id: str) -> Operation[None]:
        """Remove one conversation (turns and summary)."""
        yield from self._conversation._clear(conversation_id)
        self._forget_started(conversation_id)

    # ------------------------------------------------------------------ long-term memory
    _remember = delegate(LongTermMemory._remember, _long_term_of)
    _recall = delegate(LongTermMemory._recall, _long_term_of)
    _forget = delegate(LongTermMemory._forget, _long_term_of)

    def _search_memory(
        self,
        query: str,
        *,
        limit: int = 5,
        mode: RecallMode | None = None,
        min_importance: float = 0.0,
        tags: Iterable[str] | None = None,
        kind: str | None = None,
        exclude_conversations: Iterable[str] | None = None,
    ) -> Operation[list[MemoryHit]]:
        """Recall over long-term items AND the user's past conversations, merged by rank:
        :class:`~firefly_orm.long_term.MemoryHit` items (an item or a turn, and the fused
        score), one read transaction (:mod:`firefly_orm.long_term._with_conversations`)."""
        return recall_with_conversations(
            self._long_term,
            self._conversation,
            query,
            limit=limit,
            mode=mode,
            min_importance=min_importance,
            tags=tags,
            kind=kind,
            exclude_conversations=exclude_conversations,
        )

    def _assemble_context(
        self,
        conversation_id: str,
        *,
        max_tokens: int | None = None,
        max_messages: int | None = None,
        query: str | None = None,
        recall_limit: int = 5,
        min_importance: float = 0.0,
        shares: ContextShares | None = None,
        style: str | None = None,
        past_turns: int = 0,
    ) -> Operation[list[Any]]:
        """One budgeted context for the next model call (:mod:`firefly_orm.assemble`).

        In order: the conversation's summary, the long-term items recalled for
        ``query`` (default: the latest stored user prompt; pass the prompt you
        are about to send), this manager's working-memory facts, then the
        pinned and newest turns, read in one unit of work.  Long-term items take
        at most ``shares.long_term`` of ``max_tokens`` and facts at most
        ``shares.working``; the conversation gets the rest.

        Args:
            conversation_id: The conversation.
            max_tokens: The budget (default: the conversation's ``max_tokens``);
                the total never exceeds it.
            max_messages: At most this many messages (default: the
                conversation's ``max_messages``).
            query: What to recall long-term items for.
            recall_limit: At most this many recalled items (0: none).
            min_importance: Leave out items less important than this.
            shares: The budget shares (default :class:`~firefly_orm.assemble.ContextShares`).
            style: ``"pydantic-ai"`` or ``"dict"`` messages (default: as the
                conversation's messages, dicts for an empty one).
            past_turns: At most this many turns of the user's earlier conversations
                matching ``query`` (0: none; hybrid search with an ``embedder``).

        Raises:
            EntryValidationError: A bad argument (nothing is read).
        """
        request = self._assemble_request(
            conversation_id,
            max_tokens=max_tokens,
            max_messages=max_messages,
            query=query,
            recall_limit=recall_limit,
            min_importance=min_importance,
            shares=shares,
            style=style,
            past_turns=past_turns,
        )
        request = yield from with_query_vector(self._conversation, request)
        step = Transaction.read(assemble_transaction, request)
        return (yield from self._conversation._as_owner(request.conversation_id, step))

    def _assemble_request(self, conversation_id: str, **options: Any) -> AssembleRequest:
        """The checked request of :meth:`assemble_context` (also what ``MemoryAgent`` reads
        with): :func:`firefly_orm.assemble.assemble_request` over this manager's layers."""
        layers = (self._conversation, self._long_term, self._working)
        return assemble_request(*layers, conversation_id, **options)

    # ------------------------------------------------------------------ facts
    _set_fact = delegate(WorkingMemory._set, _working_of)
    _get_fact = delegate(WorkingMemory._get, _working_of)
    _get_working_context = delegate(WorkingMemory._to_context_string, _working_of)
    _clear_working = delegate(WorkingMemory._clear, _working_of)

    def _clear_all(self) -> Operation[None]:
        """Clear this manager's memory.

        On a manager built directly (not a fork): every conversation, this
        manager's working scope and its long-term items (its user's, or every
        item of the namespace without a ``user_id``).  On a fork: its working
        scope and only the conversations it started with
        :meth:`new_conversation`; conversations and long-term items shared
        with its parent are kept.
        """
        if self._parent is None:
            yield from self._conversation._clear_all()
            yield from self._long_term._clear()
        else:
            for conversation_id in self._started_ids():
                yield from self._clear_conversation(conversation_id)
        yield from self._working._clear()

    def _reset(self) -> Operation[None]:
        """Clear short-term and episodic memory in ONE unit of work; keep long-term knowledge.

        Cleared: the conversations :meth:`clear_all` would clear (a manager
        built directly: every conversation, its user's when bound; a fork: the
        ones it started), this manager's working-memory facts, and the
        episodic long-term items (``kind="episodic"``) of its user (unbound:
        of every owner).  Kept: semantic long-term items and the daily logs.
        All or nothing: a failure leaves everything as it was.
        """
        conversations = None if self._parent is None else self._started_ids()
        long_term = self._long_term
        yield from retrying(
            Transaction.write(
                _reset_transaction,
                conversations,
                self._user_id,
                self._working.namespace,
                long_term.namespace,
                long_term.user_id,
            )
        )
        for conversation_id in conversations or ():
            self._forget_started(conversation_id)

    def _clone_for_isolation(
        self, *, conversation_id: str | None = None, working_scope_id: str | None = None
    ) -> Operation[MemoryManager]:
        """A fork whose writes do not reach this manager's short-term memory.

        In ONE unit of work: this manager's working-memory facts are copied to
        the clone's own scope (``working_scope_id``, default
        ``<scope>.isolated-<12 hex>``), and, with ``conversation_id``, that
        conversation's retained turns and summary are copied to a new
        conversation (:attr:`conversation_copies` maps the id to its copy's;
        the clone's :meth:`clear_all` clears the copy).  Shared on purpose:
        the store, the configuration and the long-term memory (what either
        remembers, both recall).

        Raises:
            ConversationNotFoundError: No such conversation (bound: or another user's).
        """
        checked = None if conversation_id is None else check_conversation_id(conversation_id)
        scope = working_scope_id or f"{self._working.scope_id}.isolated-{uuid.uuid4().hex[:12]}"
        clone = self.fork(working_scope_id=scope)
        if clone._working.namespace == self._working.namespace:
            raise EntryValidationError("working_scope_id", "must differ from this manager's")
        copy_id = None if checked is None else uuid.uuid4().hex
        step = Transaction.write(
            _clone_transaction,
            self._working.namespace,
            clone._working.namespace,
            checked,
            copy_id,
            self._conversation._estimate,
            self._conversation.text_search,
        )
        if checked is None:
            yield from retrying(step)
        else:
            yield from self._conversation._as_owner(checked, retrying(step))
        if checked is not None and copy_id is not None:
            clone._copies[checked] = clone._record_started(copy_id)
        return clone

    @property
    def conversation_copies(self) -> Mapping[str, str]:
        """Made by :meth:`clone_for_isolation`: original conversation id -> the copy's id."""
        return dict(self._copies)

    # ------------------------------------------------------------------ public forms
    new_conversation = sync_method(_new_conversation)
    add_turn = sync_method(_add_turn)
    get_message_history = sync_method(_get_message_history)
    clear_conversation = sync_method(_clear_conversation)
    verify_conversation = sync_method(_verify_conversation)
    repair_conversation = sync_method(_repair_conversation)
    erase_user = sync_method(_erase_user)
    user_conversations = sync_method(_user_conversations)
    get_context = sync_method(_get_context)
    get_recent_messages = sync_method(_get_recent_messages)
    assemble_context = sync_method(_assemble_context)
    conversation_exists = sync_method(_conversation_exists)
    owner_of = sync_method(_owner_of)
    remember = sync_method(_remember)
    recall = sync_method(_recall)
    search_memory = sync_method(_search_memory)
    forget = sync_method(_forget)
    set_fact = sync_method(_set_fact)
    get_fact = sync_method(_get_fact)
    get_working_context = sync_method(_get_working_context)
    clear_working = sync_method(_clear_working)
    clear_all = sync_method(_clear_all)
    reset = sync_method(_reset)
    clone_for_isolation = sync_method(_clone_for_isolation)

    async_new_conversation = async_method(_new_conversation)
    async_add_turn = async_method(_add_turn)
    async_get_message_history = async_method(_get_message_history)
    async_clear_conversation = async_method(_clear_conversation)
    async_verify_conversation = async_method(_verify_conversation)
    async_repair_conversation = async_method(_repair_conversation)
    async_erase_user = async_method(_erase_user)
    async_user_conversations = async_method(_user_conversations)
    async_get_context = async_method(_get_context)
    async_get_recent_messages = async_method(_get_recent_messages)
    async_assemble_context = async_method(_assemble_context)
    async_conversation_exists = async_method(_conversation_exists)
    async_owner_of = async_method(_owner_of)
    async_remember = async_method(_remember)
    async_recall = async_method(_recall)
    async_search_memory = async_method(_search_memory)
    async_forget = async_method(_forget)
    async_set_fact = async_method(_set_fact)
    async_get_fact = async_method(_get_fact)
    async_get_working_context = async_method(_get_working_context)
    async_clear_working = async_method(_clear_working)
    async_clear_all = async_method(_clear_all)
    async_reset = async_method(_reset)
    async_clone_for_isolation = async_method(_clone_for_isolation)


def _reset_transaction(
    uow: UnitOfWork,
    conversations: list[str] | None,
    user_id: str | None,
    working_namespace: str,
    long_term_namespace: str,
    long_term_owner: str | None,
) -> None:
    """:meth:`MemoryManager.reset`'s unit of work."""
    clear_conversations(uow, conversations, user_id)
    uow.entries.clear(working_namespace)
    items = uow.entries.list(long_term_namespace, user_id=long_term_owner)
    episodic = [
        e.entry_id
        for e in items
        if isinstance(e.content, Mapping) and e.content.get("kind") == EPISODIC
    ]
    if episodic:
        uow.entries.delete(long_term_namespace, episodic)


def _clone_transaction(
    uow: UnitOfWork,
    source_scope: str,
    target_scope: str,
    conversation_id: str | None,
    copy_id: str | None,
    estimate: Any,
    text_search: bool,
) -> None:
    """:meth:`MemoryManager.clone_for_isolation`'s unit of work: facts, then the conversation."""
    for fact in uow.entries.list(source_scope):
        if fact.key is not None:
            entry_id = derived_entry_id(target_scope, fact.key)
            uow.entries.save(
                target_scope, fact.copy_entry(namespace=target_scope, entry_id=entry_id)
            )
    if conversation_id is not None and copy_id is not None:
        copy_conversation(uow, conversation_id, copy_id, estimate, text_search=text_search)


def _settings_and_summarizer(
    settings: MemorySettings | None, summarizer: Summarizer | None
) -> tuple[MemorySettings, Summarizer | None]:
    """The settings (read from the environment when ``None``) and the summarizer to use."""
    from firefly_orm.config import load_settings

    settings = settings if settings is not None else load_settings()
    return settings, summarizer if summarizer is not None else _configured_summarizer(settings)


def _configured_summarizer(settings: MemorySettings) -> Summarizer | None:
    """An LLM summarizer when ``FIREFLY_AGENTIC_MEMORY_SUMMARY_MODEL`` is set."""
    if settings.summary_model is None:
        return None
    from firefly_orm.summarization import create_llm_summarizer

    return create_llm_summarizer(model=settings.summary_model)
