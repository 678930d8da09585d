"""A browser agent's memory (FlyBrowser's ``BrowserMemoryManager``) kept in a firefly_orm store.

FlyBrowser's browser agent remembers the pages it saw, how it moved between
them, the obstacles it met (cookie banners, login walls) and how it got past
them, the URLs it visited and free-form facts, and renders all of it for the
next prompt.  Upstream this lives in process memory and is lost when the
process ends.  :class:`BrowserMemoryManager` keeps the same API, but every
change is written to the working memory of a :class:`~firefly_orm.MemoryManager`
on any store, so a second process (another worker, a restart) on the same
SQLite file, PostgreSQL schema or MongoDB database resumes the session.

Layout in the store, for session ``S``:

* the working scope ``browser:S`` (namespace ``working:browser:S``; with a
  ``user_id``, that user's own namespace for the scope): one fact per reserved
  key (:data:`RESERVED_KEYS`) holding the browser state as JSON, and the
  agent's own facts (:meth:`BrowserMemoryManager.set_fact`) beside them,
  readable with ``MemoryManager(working_scope_id="browser:S").get_fact(...)``;
* ``browser-session:<that namespace>`` key ``session``: the id of the
  session's current conversation (the agent's runs are stored there as turns).

A session is named by its ``session_id`` and its ``user_id``: two users'
sessions with the same id are two sessions.

Each browser action is one unit of work: the keys it changes are read (locked
on PostgreSQL) and written together with version checks, and a lost race is
retried, so two processes writing one session lose no page and a failed write
leaves the session as it was.  The typed local cache (:class:`PageSnapshot`,
:class:`ObstacleInfo`, ...) is updated only after the commit; :meth:`load`
refreshes it from the store.  One object is not meant to be shared between
threads or concurrent tasks; give each its own (they may share a session).
"""

from __future__ import annotations

import copy
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from pydantic import TypeAdapter, ValidationError

from firefly_orm.bridges._steps import (
    MemoryLayer,
    Operation,
    Transaction,
    async_method,
    retrying,
    sync_method,
)
from firefly_orm.conversation._ops import clear_conversations, create_conversation
from firefly_orm.entry import MemoryEntry, MemoryScope, derived_entry_id, validate_entry
from firefly_orm.manager import MemoryManager
from firefly_orm.protocols import UnitOfWork
from firefly_orm.store import InMemoryStore, MemoryStore
from firefly_orm.working import read_facts

__all__ = [
    "CURRENT_PAGE",
    "EMPTY_PROMPT",
    "NAVIGATION_GRAPH",
    "OBSTACLE_CACHE",
    "PAGE_HISTORY",
    "RECENT_PAGES",
    "RESERVED_KEYS",
    "URL_WIDTH",
    "VISITED_URLS",
    "BrowserMemoryManager",
    "CurrentPage",
    "NavigationEdge",
    "ObstacleInfo",
    "PageSnapshot",
]

logger = logging.getLogger("firefly_orm.examples.browser_memory")

# --------------------------------------------------------------------------- keys

#: Every snapshot recorded, oldest first (a list of :class:`PageSnapshot` objects).
PAGE_HISTORY: Final = "page_history"
#: The distinct URLs visited, in first-visit order.
VISITED_URLS: Final = "visited_urls"
#: ``{"url", "title"}`` of the newest snapshot.
CURRENT_PAGE: Final = "current_page"
#: The moves between pages, as a list of :class:`NavigationEdge` objects.
NAVIGATION_GRAPH: Final = "navigation_graph"
#: ``[{"url", "obstacle_type", "resolution"}, ...]`` in first-seen order.
OBSTACLE_CACHE: Final = "obstacle_cache"
#: Keys holding the browser state; :meth:`BrowserMemoryManager.set_fact` refuses them.
RESERVED_KEYS: Final = frozenset(
    {PAGE_HISTORY, VISITED_URLS, CURRENT_PAGE, NAVIGATION_GRAPH, OBSTACLE_CACHE}
)

