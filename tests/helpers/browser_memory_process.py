"""The second process of the browser-memory example tests: resume a session, report it, write.

Run as ``python -m helpers.browser_memory_process SPEC`` with the repository
and ``tests/`` on ``PYTHONPATH`` (as ``tests/examples/test_browser_memory.py``
does).  SPEC (JSON, from :func:`spec_for`) names a backend of the registry
(:mod:`store_backends`) and the test's place; the script opens a NEW store over
that data with the SYNC API (the test process uses the async one), prints the
session as :func:`snapshot` renders it (one JSON line), then records the
``FOLLOW_UP_*`` page, obstacle and fact so the test can check it sees them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from store_backends import BACKENDS, OpenedBackend, Place

from examples.browser_memory import BrowserMemoryManager

#: What the second process records after its report: (url, title, elements), the
#: obstacle on that url, and a fact.
FOLLOW_UP_PAGE = ("https://shop.example/checkout", "Checkout", "address form, pay button")
FOLLOW_UP_OBSTACLE = ("captcha", "tick the box")
FOLLOW_UP_FACT = ("order_status", "awaiting payment")


def snapshot(browser: BrowserMemoryManager) -> dict[str, Any]:
    """Everything a session holds, as JSON."""
    memory = browser.memory
    return {
        "conversation_id": browser.conversation_id,
        "turns": [t.user_prompt for t in memory.conversation.get_turns(browser.conversation_id)],
        "page_history": [asdict(page) for page in browser.page_history],
        "visited_urls": browser.visited_urls,
        "navigation_edges": [asdict(edge) for edge in browser.navigation_edges],
        "obstacle_cache": {url: asdict(info) for url, info in browser.obstacle_cache.items()},
        "facts": browser.facts,
        "prompt": browser.format_for_prompt(),
    }


def spec_for(opened: OpenedBackend, session_id: str) -> str:
    """The SPEC argument that makes the script reopen ``opened``'s data."""
    place = opened.place
    return json.dumps(
        {
            "backend": opened.name,
            "tmp_path": str(place.tmp_path),
            "name": place.name,
            "postgres_url": place.postgres_url,
            "mongo_url": place.mongo_url,
            "session_id": session_id,
        }
    )


def main(argv: Sequence[str]) -> None:
    """Report the session of SPEC, then record the follow-up."""
    (raw,) = argv
    spec = json.loads(raw)
    backend = BACKENDS[spec["backend"]]
    place = Place(
        tmp_path=Path(spec["tmp_path"]),
        name=spec["name"],
        postgres_url=spec["postgres_url"],
        mongo_url=spec["mongo_url"],
    )
    store = backend.open(place)
    try:
        browser = BrowserMemoryManager.open(store, session_id=spec["session_id"])
        print(json.dumps(snapshot(browser)), flush=True)
        current = browser.get_current_page()
        url, title, elements = FOLLOW_UP_PAGE
        browser.record_visit(
            url, title, elements, from_url=None if current is None else current.url, method="form"
        )
        browser.record_obstacle(url, *FOLLOW_UP_OBSTACLE)
        browser.set_fact(*FOLLOW_UP_FACT)
    finally:
        if backend.close is not None:
            backend.close(store)


if __name__ == "__main__":
    main(sys.argv[1:])
