"""FlyBrowser's ``BrowserMemoryManager`` on a firefly_orm store (internal: the class)."""

from __future__ import annotations

import copy
import json
import logging
import time
from typing import Any

from firefly_orm.bridges._steps import (
    MemoryLayer,
    Operation,
    Transaction,
    async_method,
    retrying,
    sync_method,
)
from firefly_orm.compat.flybrowser._state import (
    EMPTY_PROMPT,
    NAVIGATION_GRAPH,
    OBSTACLE_CACHE,
    PAGE_HISTORY,
    PAGE_KEYS,
    RECENT_PAGES,
    RESERVED_KEYS,
    STATE_IMPORTANCE,
    VISITED_URLS,
    Cache,
    NavigationEdge,
    ObstacleInfo,
    PageSnapshot,
    Session,
    Update,
    add_edge,
    add_page,
    apply,
    both,
    check_text,
    encode,
    put_fact,
    put_obstacle,
    read_session,
    reset_session,
    short_url,
    start_session,
)
from firefly_orm.manager import MemoryManager
from firefly_orm.store import InMemoryStore, MemoryStore

__all__ = ["BrowserMemoryManager"]

logger = logging.getLogger("firefly_orm.compat.flybrowser")

# --------------------------------------------------------------------------- the manager


class BrowserMemoryManager(MemoryLayer):
    """A browser agent's pages, moves, obstacles, visited URLs and facts, kept in a store.

    The API of FlyBrowser's ``BrowserMemoryManager`` (``record_page_state``,
    ``record_navigation``, ``record_obstacle``, ``has_visited_url``,
    ``get_current_page``, ``set_fact``, ``get_fact``, ``format_for_prompt``,
    ``clear``, the ``page_history`` / ``navigation_graph`` / ``obstacle_cache``
    properties), each write with an ``async_`` twin, plus :meth:`record_visit`
    (a page and the move to it in one unit of work) and :meth:`load`.

    Args:
        store: Where the session lives; a new :class:`~firefly_orm.InMemoryStore`
            when ``None`` (nothing survives the process then).
        session_id: Names the browser session; every object (in any process)
            with the same store, ``session_id`` and ``user_id`` shares it.
        user_id: The user the session belongs to: its facts are the user's own
            working scope and its rows carry the user, so
            ``MemoryManager.erase_user`` removes them.
        load: Read (or start) the session now, as FlyBrowser's constructor
            does: :attr:`conversation_id` and every read work at once.  With
            ``load=False`` nothing is read: :meth:`load` / :meth:`async_load`
            (or the first write) do it, and a read before raises
            ``RuntimeError``.  In async code on a database store, prefer
            ``await BrowserMemoryManager.async_open(...)`` (the constructor's
            read is sync I/O).

    Example:
        >>> browser = BrowserMemoryManager()  # in memory, started at once
        >>> len(browser.conversation_id)
        32
        >>> browser = BrowserMemoryManager.open(session_id="docs")
        >>> browser.record_page_state("https://example.com/", "Example", "one link")
        >>> browser.has_visited_url("https://example.com/")
        True
        >>> print(browser.format_for_prompt())
        Current page: https://example.com/ - Example
        Page elements: one link
    """

    def __init__(
        self,
        *,
        store: MemoryStore | None = None,
        session_id: str = "default",
        user_id: str | None = None,
        load: bool = True,
    ) -> None:
        session_id = check_text("session_id", session_id)
        if not isinstance(load, bool):
            raise TypeError(f"load must be a bool, got {type(load).__name__}")
        super().__init__(store if store is not None else InMemoryStore())
        scope_id = f"browser:{session_id}"
        self._memory = MemoryManager(store=self._store, working_scope_id=scope_id, user_id=user_id)
        self._session = Session(
            session_id=session_id,
            scope_id=scope_id,
            namespace=self._memory.working.namespace,
            session_namespace=f"browser-session:{self._memory.working.namespace}",
            user_id=user_id,
        )
        self._cache: Cache | None = None
        if load:
            self.load()

    @classmethod
    def open(
        cls, store: MemoryStore | None = None, *, session_id: str = "default", **kwargs: Any
    ) -> BrowserMemoryManager:
        """A manager with the stored session loaded (a new session is created)."""
        return cls(store=store, session_id=session_id, **kwargs)

    @classmethod
    async def async_open(
        cls, store: MemoryStore | None = None, *, session_id: str = "default", **kwargs: Any
    ) -> BrowserMemoryManager:
        """Async form of :meth:`open` (the session is read with the async methods)."""
        browser = cls(store=store, session_id=session_id, load=False, **kwargs)
        await browser.async_load()
        return browser

    def __repr__(self) -> str:
        return (
            f"BrowserMemoryManager(session_id={self.session_id!r}, "
            f"store={type(self._store).__name__}, loaded={self.is_loaded})"
        )

    # ------------------------------------------------------------------ properties
    @property
    def session_id(self) -> str:
        """The browser session this object reads and writes."""
        return self._session.session_id

    @property
    def scope_id(self) -> str:
        """The working-memory scope of the session (``browser:<session_id>``)."""
        return self._session.scope_id

    @property
    def memory(self) -> MemoryManager:
        """The :class:`~firefly_orm.MemoryManager` of the session's scope (add turns here)."""
        return self._memory

    @property
    def is_loaded(self) -> bool:
        """Whether the session was read from the store (by a load or a write)."""
        return self._cache is not None

    def _loaded_cache(self) -> Cache:
        if self._cache is None:
            raise RuntimeError(
                f"browser session {self.session_id!r} is not loaded: call load() or "
                "await async_load() first (open() and async_open() do it)"
            )
        return self._cache

    @property
    def conversation_id(self) -> str:
        """The session's conversation (a new one after :meth:`clear`)."""
        return self._loaded_cache().conversation_id

    @property
    def page_history(self) -> list[PageSnapshot]:
        """Every snapshot recorded, oldest first (a copy)."""
        return list(self._loaded_cache().state[PAGE_HISTORY])

    @property
    def visited_urls(self) -> list[str]:
        """The distinct URLs visited, in first-visit order (a copy)."""
        return list(self._loaded_cache().state[VISITED_URLS])

    @property
    def navigation_edges(self) -> list[NavigationEdge]:
        """Every move recorded, oldest first, with its method (a copy)."""
        return list(self._loaded_cache().state[NAVIGATION_GRAPH])

    @property
    def navigation_graph(self) -> dict[str, list[str]]:
        """``{from_url: [to_url, ...]}``, as FlyBrowser exposes it (a copy)."""
        graph: dict[str, list[str]] = {}
        for edge in self.navigation_edges:
            graph.setdefault(edge.from_url, []).append(edge.to_url)
        return graph

    @property
    def obstacle_cache(self) -> dict[str, ObstacleInfo]:
        """``{url: ObstacleInfo}`` in first-seen order (a copy)."""
        return dict(self._loaded_cache().state[OBSTACLE_CACHE])

    @property
    def facts(self) -> dict[str, Any]:
        """The agent's facts (not the browser state), oldest write first (a copy)."""
        return copy.deepcopy(self._loaded_cache().facts)

    # ------------------------------------------------------------------ reads (the cache)
    def get_current_page(self) -> PageSnapshot | None:
        """The newest snapshot, or ``None``."""
        pages = self._loaded_cache().state[PAGE_HISTORY]
        return pages[-1] if pages else None

    def has_visited_url(self, url: str) -> bool:
        """Whether a snapshot of ``url`` was recorded."""
        return url in self._loaded_cache().state[VISITED_URLS]

    def get_obstacle(self, url: str) -> ObstacleInfo | None:
        """The obstacle known for ``url`` (and how to get past it), or ``None``."""
        info: ObstacleInfo | None = self._loaded_cache().state[OBSTACLE_CACHE].get(url)
        return info

    def get_fact(self, key: str, default: Any = None) -> Any:
        """A fact, or ``default``; a reserved key gives the browser state as stored (JSON)."""
        cache = self._loaded_cache()
        if key in RESERVED_KEYS:
            value = encode(key, cache.state[key])
            return default if value is None else value
        return copy.deepcopy(cache.facts.get(key, default))

    def format_for_prompt(self) -> str:
        """The session for the next prompt, in FlyBrowser's shape.

        One line each, present only when there is something to say: ``Current
        page: <url> - <title>``, ``Page elements: <summary>``, then with more
        than one snapshot ``Pages visited: <snapshots> (<distinct URLs> unique)``
        and ``Recent history: a -> b -> ...`` (the newest :data:`RECENT_PAGES`
        URLs without their scheme, cut to :data:`URL_WIDTH` characters), ``Known
        obstacles: <url>, <url>``, and ``Additional facts:`` followed by one
        ``- key: value`` line per fact of the agent (never the reserved keys).
        :data:`EMPTY_PROMPT` when there is nothing.
        """
        cache = self._loaded_cache()
        pages: list[PageSnapshot] = cache.state[PAGE_HISTORY]
        lines: list[str] = []
        if pages:
            current = pages[-1]
            lines.append(f"Current page: {current.url} - {current.title}")
            if current.elements_summary:
                lines.append(f"Page elements: {current.elements_summary}")
        if len(pages) > 1:
            unique = len(cache.state[VISITED_URLS])
            lines.append(f"Pages visited: {len(pages)} ({unique} unique)")
            recent = " -> ".join(short_url(page.url) for page in pages[-RECENT_PAGES:])
            lines.append(f"Recent history: {recent}")
        obstacles: dict[str, ObstacleInfo] = cache.state[OBSTACLE_CACHE]
        if obstacles:
            lines.append(f"Known obstacles: {', '.join(obstacles)}")
        if cache.facts:
            lines.append("Additional facts:")
            lines.extend(f"- {key}: {value}" for key, value in cache.facts.items())
        return "\n".join(lines) if lines else EMPTY_PROMPT

    # ------------------------------------------------------------------ operations
    def _load(self) -> Operation[None]:
        """Read the session from the store (creating it, with its conversation, if new)."""
        session = self._session
        conversation_id, stored = yield from Transaction.read(read_session, session)
        cache = Cache.loaded(session.session_id, stored)  # malformed state: before any write
        if conversation_id is None:
            conversation_id = yield from retrying(Transaction.write(start_session, session))
            logger.debug("browser session %r started", session.session_id)
        cache.conversation_id = conversation_id
        self._cache = cache

    def _write(
        self, reads: tuple[str, ...], update: Update, importance: float = STATE_IMPORTANCE
    ) -> Operation[None]:
        """Apply one action in one unit of work, then update the cache."""
        if self._cache is None:
            yield from self._load()
        changed = yield from retrying(
            Transaction.write(apply, self._session, reads, update, importance)
        )
        self._loaded_cache().absorb(changed)

    def _record_page_state(self, url: str, title: str, elements_summary: str) -> Operation[None]:
        """Record a snapshot of the page the browser shows (it becomes the current page).

        The snapshot, the visited URLs and the current page are written in one
        unit of work.

        Raises:
            ValueError: ``url`` empty or not a str, ``title`` / ``elements_summary``
                not a str (nothing written).
        """
        snapshot = PageSnapshot(
            check_text("url", url),
            check_text("title", title, allow_empty=True),
            check_text("elements_summary", elements_summary, allow_empty=True),
            time.time(),
        )
        yield from self._write(PAGE_KEYS, add_page(snapshot))

    def _record_navigation(self, from_url: str, to_url: str, method: str) -> Operation[None]:
        """Record a move from ``from_url`` to ``to_url`` (``method``: click, link, form...).

        Raises:
            ValueError: An empty or non-str argument (nothing written).
        """
        edge = NavigationEdge(
            check_text("from_url", from_url),
            check_text("to_url", to_url),
            check_text("method", method),
        )
        yield from self._write((NAVIGATION_GRAPH,), add_edge(edge))

    def _record_visit(
        self,
        url: str,
        title: str,
        elements_summary: str,
        *,
        from_url: str | None = None,
        method: str = "navigate",
    ) -> Operation[None]:
        """Record arriving on a page: its snapshot and, with ``from_url``, the move to it.

        Both are written in one unit of work (:meth:`record_navigation` then
        :meth:`record_page_state` would be two).

        Raises:
            ValueError: A bad argument (nothing written).
        """
        snapshot = PageSnapshot(
            check_text("url", url),
            check_text("title", title, allow_empty=True),
            check_text("elements_summary", elements_summary, allow_empty=True),
            time.time(),
        )
        if from_url is None:
            yield from self._write(PAGE_KEYS, add_page(snapshot))
            return
        edge = NavigationEdge(check_text("from_url", from_url), url, check_text("method", method))
        update = both(add_page(snapshot), add_edge(edge))
        yield from self._write((*PAGE_KEYS, NAVIGATION_GRAPH), update)

    def _record_obstacle(self, url: str, obstacle_type: str, resolution: str) -> Operation[None]:
        """Remember that ``url`` shows ``obstacle_type`` and how it was resolved.

        A later call for the same URL replaces the entry (it keeps its place).

        Raises:
            ValueError: An empty or non-str argument (nothing written).
        """
        info = ObstacleInfo(
            check_text("obstacle_type", obstacle_type), check_text("resolution", resolution)
        )
        yield from self._write((OBSTACLE_CACHE,), put_obstacle(check_text("url", url), info))

    def _set_fact(self, key: str, value: Any, *, importance: float = 0.5) -> Operation[None]:
        """Remember a fact (any JSON value) for the session; one upsert.

        Raises:
            ValueError: ``key`` is one of :data:`RESERVED_KEYS` (the browser
                state), empty or not a str; or ``value`` is not JSON, or
                ``importance`` is outside 0.0-1.0
                (:class:`~firefly_orm.EntryValidationError`).  Nothing is written.
        """
        key = check_text("key", key)
        if key in RESERVED_KEYS:
            raise ValueError(
                f"{key!r} is reserved for the browser state; reserved keys: "
                f"{', '.join(sorted(RESERVED_KEYS))}"
            )
        self._session.fact(key, value, importance)  # refuses what cannot be stored
        value = json.loads(json.dumps(value))  # as it reads back (tuples become lists...)
        yield from self._write((), put_fact(key, value), importance)

    def _clear(self) -> Operation[None]:
        """Empty this session and start it on a new conversation, in one unit of work.

        Removes the session's pages, moves, obstacles, visited URLs and facts
        and its conversation's turns; other sessions on the store are untouched.
        """
        session = self._session
        conversation_id = yield from retrying(Transaction.write(reset_session, session))
        self._cache = Cache(conversation_id)
        logger.debug("browser session %r cleared", session.session_id)

    # ------------------------------------------------------------------ public forms
    load = sync_method(_load)
    record_page_state = sync_method(_record_page_state)
    record_navigation = sync_method(_record_navigation)
    record_visit = sync_method(_record_visit)
    record_obstacle = sync_method(_record_obstacle)
    set_fact = sync_method(_set_fact)
    clear = sync_method(_clear)

    async_load = async_method(_load)
    async_record_page_state = async_method(_record_page_state)
    async_record_navigation = async_method(_record_navigation)
    async_record_visit = async_method(_record_visit)
    async_record_obstacle = async_method(_record_obstacle)
    async_set_fact = async_method(_set_fact)
    async_clear = async_method(_clear)
