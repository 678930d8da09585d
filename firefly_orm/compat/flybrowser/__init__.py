"""FlyBrowser's ``BrowserMemoryManager``, kept in a firefly_orm store.

Code written for FlyBrowser changes one import::

    from firefly_orm.compat.flybrowser import BrowserMemoryManager

    browser = BrowserMemoryManager()        # in process memory, as upstream
    browser.conversation_id                 # started on construction
    browser = BrowserMemoryManager(store=SQLiteStore("browser.sqlite3"), session_id="shop")

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
:class:`ObstacleInfo`, ...) is updated only after the commit; :meth:`~BrowserMemoryManager.load`
refreshes it from the store.  One object is not meant to be shared between
threads or concurrent tasks; give each its own (they may share a session).
"""

from firefly_orm.compat.flybrowser._manager import BrowserMemoryManager
from firefly_orm.compat.flybrowser._state import (
    CURRENT_PAGE,
    EMPTY_PROMPT,
    NAVIGATION_GRAPH,
    OBSTACLE_CACHE,
    PAGE_HISTORY,
    RECENT_PAGES,
    RESERVED_KEYS,
    URL_WIDTH,
    VISITED_URLS,
    CurrentPage,
    NavigationEdge,
    ObstacleInfo,
    PageSnapshot,
)

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
