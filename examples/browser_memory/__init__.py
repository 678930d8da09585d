"""FlyBrowser's ``BrowserMemoryManager`` rebuilt on firefly_orm: a browser session that survives.

* :mod:`firefly_orm.compat.flybrowser`: :class:`BrowserMemoryManager` (page
  snapshots, current page, navigation graph, obstacle cache, visited URLs,
  facts, ``format_for_prompt``), kept in a :class:`~firefly_orm.MemoryManager`'s
  working memory on any store;
* :mod:`~examples.browser_memory.agent`: a scripted pydantic-ai browser agent
  over an offline site, one task per run;
* :mod:`~examples.browser_memory.demo`: ``python -m examples.browser_memory
  [--db URL] [--schema NAME] [--session ID] [--reset]``; run it several times
  and each process resumes the session the previous one left.
"""

from firefly_orm.compat.flybrowser import (
    RESERVED_KEYS,
    BrowserMemoryManager,
    CurrentPage,
    NavigationEdge,
    ObstacleInfo,
    PageSnapshot,
)

__all__ = [
    "RESERVED_KEYS",
    "BrowserMemoryManager",
    "CurrentPage",
    "NavigationEdge",
    "ObstacleInfo",
    "PageSnapshot",
]