#: The key of the session row (in namespace ``browser-session:<working namespace>``).
SESSION_KEY: Final = "session"
#: How many of the newest pages the prompt's "Recent history" line shows.
RECENT_PAGES: Final = 5
#: How many characters of each URL (without its scheme) that line keeps.
URL_WIDTH: Final = 40
#: What :meth:`BrowserMemoryManager.format_for_prompt` says for an empty session.
EMPTY_PROMPT: Final = "No browser memory recorded yet."
#: The importance of the state entries (user facts take theirs from ``set_fact``).
STATE_IMPORTANCE: Final = 0.5


# --------------------------------------------------------------------------- typed values


@dataclass(frozen=True)
class PageSnapshot:
    """What the agent saw on one page.

    Attributes:
        url: The page's URL.
        title: The page's title.
        elements_summary: A short description of the page's interactive elements.
        timestamp: When it was recorded (seconds since the epoch).
    """

    url: str
    title: str
    elements_summary: str
    timestamp: float = 0.0


@dataclass(frozen=True)
class ObstacleInfo:
    """Something that blocked a page, and how the agent got past it."""

    obstacle_type: str
    resolution: str


@dataclass(frozen=True)
class NavigationEdge:
    """One move from a page to another (``method``: click, link, form, navigate...)."""

    from_url: str
    to_url: str
    method: str


@dataclass(frozen=True)
class CurrentPage:
    """The :data:`CURRENT_PAGE` value: the URL and title of the newest snapshot."""

    url: str
    title: str


@dataclass(frozen=True)
class _ObstacleRow:
    """How one :data:`OBSTACLE_CACHE` item is stored."""

    url: str
    obstacle_type: str
    resolution: str


@dataclass(frozen=True)
class _Codec:
    """How one reserved key's typed value is stored as JSON, and read back (checked)."""

    adapter: TypeAdapter[Any]
    empty: Callable[[], Any]
    load: Callable[[Any], Any] = lambda value: value
    dump: Callable[[Any], Any] = lambda value: value


def _obstacles_from_rows(rows: list[_ObstacleRow]) -> dict[str, ObstacleInfo]:
    return {row.url: ObstacleInfo(row.obstacle_type, row.resolution) for row in rows}


def _obstacles_to_rows(obstacles: dict[str, ObstacleInfo]) -> list[_ObstacleRow]:
    return [_ObstacleRow(url, **asdict(info)) for url, info in obstacles.items()]


_CODECS: Final[dict[str, _Codec]] = {
    PAGE_HISTORY: _Codec(TypeAdapter(list[PageSnapshot]), list),
    VISITED_URLS: _Codec(TypeAdapter(list[str]), list),
    CURRENT_PAGE: _Codec(TypeAdapter(CurrentPage | None), lambda: None),
    NAVIGATION_GRAPH: _Codec(TypeAdapter(list[NavigationEdge]), list),
    OBSTACLE_CACHE: _Codec(
        TypeAdapter(list[_ObstacleRow]), dict, _obstacles_from_rows, _obstacles_to_rows
    ),
}
assert set(_CODECS) == RESERVED_KEYS


def _decode(session_id: str, key: str, stored: Any) -> Any:
    """The typed value of ``key`` from its stored JSON (``None``: not stored yet).

    User facts come back as stored.  A reserved key holding something else than
    this module writes raises ``ValueError`` naming the key and the session.
    """
    codec = _CODECS.get(key)
    if codec is None:
        return stored
    if stored is None:
        return codec.empty()
    try:
        return codec.load(codec.adapter.validate_python(stored))
    except ValidationError as exc:
        raise ValueError(
            f"browser session {session_id!r}: the stored {key!r} is not browser state: {exc}"
        ) from exc


def _encode(key: str, value: Any) -> Any:
    """The JSON form of ``key``'s typed value (user facts are JSON already)."""
    codec = _CODECS.get(key)
    if codec is None:
        return value
    return codec.adapter.dump_python(codec.dump(value), mode="json")


def _text(name: str, value: Any, *, allow_empty: bool = False) -> str:
    """``value`` if it is a string (non-empty unless ``allow_empty``), else ``ValueError``."""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a str, got {type(value).__name__}")
    if not allow_empty and not value.strip():
        raise ValueError(f"{name} must not be empty")
    if "\x00" in value:
        raise ValueError(f"{name} must not contain NUL characters")
    return value


