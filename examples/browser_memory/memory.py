"""The browser agent's memory: FlyBrowser's ``BrowserMemoryManager``, shipped in the package.

It lives in :mod:`firefly_orm.compat.flybrowser`; this module re-exports it for
the example's agent and demo.
"""

from firefly_orm.compat.flybrowser import (
    CURRENT_PAGE,
    EMPTY_PROMPT,
    NAVIGATION_GRAPH,
    OBSTACLE_CACHE,
    PAGE_HISTORY,
    RECENT_PAGES,
    RESERVED_KEYS,
    URL_WIDTH,
    VISITED_URLS,
    BrowserMemoryManager,
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
