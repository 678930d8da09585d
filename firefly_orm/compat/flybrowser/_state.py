"""The browser state's keys, typed values, row codecs and transactions (internal).

:class:`~firefly_orm.compat.flybrowser.BrowserMemoryManager` is built on these:
the reserved keys holding the state as JSON, the typed values
(:class:`PageSnapshot`, :class:`ObstacleInfo`, ...), one transaction per
action (:func:`apply`) and the local cache updated after each commit.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from pydantic import TypeAdapter, ValidationError

from firefly_orm.conversation._ops import clear_conversations, create_conversation
from firefly_orm.entry import MemoryEntry, MemoryScope, derived_entry_id, validate_entry
from firefly_orm.protocols import UnitOfWork
from firefly_orm.working import read_facts

__all__ = [
    "CURRENT_PAGE",
    "Cache",
    "CurrentPage",
    "EMPTY_PROMPT",
    "NAVIGATION_GRAPH",
    "NavigationEdge",
    "OBSTACLE_CACHE",
    "ObstacleInfo",
    "PAGE_HISTORY",
    "PAGE_KEYS",
    "PageSnapshot",
    "RECENT_PAGES",
    "RESERVED_KEYS",
    "SESSION_KEY",
    "STATE_IMPORTANCE",
    "Session",
    "URL_WIDTH",
    "Update",
    "VISITED_URLS",
    "add_edge",
    "add_page",
    "apply",
    "both",
    "check_text",
    "decode",
    "encode",
    "put_fact",
    "put_obstacle",
    "read_session",
    "reset_session",
    "short_url",
    "start_session",
]


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


def decode(session_id: str, key: str, stored: Any) -> Any:
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


def encode(key: str, value: Any) -> Any:
    """The JSON form of ``key``'s typed value (user facts are JSON already)."""
    codec = _CODECS.get(key)
    if codec is None:
        return value
    return codec.adapter.dump_python(codec.dump(value), mode="json")


def check_text(name: str, value: Any, *, allow_empty: bool = False) -> str:
    """``value`` if it is a string (non-empty unless ``allow_empty``), else ``ValueError``."""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a str, got {type(value).__name__}")
    if not allow_empty and not value.strip():
        raise ValueError(f"{name} must not be empty")
    if "\x00" in value:
        raise ValueError(f"{name} must not contain NUL characters")
    return value


def short_url(url: str) -> str:
    """``url`` without its scheme, cut to :data:`URL_WIDTH` characters (for the prompt)."""
    return url.split("//")[-1][:URL_WIDTH]


# --------------------------------------------------------------------------- where things live


@dataclass(frozen=True)
class Session:
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


def read_session(uow: UnitOfWork, session: Session) -> tuple[str | None, list[tuple[str, Any]]]:
    """The session's conversation id (``None``: a new session) and its stored facts."""
    row = uow.entries.get_by_key(session.session_namespace, SESSION_KEY)
    return session.conversation_of(row), read_facts(uow, session.namespace)


def start_session(uow: UnitOfWork, session: Session) -> str:
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


def reset_session(uow: UnitOfWork, session: Session) -> str:
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


def apply(
    uow: UnitOfWork,
    session: Session,
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
        current[key] = decode(session.session_id, key, None if entry is None else entry.content)
    changed = update(current)
    for key, value in changed.items():
        uow.entries.save(
            session.namespace,
            session.fact(key, encode(key, value), importance),
            expected_version=versions.get(key),
        )
    return changed


# --------------------------------------------------------------------------- the actions


PAGE_KEYS: Final = (PAGE_HISTORY, VISITED_URLS, CURRENT_PAGE)


def add_page(snapshot: PageSnapshot) -> Update:
    def update(current: dict[str, Any]) -> dict[str, Any]:
        changed: dict[str, Any] = {
            PAGE_HISTORY: [*current[PAGE_HISTORY], snapshot],
            CURRENT_PAGE: CurrentPage(snapshot.url, snapshot.title),
        }
        if snapshot.url not in current[VISITED_URLS]:
            changed[VISITED_URLS] = [*current[VISITED_URLS], snapshot.url]
        return changed

    return update


def add_edge(edge: NavigationEdge) -> Update:
    def update(current: dict[str, Any]) -> dict[str, Any]:
        return {NAVIGATION_GRAPH: [*current[NAVIGATION_GRAPH], edge]}

    return update


def put_obstacle(url: str, info: ObstacleInfo) -> Update:
    def update(current: dict[str, Any]) -> dict[str, Any]:
        return {OBSTACLE_CACHE: {**current[OBSTACLE_CACHE], url: info}}

    return update


def put_fact(key: str, value: Any) -> Update:
    def update(current: dict[str, Any]) -> dict[str, Any]:
        return {key: value}

    return update


def both(first: Update, second: Update) -> Update:
    def update(current: dict[str, Any]) -> dict[str, Any]:
        return {**first(current), **second(current)}

    return update


# --------------------------------------------------------------------------- the cache


@dataclass
class Cache:
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
    def loaded(cls, session_id: str, stored: Iterable[tuple[str, Any]]) -> Cache:
        """The cache of a session read from the store (its conversation id set after)."""
        cache = cls("")
        for key, value in stored:
            if key in RESERVED_KEYS:
                cache.state[key] = decode(session_id, key, value)
            else:
                cache.facts[key] = value
        return cache