def _short_url(url: str) -> str:
    """``url`` without its scheme, cut to :data:`URL_WIDTH` characters (for the prompt)."""
    return url.split("//")[-1][:URL_WIDTH]


# --------------------------------------------------------------------------- where things live


@dataclass(frozen=True)
class _Session:
    """A session's place in the store and how its rows are built."""

    session_id: str
    scope_id: str
    #: The working-memory namespace of the state and the facts.
    namespace: str
    #: The namespace of the session row.
    session_namespace: str
    user_id: str | None

    def fact(self, key: str, value: Any, importance: float) -> MemoryEntry:
        """The working-memory entry of fact ``key`` (the row ``WorkingMemory.set`` writes)."""
        entry = MemoryEntry.from_dict(
            {
                "entry_id": derived_entry_id(self.namespace, key),
                "namespace": self.namespace,
                "scope": MemoryScope.WORKING,
                "key": key,
                "content": value,
                "importance": importance,
                "metadata": {"scope_id": self.scope_id},
                "user_id": self.user_id,
            }
        )
        return validate_entry(entry, self.namespace)

    def session_row(self, conversation_id: str) -> MemoryEntry:
        """The session row pointing at ``conversation_id``."""
        return MemoryEntry.from_dict(
            {
                "entry_id": derived_entry_id(self.session_namespace, SESSION_KEY),
                "namespace": self.session_namespace,
                "scope": MemoryScope.WORKING,
                "key": SESSION_KEY,
                "content": {"conversation_id": conversation_id},
                "metadata": {"session_id": self.session_id},
                "user_id": self.user_id,
            }
        )

    def conversation_of(self, row: MemoryEntry | None) -> str | None:
        """The conversation id a session row points at (``None``: no row)."""
        if row is None:
            return None
        content = row.content
        conversation_id = content.get("conversation_id") if isinstance(content, dict) else None
        if not isinstance(conversation_id, str) or not conversation_id:
            raise ValueError(f"browser session {self.session_id!r}: malformed session row")
        return conversation_id


# --------------------------------------------------------------------------- transactions
# Plain functions over one unit of work (the async path runs them through uow.run_sync).

#: A browser action: the stored values of the keys it reads (typed) -> the values to write.
Update = Callable[[dict[str, Any]], dict[str, Any]]


def _read_session(uow: UnitOfWork, session: _Session) -> tuple[str | None, list[tuple[str, Any]]]:
    """The session's conversation id (``None``: a new session) and its stored facts."""
    row = uow.entries.get_by_key(session.session_namespace, SESSION_KEY)
    return session.conversation_of(row), read_facts(uow, session.namespace)


def _start_session(uow: UnitOfWork, session: _Session) -> str:
    """Create the session's conversation and row, unless another writer just did."""
    row = uow.entries.get_by_key(session.session_namespace, SESSION_KEY, for_update=True)
    existing = session.conversation_of(row)
    if existing is not None:
        return existing
    conversation_id = uuid.uuid4().hex
    create_conversation(uow, conversation_id, session.user_id)
    uow.entries.save(
        session.session_namespace, session.session_row(conversation_id), expected_version=0
    )
    return conversation_id


def _reset_session(uow: UnitOfWork, session: _Session) -> str:
    """Empty the session and move it to a new conversation (the old one is removed)."""
    row = uow.entries.get_by_key(session.session_namespace, SESSION_KEY, for_update=True)
    old = session.conversation_of(row)
    uow.entries.clear(session.namespace)
    if old is not None:
        clear_conversations(uow, [old])
    conversation_id = uuid.uuid4().hex
    create_conversation(uow, conversation_id, session.user_id)
    uow.entries.save(
        session.session_namespace,
        session.session_row(conversation_id),
        expected_version=0 if row is None else row.version,
    )
    return conversation_id


