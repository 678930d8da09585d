"""``examples/browser_memory``: FlyBrowser's browser memory on SQLite, PostgreSQL and MongoDB.

* Every browser action writes the typed local cache and the session's working
  memory (readable by a plain ``MemoryManager``), in ONE unit of work; a
  failing action writes nothing; objects with a stale cache lose nothing.
* Reserved keys and bad input are refused with ``ValueError``, nothing written.
* ``format_for_prompt`` has FlyBrowser's shape; the agent's own facts are the
  only "Additional facts".
* ``clear()`` empties one session and moves it to a new conversation; other
  sessions and other users of the store keep everything.
* A SECOND PROCESS (``helpers/browser_memory_process.py``, sync API) on the same
  SQLite file, PostgreSQL schema or MongoDB database resumes the session the
  first one wrote (async API), and what it records comes back.
* ``python -m examples.browser_memory`` runs offline and each run resumes the
  previous one; the scripted agent's model is given the stored state.
"""

from __future__ import annotations

import doctest
import io
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import forked
import pytest
from helpers.browser_memory_process import (
    FOLLOW_UP_FACT,
    FOLLOW_UP_OBSTACLE,
    FOLLOW_UP_PAGE,
    snapshot,
    spec_for,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_backends import OpenedBackend, backend_params, open_backend

from examples.browser_memory.agent import CART, CHEAPEST, HOME, TASKS, run_next_task
from examples.browser_memory.demo import main as demo_main
from firefly_orm import (
    EntryValidationError,
    InMemoryStore,
    MemoryManager,
    SQLiteStore,
    WorkingMemory,
)
from firefly_orm.compat.flybrowser import (
    EMPTY_PROMPT,
    PAGE_HISTORY,
    RECENT_PAGES,
    RESERVED_KEYS,
    URL_WIDTH,
    VISITED_URLS,
    BrowserMemoryManager,
    NavigationEdge,
    ObstacleInfo,
    PageSnapshot,
)
from firefly_orm.compat.flybrowser import _manager as browser_manager
from firefly_orm.compat.flybrowser import _state as browser_state
from firefly_orm.uow import arun_in_unit_of_work, async_unit_of_work_for, unit_of_work_for

pytest.importorskip("pydantic_ai")

TESTS_DIR = Path(__file__).resolve().parents[1]
REPO = TESTS_DIR.parent
#: Seconds a child process may take (interpreter start, imports, a few writes).
PROCESS_TIMEOUT = 180.0
DB_BACKENDS = ("sqlite", "postgres", "mongo")
MODES = ("sync", "async")

LOGIN = "https://shop.example/login"
STEPS = "firefly_orm.bridges._steps"


# --------------------------------------------------------------------------- helpers


@pytest.fixture(params=backend_params(DB_BACKENDS))
async def opened(request: pytest.FixtureRequest) -> AsyncIterator[OpenedBackend]:
    """The test's store on each database backend, dropped after."""
    backend = open_backend(request, str(request.param))
    try:
        yield backend
    finally:
        await backend.aclose()


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def call(mode: str, layer: object, name: str, *args: Any, **kw: Any) -> Any:
    """``layer.<name>(...)`` in sync mode, ``await layer.async_<name>(...)`` in async mode."""
    if mode == "async":
        return await getattr(layer, f"async_{name}")(*args, **kw)
    return getattr(layer, name)(*args, **kw)


async def open_session(mode: str, store: Any, session_id: str, **kw: Any) -> BrowserMemoryManager:
    if mode == "async":
        return await BrowserMemoryManager.async_open(store, session_id=session_id, **kw)
    return BrowserMemoryManager.open(store, session_id=session_id, **kw)


async def browse(mode: str, browser: BrowserMemoryManager) -> None:
    """A short session: three pages, two moves, an obstacle, two facts."""
    await call(mode, browser, "record_page_state", HOME, "Example Shop", "search box, banner")
    await call(mode, browser, "record_obstacle", HOME, "cookie_banner", "click 'Accept all'")
    await call(
        mode, browser, "record_visit", CHEAPEST, "Aero 13", "price", from_url=HOME, method="click"
    )
    await call(mode, browser, "record_navigation", CHEAPEST, CART, "click")
    await call(mode, browser, "record_page_state", CART, "Your cart", "1 item")
    await call(mode, browser, "set_fact", "cheapest_laptop", "Aero 13", importance=0.9)
    await call(mode, browser, "set_fact", "budget_eur", [400, 600])


def stored_rows(store: Any, namespace: str) -> list[tuple[str | None, Any, int]]:
    """(key, content, version) of every entry of ``namespace``, sorted by key."""
    return sorted(
        ((e.key, e.content, e.version) for e in store.load(namespace)), key=lambda r: str(r[0])
    )


class UnitsOfWork:
    """Counts the units of work the memory layers open (read-only and writing)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads = 0
        self.writes = 0

        def counted(opener: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(store: Any, *, read_only: bool = False) -> Any:
                if read_only:
                    self.reads += 1
                else:
                    self.writes += 1
                return opener(store, read_only=read_only)

            return wrapper

        def counted_run(store: Any, work: Any, *, read_only: bool = False, **kw: Any) -> Any:
            if read_only:
                self.reads += 1
            else:
                self.writes += 1
            return arun_in_unit_of_work(store, work, read_only=read_only, **kw)

        # the step driver opens every unit of work of the memory layers (the async
        # path of a transaction through arun_in_unit_of_work)
        monkeypatch.setattr(f"{STEPS}.unit_of_work_for", counted(unit_of_work_for))
        monkeypatch.setattr(f"{STEPS}.async_unit_of_work_for", counted(async_unit_of_work_for))
        monkeypatch.setattr(f"{STEPS}.arun_in_unit_of_work", counted_run)

    def reset(self) -> None:
        self.reads = self.writes = 0


# ------------------------------------------------------------------ actions, cache, dual write


async def test_actions_fill_the_typed_cache_and_working_memory(
    opened: OpenedBackend, mode: str
) -> None:
    browser = await open_session(mode, opened.store, "shop")
    await browse(mode, browser)

    assert [p.url for p in browser.page_history] == [HOME, CHEAPEST, CART]
    assert all(isinstance(p, PageSnapshot) and p.timestamp > 0 for p in browser.page_history)
    assert browser.get_current_page() == browser.page_history[-1]
    assert browser.visited_urls == [HOME, CHEAPEST, CART]
    assert browser.has_visited_url(CART) and not browser.has_visited_url(LOGIN)
    assert browser.navigation_edges == [
        NavigationEdge(HOME, CHEAPEST, "click"),
        NavigationEdge(CHEAPEST, CART, "click"),
    ]
    assert browser.navigation_graph == {HOME: [CHEAPEST], CHEAPEST: [CART]}
    assert browser.obstacle_cache == {HOME: ObstacleInfo("cookie_banner", "click 'Accept all'")}
    assert browser.get_obstacle(HOME) == ObstacleInfo("cookie_banner", "click 'Accept all'")
    assert browser.get_obstacle(CART) is None
    assert browser.facts == {"cheapest_laptop": "Aero 13", "budget_eur": [400, 600]}
    assert browser.get_fact("current_page") == {"url": CART, "title": "Your cart"}
    assert browser.get_fact("missing", "none") == "none"

    # The dual write: a plain MemoryManager on the session's scope, over a NEW
    # store object, reads the same facts, reserved keys included.
    plain = MemoryManager(store=opened.reopen(), working_scope_id=browser.scope_id)
    stored = await plain.working.async_to_dict()
    assert set(stored) == RESERVED_KEYS | {"cheapest_laptop", "budget_eur"}
    for key, value in stored.items():
        assert browser.get_fact(key) == value, key
    assert stored[PAGE_HISTORY] == [asdict(p) for p in browser.page_history]
    entry = await plain.working.async_get_entry("cheapest_laptop")
    assert entry is not None and entry.importance == 0.9
    assert "- cheapest_laptop: Aero 13" in await plain.async_get_working_context()


async def test_a_new_store_object_resumes_the_same_state(opened: OpenedBackend, mode: str) -> None:
    browser = await open_session(mode, opened.store, "shop")
    await browse(mode, browser)
    await call(mode, browser.memory, "add_turn", browser.conversation_id, "find it", "found it")

    again = await open_session(mode, opened.reopen(), "shop")

    assert snapshot(again) == snapshot(browser)
    assert again.page_history == browser.page_history  # typed, timestamps included
    assert again.obstacle_cache == browser.obstacle_cache
    assert again.navigation_edges == browser.navigation_edges
    assert again.conversation_id == browser.conversation_id


async def test_each_action_is_one_unit_of_work(
    opened: OpenedBackend, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    units = UnitsOfWork(monkeypatch)
    browser = await open_session(mode, opened.store, "shop")
    assert (units.reads, units.writes) == (1, 1)  # read the session, then create it
    await open_session(mode, opened.reopen(), "shop")
    assert (units.reads, units.writes) == (2, 1)  # an existing session is only read

    actions: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
        ("record_page_state", (HOME, "Shop", "banner"), {}),
        ("record_visit", (CART, "Cart", "1 item"), {"from_url": HOME, "method": "click"}),
        ("record_navigation", (CART, LOGIN, "click"), {}),
        ("record_obstacle", (CART, "login_wall", "sign in"), {}),
        ("set_fact", ("cart", "Aero 13"), {}),
        ("clear", (), {}),
    ]
    for name, args, kwargs in actions:
        units.reset()
        await call(mode, browser, name, *args, **kwargs)
        assert (units.reads, units.writes) == (0, 1), name


async def test_a_failing_action_writes_nothing(
    opened: OpenedBackend, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    browser = await open_session(mode, opened.store, "shop")
    await browse(mode, browser)
    namespace = browser.memory.working.namespace
    before_rows = stored_rows(opened.store, namespace)
    before = snapshot(browser)

    encode = browser_state.encode

    def failing(key: str, value: Any) -> Any:
        # record_page_state writes page_history, current_page, then visited_urls:
        # fail on the last, after the others were saved in the unit of work.
        if key == VISITED_URLS:
            raise RuntimeError("disk full")
        return encode(key, value)

    monkeypatch.setattr(browser_state, "encode", failing)
    with pytest.raises(RuntimeError, match="disk full"):
        await call(mode, browser, "record_page_state", LOGIN, "Sign in", "form")
    monkeypatch.setattr(browser_state, "encode", encode)

    assert stored_rows(opened.reopen(), namespace) == before_rows
    assert snapshot(browser) == before  # the cache is updated only after a commit
    assert snapshot(await open_session(mode, opened.reopen(), "shop")) == before


async def test_objects_with_a_stale_cache_lose_nothing(opened: OpenedBackend, mode: str) -> None:
    first = await open_session(mode, opened.store, "shop")
    second = await open_session(mode, opened.reopen(), "shop")  # loaded before any write
    await call(mode, first, "record_page_state", HOME, "Shop", "banner")
    await call(mode, second, "record_page_state", CART, "Cart", "1 item")
    await call(mode, first, "record_obstacle", HOME, "cookie_banner", "accept")
    await call(mode, second, "record_obstacle", CART, "login_wall", "sign in")
    await call(mode, first, "set_fact", "a", 1)
    await call(mode, second, "set_fact", "b", 2)

    # each write re-read what it changes: the second object's pages include the first's
    assert [p.url for p in second.page_history] == [HOME, CART]
    assert list(second.obstacle_cache) == [HOME, CART]
    await call(mode, first, "load")
    assert [p.url for p in first.page_history] == [HOME, CART]
    assert first.visited_urls == [HOME, CART]
    assert list(first.obstacle_cache) == [HOME, CART]
    assert first.facts == {"a": 1, "b": 2}


# --------------------------------------------------------------------------- refused input


async def test_reserved_keys_are_refused_and_nothing_is_written(
    opened: OpenedBackend, mode: str
) -> None:
    browser = await open_session(mode, opened.store, "shop")
    await browse(mode, browser)
    namespace = browser.memory.working.namespace
    before_rows = stored_rows(opened.store, namespace)
    before = snapshot(browser)

    for key in sorted(RESERVED_KEYS):
        with pytest.raises(ValueError, match=f"'{key}' is reserved") as refused:
            await call(mode, browser, "set_fact", key, "overwritten")
        for reserved in RESERVED_KEYS:  # the message lists them all
            assert reserved in str(refused.value)

    assert stored_rows(opened.reopen(), namespace) == before_rows
    assert snapshot(browser) == before


#: (method, args, kwargs) calls that must be refused with ValueError.
BAD_CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("set_fact", ("note", object()), {}),  # not JSON
    ("set_fact", ("note", float("nan")), {}),
    ("set_fact", ("note", "fine"), {"importance": 1.5}),
    ("set_fact", ("", "value"), {}),
    ("set_fact", (7, "value"), {}),
    ("record_page_state", ("", "Title", "elements"), {}),
    ("record_page_state", (None, "Title", "elements"), {}),
    ("record_page_state", (LOGIN, "Title\x00", "elements"), {}),
    ("record_visit", (LOGIN, "Title", "elements"), {"from_url": ""}),
    ("record_navigation", (HOME, " ", "click"), {}),
    ("record_obstacle", (HOME, "", "accept"), {}),
    ("record_obstacle", (HOME, "captcha", 3), {}),
]


async def test_bad_input_is_refused_and_nothing_is_written(
    opened: OpenedBackend, mode: str
) -> None:
    browser = await open_session(mode, opened.store, "shop")
    await browse(mode, browser)
    await call(mode, browser, "set_fact", "note", "kept")
    namespace = browser.memory.working.namespace
    before_rows = stored_rows(opened.store, namespace)
    before = snapshot(browser)

    for name, args, kwargs in BAD_CALLS:
        with pytest.raises(ValueError):
            await call(mode, browser, name, *args, **kwargs)
        assert snapshot(browser) == before, (name, args, kwargs)

    assert stored_rows(opened.reopen(), namespace) == before_rows


def test_bad_values_raise_the_library_validation_error() -> None:
    browser = BrowserMemoryManager.open(session_id="s")
    with pytest.raises(EntryValidationError) as bad:
        browser.set_fact("note", {1: "a", "1": "b"})
    assert bad.value.field == "content"


def test_reading_before_loading_is_an_error_and_a_write_loads() -> None:
    store = InMemoryStore()
    BrowserMemoryManager.open(store, session_id="s").set_fact("kept", True)
    browser = BrowserMemoryManager(store=store, session_id="s", load=False)
    assert not browser.is_loaded
    with pytest.raises(RuntimeError, match="not loaded"):
        browser.format_for_prompt()
    with pytest.raises(RuntimeError, match="not loaded"):
        _ = browser.page_history
    browser.record_page_state(HOME, "Shop", "")
    assert browser.is_loaded and browser.facts == {"kept": True}
    with pytest.raises(ValueError, match="session_id"):
        BrowserMemoryManager(session_id="")


def test_a_malformed_stored_state_is_reported_and_nothing_is_written() -> None:
    store = InMemoryStore()
    WorkingMemory(store=store, scope_id="browser:s").set(PAGE_HISTORY, "not a list")
    with pytest.raises(ValueError, match="'page_history' is not browser state"):
        BrowserMemoryManager.open(store, session_id="s")
    assert store.load("browser:s") == []  # no session row was created


# --------------------------------------------------------------------------- format_for_prompt


def test_format_for_prompt_has_flybrowser_shape() -> None:
    browser = BrowserMemoryManager.open(session_id="s")
    assert browser.format_for_prompt() == EMPTY_PROMPT

    browser.record_page_state(HOME, "Example Shop", "")
    assert browser.format_for_prompt() == f"Current page: {HOME} - Example Shop"

    long_url = "https://shop.example/laptops/" + "x" * 60
    urls = [HOME, CHEAPEST, HOME, CART, LOGIN, long_url]
    for url in urls[1:]:
        browser.record_page_state(url, f"title of {url[-5:]}", "2 buttons")
    browser.record_obstacle(CART, "login_wall", "sign in")
    browser.record_obstacle(HOME, "cookie_banner", "accept")
    browser.record_obstacle(CART, "login_wall", "sign in with the demo account")
    browser.set_fact("cheapest", "Aero 13")
    browser.set_fact("budget", [400, 600])

    assert browser.format_for_prompt().splitlines() == [
        f"Current page: {long_url} - title of xxxxx",
        "Page elements: 2 buttons",
        "Pages visited: 6 (5 unique)",
        "Recent history: shop.example/laptops/aero-13 -> shop.example/ -> shop.example/cart"
        " -> shop.example/login -> shop.example/laptops/" + "x" * 19,  # 40 characters
        f"Known obstacles: {CART}, {HOME}",
        "Additional facts:",
        "- cheapest: Aero 13",
        "- budget: [400, 600]",
    ]
    # a re-set fact moves to the end, here and after a reload
    browser.set_fact("cheapest", "Aero 14")
    assert browser.format_for_prompt().splitlines()[-2:] == [
        "- budget: [400, 600]",
        "- cheapest: Aero 14",
    ]
    again = BrowserMemoryManager.open(browser.store, session_id="s")
    assert again.format_for_prompt() == browser.format_for_prompt()


# No NUL (refused), no lone surrogates, no newline (one prompt line per item).
_text = st.text(st.characters(exclude_characters="\x00\n", exclude_categories=["Cs"]))
_urls = st.builds(lambda path: f"https://{path}", _text.filter(lambda s: s.strip() != ""))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    visits=st.lists(st.tuples(_urls, _text, _text), min_size=0, max_size=12),
    obstacles=st.lists(st.tuples(_urls, _text.filter(str.strip), _text.filter(str.strip))),
    facts=st.dictionaries(
        _text.filter(lambda k: k.strip() != "" and k not in RESERVED_KEYS),
        st.none() | st.booleans() | st.integers() | _text,
        max_size=5,
    ),
)
def test_any_session_reads_back_exactly_and_renders_by_the_rules(
    visits: list[tuple[str, str, str]],
    obstacles: list[tuple[str, str, str]],
    facts: dict[str, Any],
) -> None:
    store = InMemoryStore()
    browser = BrowserMemoryManager.open(store, session_id="any")
    for url, title, elements in visits:
        browser.record_page_state(url, title, elements)
    for url, kind, resolution in obstacles:
        browser.record_obstacle(url, kind, resolution)
    for key, value in facts.items():
        browser.set_fact(key, value)

    again = BrowserMemoryManager.open(store, session_id="any")
    assert snapshot(again) == snapshot(browser)
    assert again.page_history == browser.page_history

    lines = browser.format_for_prompt().split("\n")
    if not (visits or obstacles or facts):
        assert lines == [EMPTY_PROMPT]
    distinct = list(dict.fromkeys(url for url, _, _ in visits))
    assert browser.visited_urls == distinct
    if len(visits) > 1:
        assert f"Pages visited: {len(visits)} ({len(distinct)} unique)" in lines
        (history,) = [line for line in lines if line.startswith("Recent history: ")]
        expected = [url.split("//")[-1][:URL_WIDTH] for url, _, _ in visits[-RECENT_PAGES:]]
        assert history == "Recent history: " + " -> ".join(expected)
    if facts:
        start = lines.index("Additional facts:")
        assert lines[start + 1 :] == [f"- {key}: {value}" for key, value in facts.items()]


def test_the_docstring_example_runs() -> None:
    failures, tried = doctest.testmod(browser_manager, raise_on_error=False, verbose=False)
    assert tried > 0 and failures == 0


# --------------------------------------------------------------------------- clear


async def test_clear_empties_only_this_session(opened: OpenedBackend, mode: str) -> None:
    store = opened.store
    mine = await open_session(mode, store, "mine")
    other = await open_session(mode, store, "other", user_id="bob")
    app = MemoryManager(store=store)  # an unrelated user of the same store
    await call(mode, app, "set_fact", "app_setting", "on")
    app_conversation = await call(mode, app, "new_conversation")
    await call(mode, app, "add_turn", app_conversation, "hello", "hi")
    for browser in (mine, other):
        await browse(mode, browser)
        await call(mode, browser.memory, "add_turn", browser.conversation_id, "task", "done")
    other_before = snapshot(other)
    old_conversation = mine.conversation_id

    await call(mode, mine, "clear")

    assert mine.format_for_prompt() == EMPTY_PROMPT
    assert mine.page_history == [] and mine.facts == {} and mine.obstacle_cache == {}
    assert mine.conversation_id != old_conversation
    reopened = opened.reopen()
    conversations = MemoryManager(store=reopened).conversation
    assert await conversations.async_get_turns(old_conversation) == []
    assert await conversations.async_get_turns(mine.conversation_id) == []
    assert await WorkingMemory(store=reopened, scope_id=mine.scope_id).async_keys() == []
    fresh = await open_session(mode, reopened, "mine")
    assert fresh.conversation_id == mine.conversation_id
    assert fresh.format_for_prompt() == EMPTY_PROMPT
    # the other session, and the app's facts and conversation, are untouched
    assert snapshot(await open_session(mode, reopened, "other", user_id="bob")) == other_before
    assert await call(mode, MemoryManager(store=reopened), "get_fact", "app_setting") == "on"
    assert [t.user_prompt for t in await conversations.async_get_turns(app_conversation)] == [
        "hello"
    ]


async def test_sessions_are_per_user_and_go_with_erase_user(opened: OpenedBackend) -> None:
    ada = await BrowserMemoryManager.async_open(opened.store, session_id="s", user_id="ada")
    await browse("async", ada)
    bob = await BrowserMemoryManager.async_open(opened.store, session_id="s", user_id="bob")
    assert bob.format_for_prompt() == EMPTY_PROMPT  # the same id, another user's session
    assert bob.conversation_id != ada.conversation_id
    await bob.async_record_page_state(LOGIN, "Sign in", "form")
    await bob.async_set_fact("role", "admin")
    bob_before = snapshot(bob)
    assert await ada.memory.async_user_conversations("ada") == [ada.conversation_id]

    await MemoryManager(store=opened.store).async_erase_user("ada")

    reopened = opened.reopen()
    again = await BrowserMemoryManager.async_open(reopened, session_id="s", user_id="ada")
    assert again.format_for_prompt() == EMPTY_PROMPT
    assert again.conversation_id != ada.conversation_id
    kept = await BrowserMemoryManager.async_open(reopened, session_id="s", user_id="bob")
    assert snapshot(kept) == bob_before


# --------------------------------------------------------------------------- a second process


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO), str(TESTS_DIR), env.get("PYTHONPATH")])
    )
    return env


async def _run_child(*args: str) -> str:
    """``python *args`` in another process (a fork of a warm interpreter: tests/forked.py)."""
    done = await forked.arun(
        [sys.executable, *args], cwd=REPO, env=_child_env(), timeout=PROCESS_TIMEOUT
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_a_second_process_resumes_the_session(opened: OpenedBackend) -> None:
    browser = await BrowserMemoryManager.async_open(opened.store, session_id="shop")
    await browse("async", browser)
    await browser.memory.async_add_turn(browser.conversation_id, "find the laptop", "found")

    report = await _run_child("-m", "helpers.browser_memory_process", spec_for(opened, "shop"))
    seen = json.loads(report.splitlines()[-1])

    assert seen == snapshot(browser)
    assert seen["visited_urls"] == [HOME, CHEAPEST, CART]
    assert seen["obstacle_cache"] == {HOME: asdict(browser.obstacle_cache[HOME])}
    assert seen["facts"] == {"cheapest_laptop": "Aero 13", "budget_eur": [400, 600]}
    assert seen["turns"] == ["find the laptop"]

    # what the second process recorded comes back here
    await browser.async_load()
    url, title, elements = FOLLOW_UP_PAGE
    assert browser.get_current_page() == PageSnapshot(
        url, title, elements, browser.page_history[-1].timestamp
    )
    assert browser.navigation_graph[CART] == [url]
    assert browser.get_obstacle(url) == ObstacleInfo(*FOLLOW_UP_OBSTACLE)
    key, value = FOLLOW_UP_FACT
    assert browser.get_fact(key) == value
    assert browser.conversation_id == seen["conversation_id"]


# --------------------------------------------------------------------------- the agent and the demo


async def test_the_next_agent_run_starts_from_the_stored_session(opened: OpenedBackend) -> None:
    first = await run_next_task(
        await BrowserMemoryManager.async_open(opened.store, session_id="demo")
    )
    assert first is not None and first.answer == TASKS[0].answer
    assert (
        "resolve_obstacle",
        {"url": HOME, "obstacle_type": "cookie_banner", "resolution": "click 'Accept all'"},
    ) in first.model.calls

    browser = await BrowserMemoryManager.async_open(opened.reopen(), session_id="demo")
    second = await run_next_task(browser)

    assert second is not None and second.number == 2 and second.answer == TASKS[1].answer
    prompt = second.model.prompt
    assert f"Known obstacles: {HOME}" in prompt
    assert f"- cheapest_laptop_url: {CHEAPEST}" in prompt
    # the known cookie banner is passed from memory; only the new login wall is resolved
    resolved = [args["url"] for name, args in second.model.calls if name == "resolve_obstacle"]
    assert resolved == [CART]
    assert ("open_page", {"url": CHEAPEST, "method": "link"}) in second.model.calls
    # the first run is the second run's message history, and both runs are stored
    assert any(TASKS[0].text in str(m) for m in second.model.requests[0][:-1])
    turns = await browser.memory.conversation.async_get_turns(browser.conversation_id)
    assert [t.user_prompt for t in turns] == [TASKS[0].text, TASKS[1].text]


async def _demo(*args: str) -> str:
    return await _run_child("-m", "examples.browser_memory", *args)


def _demo_db(opened: OpenedBackend) -> list[str]:
    """``--db`` (and ``--schema``) arguments for the test's database."""
    place = opened.place
    if opened.name == "sqlite":
        return ["--db", str(place.tmp_path / "demo" / "browser.sqlite3")]
    if opened.name == "postgres":
        return ["--db", place.postgres(), "--schema", place.name]
    return ["--db", place.mongo(), "--schema", place.name]


async def test_the_demo_resumes_in_each_new_process(opened: OpenedBackend) -> None:
    demo_db = _demo_db(opened)
    first = await _demo(*demo_db)
    assert "New browser session 'demo'" in first
    assert "Task 1/3" in first and "blocked by cookie_banner" in first
    assert "Run again to resume with task 2." in first

    second = await _demo(*demo_db)
    assert "Resumed browser session 'demo'" in second and "Task 2/3" in second
    given_state = second.split("the model was given this browser state:")[1].split("  open_page")[0]
    assert f"| Known obstacles: {HOME}" in given_state
    assert f"| - cheapest_laptop_url: {CHEAPEST}" in given_state
    assert "passed cookie_banner" in second and "blocked by cookie_banner" not in second
    assert "blocked by login_wall" in second

    if opened.name != "sqlite":
        return  # the rest is backend-independent; one database is enough
    other = await _demo(*demo_db, "--session", "other")
    assert "New browser session 'other'" in other
    third = await _demo(*demo_db)
    assert "Task 3/3" in third and "passed login_wall" in third
    assert "All 3 tasks are done" in await _demo(*demo_db)
    reset = await _demo(*demo_db, "--reset")
    assert "Cleared browser session 'demo'" in reset and "Task 1/3" in reset
    # --reset cleared 'demo' only: 'other' keeps its first task's pages
    store = SQLiteStore(demo_db[1])
    try:
        kept = await BrowserMemoryManager.async_open(store, session_id="other")
        assert kept.has_visited_url(CHEAPEST) and "cheapest_laptop" in kept.facts
        assert len(await kept.memory.conversation.async_get_turns(kept.conversation_id)) == 1
    finally:
        await store.async_close()


def test_the_demo_refuses_an_unknown_database(capsys: pytest.CaptureFixture[str]) -> None:
    out = io.StringIO()
    assert demo_main(["--db", "redis://localhost/0"], out=out) == 2
    assert "not a SQLite, PostgreSQL or MongoDB URL" in capsys.readouterr().err
    assert out.getvalue() == ""


def test_the_constructor_starts_the_session_at_once() -> None:
    """FlyBrowser's shape: ``BrowserMemoryManager()`` works without open()/load()."""
    browser = BrowserMemoryManager()
    assert browser.is_loaded and len(browser.conversation_id) == 32
    assert browser.format_for_prompt() == EMPTY_PROMPT and browser.page_history == []
    browser.record_page_state(HOME, "Shop", "")
    assert browser.has_visited_url(HOME)
    assert BrowserMemoryManager().conversation_id != browser.conversation_id  # a store each
    with pytest.raises(TypeError, match="load"):
        BrowserMemoryManager(load="no")  # type: ignore[arg-type]


async def test_a_constructed_manager_resumes_the_stored_session(opened: OpenedBackend) -> None:
    """On a database: the constructor reads (or starts) the stored session."""
    first = BrowserMemoryManager(store=opened.store, session_id="shop")
    first.record_page_state(HOME, "Shop", "search box")
    again = BrowserMemoryManager(store=opened.reopen(), session_id="shop")
    assert again.conversation_id == first.conversation_id
    assert again.has_visited_url(HOME) and again.get_current_page() == first.get_current_page()
    other = BrowserMemoryManager(store=opened.store, session_id="other")
    assert other.conversation_id != first.conversation_id and other.page_history == []
