"""The facade agents use: :class:`MemoryManager`.

One manager holds a :class:`~firefly_orm.conversation.ConversationMemory`
(token-budgeted conversation turns) and a
:class:`~firefly_orm.working.WorkingMemory` (facts of one scope) over one store.

``fork(working_scope_id=...)`` gives a sub-agent its own facts while it shares
the store and the conversations.  ``clear_all()`` on a fork is deliberately
narrower than on the manager it came from: the module this is modelled on let a
child wipe every conversation of its parent; here a fork clears its own working
scope and only the conversations it started itself (with
:meth:`MemoryManager.new_conversation`).  Clear a shared conversation
explicitly with :meth:`MemoryManager.clear_conversation`.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from firefly_orm.conversation import ConversationMemory, Summarizer
from firefly_orm.store import InMemoryStore, MemoryStore
from firefly_orm.working import WorkingMemory

if TYPE_CHECKING:
    from firefly_orm.config import MemorySettings
    from firefly_orm.conversation import ConversationTurn

__all__ = ["MemoryManager"]


class MemoryManager:
    """Conversation memory plus working memory behind one object.

    Args:
        store: The store of conversations and facts; a new
            :class:`~firefly_orm.store.InMemoryStore` when ``None``.
        max_conversation_tokens: Token budget of a conversation's history.
        summarize_threshold: Token total above which evicted turns are summarised
            (passed to :class:`~firefly_orm.conversation.ConversationMemory`).
        working_scope_id: Scope of this manager's facts (``working:<scope_id>``).
        summarizer: Called with the evicted turns to build a conversation's summary
            (e.g. :func:`~firefly_orm.summarization.create_llm_summarizer`).

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
        max_conversation_tokens: int = 128_000,
        summarize_threshold: int = 10,
        working_scope_id: str = "default",
        summarizer: Summarizer | None = None,
    ) -> None:
        self._store: MemoryStore = store if store is not None else InMemoryStore()
        self._conversation = ConversationMemory(
            max_tokens=max_conversation_tokens,
            summarize_threshold=summarize_threshold,
            summarizer=summarizer,
            store=self._store,
        )
        self._working = WorkingMemory(store=self._store, scope_id=working_scope_id)
        self._parent: MemoryManager | None = None
        self._started: set[str] = set()
        self._started_lock = threading.Lock()

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
        from firefly_orm.config import build_store, load_settings

        settings = settings if settings is not None else load_settings()
        summarizer = summarizer if summarizer is not None else _configured_summarizer(settings)
        return cls(
            store=build_store(settings),
            max_conversation_tokens=settings.max_conversation_tokens,
            summarize_threshold=settings.summarize_threshold,
            working_scope_id=working_scope_id,
            summarizer=summarizer,
        )

    @classmethod
    async def async_from_config(
        cls,
        settings: MemorySettings | None = None,
        *,
        working_scope_id: str = "default",
        summarizer: Summarizer | None = None,
    ) -> MemoryManager:
        """Async form of :meth:`from_config` (initialises the store asynchronously)."""
        from firefly_orm.config import async_build_store, load_settings

        settings = settings if settings is not None else load_settings()
        summarizer = summarizer if summarizer is not None else _configured_summarizer(settings)
        return cls(
            store=await async_build_store(settings),
            max_conversation_tokens=settings.max_conversation_tokens,
            summarize_threshold=settings.summarize_threshold,
            working_scope_id=working_scope_id,
            summarizer=summarizer,
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
    def store(self) -> MemoryStore:
        """The store (shared with forks)."""
        return self._store

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
        """A manager with its own facts that shares this one's store and conversations.

        Facts are isolated both ways (unless ``working_scope_id`` is this
        manager's own scope).  The fork's :meth:`clear_all` clears its working
        scope and the conversations it started, never the shared ones.
        """
        child = object.__new__(type(self))
        child._store = self._store
        child._conversation = self._conversation
        child._working = WorkingMemory(store=self._store, scope_id=working_scope_id)
        child._parent = self
        child._started = set()
        child._started_lock = threading.Lock()
        return child

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
    def new_conversation(self) -> str:
        """Start a conversation and return its id."""
        return self._record_started(self._conversation.new_conversation())

    def add_turn(
        self,
        conversation_id: str,
        user_prompt: str,
        assistant_response: str,
        raw_messages: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> ConversationTurn:
        """Record one exchange (see ``ConversationMemory.add_turn``; ``metadata=`` passes on)."""
        return self._conversation.add_turn(
            conversation_id, user_prompt, assistant_response, raw_messages, **kwargs
        )

    def get_message_history(self, conversation_id: str) -> list[Any]:
        """The newest turns' messages that fit the token budget, oldest first."""
        return self._conversation.get_message_history(conversation_id)

    def clear_conversation(self, conversation_id: str) -> None:
        """Remove one conversation (turns and summary)."""
        self._conversation.clear(conversation_id)
        self._forget_started(conversation_id)

    # ------------------------------------------------------------------ facts
    def set_fact(self, key: str, value: Any, **kwargs: Any) -> None:
        """Set a fact in this manager's working memory (``importance=`` passes on)."""
        self._working.set(key, value, **kwargs)

    def get_fact(self, key: str, default: Any = None) -> Any:
        """A fact's value, or ``default``."""
        return self._working.get(key, default)

    def get_working_context(self) -> str:
        """The facts as a prompt string (``""`` when there are none)."""
        return self._working.to_context_string()

    def clear_working(self) -> None:
        """Remove every fact of this manager's scope."""
        self._working.clear()

    def clear_all(self) -> None:
        """Clear this manager's memory.

        On a manager built directly (not a fork): every conversation and this
        manager's working scope.  On a fork: its working scope and only the
        conversations it started with :meth:`new_conversation`; conversations
        shared with its parent are kept.
        """
        if self._parent is None:
            self._conversation.clear_all()
        else:
            for conversation_id in self._started_ids():
                self.clear_conversation(conversation_id)
        self._working.clear()

    # ------------------------------------------------------------------ async twins
    async def async_new_conversation(self) -> str:
        """Async twin of :meth:`new_conversation`."""
        method = getattr(self._conversation, "async_new_conversation", None)
        cid: str = await method() if method is not None else self._conversation.new_conversation()
        return self._record_started(cid)

    async def async_add_turn(
        self,
        conversation_id: str,
        user_prompt: str,
        assistant_response: str,
        raw_messages: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> ConversationTurn:
        """Async twin of :meth:`add_turn`."""
        return await self._conversation.async_add_turn(
            conversation_id, user_prompt, assistant_response, raw_messages, **kwargs
        )

    async def async_get_message_history(self, conversation_id: str) -> list[Any]:
        """Async twin of :meth:`get_message_history`."""
        return await self._conversation.async_get_message_history(conversation_id)

    async def async_clear_conversation(self, conversation_id: str) -> None:
        """Async twin of :meth:`clear_conversation`."""
        await self._conversation.async_clear(conversation_id)
        self._forget_started(conversation_id)

    async def async_set_fact(self, key: str, value: Any, **kwargs: Any) -> None:
        """Async twin of :meth:`set_fact`."""
        await self._working.async_set(key, value, **kwargs)

    async def async_get_fact(self, key: str, default: Any = None) -> Any:
        """Async twin of :meth:`get_fact`."""
        return await self._working.async_get(key, default)

    async def async_get_working_context(self) -> str:
        """Async twin of :meth:`get_working_context`."""
        return await self._working.async_to_context_string()

    async def async_clear_working(self) -> None:
        """Async twin of :meth:`clear_working`."""
        await self._working.async_clear()

    async def async_clear_all(self) -> None:
        """Async twin of :meth:`clear_all` (same fork rules)."""
        if self._parent is None:
            await self._conversation.async_clear_all()
        else:
            for conversation_id in self._started_ids():
                await self.async_clear_conversation(conversation_id)
        await self._working.async_clear()


def _configured_summarizer(settings: MemorySettings) -> Summarizer | None:
    """An LLM summarizer when ``FIREFLY_AGENTIC_MEMORY_SUMMARY_MODEL`` is set."""
    if settings.summary_model is None:
        return None
    from firefly_orm.summarization import create_llm_summarizer

    return create_llm_summarizer(model=settings.summary_model)