def _apply(
    uow: UnitOfWork,
    session: _Session,
    reads: tuple[str, ...],
    update: Update,
    importance: float,
) -> dict[str, Any]:
    """Run one browser action: read ``reads`` (locked where the store can), write the update.

    Every key read is written back only if its version did not change (a
    ``ConcurrencyError`` otherwise, and the caller retries with fresh values).
    Returns the typed values written.
    """
    current: dict[str, Any] = {}
    versions: dict[str, int] = {}
    for key in reads:
        entry = uow.entries.get_by_key(session.namespace, key, for_update=True)
        versions[key] = 0 if entry is None else entry.version
        current[key] = _decode(session.session_id, key, None if entry is None else entry.content)
    changed = update(current)
    for key, value in changed.items():
        uow.entries.save(
            session.namespace,
            session.fact(key, _encode(key, value), importance),
            expected_version=versions.get(key),
        )
    return changed


# --------------------------------------------------------------------------- the actions


_PAGE_KEYS: Final = (PAGE_HISTORY, VISITED_URLS, CURRENT_PAGE)


def _add_page(snapshot: PageSnapshot) -> Update:
    def update(current: dict[str, Any]) -> dict[str, Any]:
        changed: dict[str, Any] = {
            PAGE_HISTORY: [*current[PAGE_HISTORY], snapshot],
            CURRENT_PAGE: CurrentPage(snapshot.url, snapshot.title),
        }
        if snapshot.url not in current[VISITED_URLS]:
            changed[VISITED_URLS] = [*current[VISITED_URLS], snapshot.url]
        return changed

    return update


def _add_edge(edge: NavigationEdge) -> Update:
    def update(current: dict[str, Any]) -> dict[str, Any]:
        return {NAVIGATION_GRAPH: [*current[NAVIGATION_GRAPH], edge]}

    return update


def _put_obstacle(url: str, info: ObstacleInfo) -> Update:
    def update(current: dict[str, Any]) -> dict[str, Any]:
        return {OBSTACLE_CACHE: {**current[OBSTACLE_CACHE], url: info}}

    return update


def _put_fact(key: str, value: Any) -> Update:
    def update(current: dict[str, Any]) -> dict[str, Any]:
        return {key: value}

    return update


def _both(first: Update, second: Update) -> Update:
    def update(current: dict[str, Any]) -> dict[str, Any]:
        return {**first(current), **second(current)}

    return update


# --------------------------------------------------------------------------- the cache


@dataclass
class _Cache:
    """The typed local copy of a session, as of this object's last load or write."""

    conversation_id: str
    #: Reserved key -> typed value.
    state: dict[str, Any] = field(
        default_factory=lambda: {key: codec.empty() for key, codec in _CODECS.items()}
    )
    #: The agent's facts, oldest write first (as the store lists them).
    facts: dict[str, Any] = field(default_factory=dict)

    def absorb(self, changed: Mapping[str, Any]) -> None:
        """Take the values a committed action wrote."""
        for key, value in changed.items():
            if key in RESERVED_KEYS:
                self.state[key] = value
            else:
                self.facts.pop(key, None)  # a re-set fact moves to the end, as in the store
                self.facts[key] = value

    @classmethod
    def loaded(cls, session_id: str, stored: Iterable[tuple[str, Any]]) -> _Cache:
        """The cache of a session read from the store (its conversation id set after)."""
        cache = cls("")
        for key, value in stored:
            if key in RESERVED_KEYS:
                cache.state[key] = _decode(session_id, key, value)
            else:
                cache.facts[key] = value
        return cache


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

    Nothing is read in the constructor: :meth:`open` / :meth:`async_open` (or
    :meth:`load` / :meth:`async_load`) resume the stored session, and the first
    write loads it too.  Reading before that raises ``RuntimeError``.

    Example:
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
    ) -> None:
        session_id = _text("session_id", session_id)
        super().__init__(store if store is not None else InMemoryStore())
        scope_id = f"browser:{session_id}"
        self._memory = MemoryManager(store=self._store, working_scope_id=scope_id, user_id=user_id)
        self._session = _Session(
            session_id=session_id,
            scope_id=scope_id,
            namespace=self._memory.working.namespace,
            session_namespace=f"browser-session:{self._memory.working.namespace}",
            user_id=user_id,
        )
        self._cache: _Cache | None = None

    @classmethod
    def open(
        cls, store: MemoryStore | None = None, *, session_id: str = "default", **kwargs: Any
    ) -> BrowserMemoryManager:
        """A manager with the stored session loaded (a new session is created)."""
        browser = cls(store=store, session_id=session_id, **kwargs)
        browser.load()
        return browser

    @classmethod
    async def async_open(
        cls, store: MemoryStore | None = None, *, session_id: str = "default", **kwargs: Any
    ) -> BrowserMemoryManager:
        """Async form of :meth:`open`."""
        browser = cls(store=store, session_id=session_id, **kwargs)
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

    def _loaded_cache(self) -> _Cache:
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
            value = _encode(key, cache.state[key])
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
            recent = " -> ".join(_short_url(page.url) for page in pages[-RECENT_PAGES:])
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
        conversation_id, stored = yield from Transaction.read(_read_session, session)
        cache = _Cache.loaded(session.session_id, stored)  # malformed state: before any write
        if conversation_id is None:
            conversation_id = yield from retrying(Transaction.write(_start_session, session))
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
            Transaction.write(_apply, self._session, reads, update, importance)
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
            _text("url", url),
            _text("title", title, allow_empty=True),
            _text("elements_summary", elements_summary, allow_empty=True),
            time.time(),
        )
        yield from self._write(_PAGE_KEYS, _add_page(snapshot))

    def _record_navigation(self, from_url: str, to_url: str, method: str) -> Operation[None]:
        """Record a move from ``from_url`` to ``to_url`` (``method``: click, link, form...).

        Raises:
            ValueError: An empty or non-str argument (nothing written).
        """
        edge = NavigationEdge(
            _text("from_url", from_url), _text("to_url", to_url), _text("method", method)
        )
        yield from self._write((NAVIGATION_GRAPH,), _add_edge(edge))

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
            _text("url", url),
            _text("title", title, allow_empty=True),
            _text("elements_summary", elements_summary, allow_empty=True),
            time.time(),
        )
        if from_url is None:
            yield from self._write(_PAGE_KEYS, _add_page(snapshot))
            return
        edge = NavigationEdge(_text("from_url", from_url), url, _text("method", method))
        update = _both(_add_page(snapshot), _add_edge(edge))
        yield from self._write((*_PAGE_KEYS, NAVIGATION_GRAPH), update)

    def _record_obstacle(self, url: str, obstacle_type: str, resolution: str) -> Operation[None]:
        """Remember that ``url`` shows ``obstacle_type`` and how it was resolved.

        A later call for the same URL replaces the entry (it keeps its place).

        Raises:
            ValueError: An empty or non-str argument (nothing written).
        """
        info = ObstacleInfo(_text("obstacle_type", obstacle_type), _text("resolution", resolution))
        yield from self._write((OBSTACLE_CACHE,), _put_obstacle(_text("url", url), info))

    def _set_fact(self, key: str, value: Any, *, importance: float = 0.5) -> Operation[None]:
        """Remember a fact (any JSON value) for the session; one upsert.

        Raises:
            ValueError: ``key`` is one of :data:`RESERVED_KEYS` (the browser
                state), empty or not a str; or ``value`` is not JSON, or
                ``importance`` is outside 0.0-1.0
                (:class:`~firefly_orm.EntryValidationError`).  Nothing is written.
        """
        key = _text("key", key)
        if key in RESERVED_KEYS:
            raise ValueError(
                f"{key!r} is reserved for the browser state; reserved keys: "
                f"{', '.join(sorted(RESERVED_KEYS))}"
            )
        self._session.fact(key, value, importance)  # refuses what cannot be stored
        value = json.loads(json.dumps(value))  # as it reads back (tuples become lists...)
        yield from self._write((), _put_fact(key, value), importance)

    def _clear(self) -> Operation[None]:
        """Empty this session and start it on a new conversation, in one unit of work.

        Removes the session's pages, moves, obstacles, visited URLs and facts
        and its conversation's turns; other sessions on the store are untouched.
        """
        session = self._session
        conversation_id = yield from retrying(Transaction.write(_reset_session, session))
        self._cache = _Cache(conversation_id)
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
