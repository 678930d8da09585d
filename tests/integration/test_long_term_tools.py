"""The long-term memory agent tools (``long_term_toolset``) driven by a pydantic-ai agent.

The agents run on a :class:`~pydantic_ai.models.function.FunctionModel` whose
function (``helpers.long_term_agent.ScriptedModel``) calls the tools with the
arguments a test plans and records every message list it is sent, so the
tests check what the model actually received: tool descriptions, tool
returns, retry prompts.

* One process remembers through the ``remember`` tool; a SECOND PROCESS (the
  helper module run as a script, its own store over the same SQLite file,
  PostgreSQL schema or MongoDB database) runs a recall agent and its model
  receives the remembered text, for the bound user only.
* On every layer backend: users are isolated, bad arguments come back to the
  model as retries and write nothing, and the tools run the memory's
  ``async_`` methods only.
"""

from __future__ import annotations

import asyncio
import doctest
import inspect
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest
from store_backends import OpenedBackend, backend_params, open_backend

pytest.importorskip("pydantic_ai")

from helpers.long_term_agent import (
    NAMESPACE,
    call_tool,
    process_spec,
    recall_as,
    results,
    run_calls,
)
from pydantic_ai.toolsets import FunctionToolset

from firefly_orm.entry import MAX_SEARCH_TEXT_LENGTH
from firefly_orm.errors import EntryValidationError
from firefly_orm.long_term import LongTermMemory, tools
from firefly_orm.long_term._model import MAX_TAGS
from firefly_orm.long_term.tools import (
    DEFAULT_MAX_RESULTS,
    long_term_toolset,
)
from firefly_orm.manager import MemoryManager
from firefly_orm.store import InMemoryStore

TESTS_DIR = Path(__file__).resolve().parents[1]
#: Seconds the second process may take (interpreter start, imports, one agent run per user).
PROCESS_TIMEOUT = 180.0
FACT = "The user is called Ada Lovelace and prefers green tea"
QUERY = "what is the user called"


def memory(store: Any, user_id: str | None = "ada") -> LongTermMemory:
    return LongTermMemory(store=store, namespace=NAMESPACE, user_id=user_id)


async def recall_in_another_process(
    opened: OpenedBackend, users: list[str], query: str
) -> dict[str, Any]:
    """``{user: recall tool return}`` from a new Python process on ``opened``'s data."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS_DIR), env.get("PYTHONPATH")]))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "helpers.long_term_agent",
        process_spec(opened, users, query),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), PROCESS_TIMEOUT)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode == 0, err.decode(errors="replace")
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


# --------------------------------------------------------------------------- what the model sees


async def test_the_model_is_offered_two_described_tools() -> None:
    toolset = long_term_toolset(memory(InMemoryStore()), max_results=7)
    model = await run_calls(toolset)
    tools = {tool.name: tool for tool in model.tools}
    assert sorted(tools) == ["recall", "remember"]
    for tool in tools.values():
        assert tool.description and "long-term memory" in tool.description
        schema = tool.parameters_json_schema
        # every parameter is described; the owner is not the model's to choose
        assert all(prop.get("description") for prop in schema["properties"].values())
        assert "user_id" not in schema["properties"]
    remember = tools["remember"].parameters_json_schema
    assert remember["required"] == ["content"]
    assert remember["properties"]["importance"]["default"] == 0.5
    assert remember["properties"]["tags"]["default"] == []
    recall = tools["recall"].parameters_json_schema
    assert recall["required"] == ["query"]
    assert recall["properties"]["limit"]["default"] == 5
    assert "from 1 to 7" in recall["properties"]["limit"]["description"]


# --------------------------------------------------------------------------- two processes


@pytest.mark.parametrize("backend", backend_params(("sqlite", "postgres", "mongo")))
async def test_a_second_process_recalls_what_the_first_remembered(
    request: pytest.FixtureRequest, backend: str
) -> None:
    opened = open_backend(request, backend)
    try:
        ltm = memory(opened.store)
        stored = await call_tool(
            long_term_toolset(ltm),
            "remember",
            content=FACT,
            importance=0.9,
            tags=["identity"],
        )
        assert stored.outcome == "success", stored
        (item,) = await ltm.async_list()
        assert stored.content == f"Remembered (id {item.id})."
        assert (item.text, item.importance, item.tags, item.user_id) == (
            FACT,
            0.9,
            ("identity",),
            "ada",
        )
        (here,) = await ltm.async_recall(QUERY)

        seen = await recall_in_another_process(opened, ["ada", "bob"], QUERY)

        assert seen["ada"] == [
            {
                "text": FACT,
                "importance": 0.9,
                "tags": ["identity"],
                "score": pytest.approx(here.score),
            }
        ]
        assert seen["bob"] == []
    finally:
        await opened.aclose()


# --------------------------------------------------------------------------- every layer backend


async def test_users_are_isolated(store: Any) -> None:
    ada, bob = memory(store, "ada"), memory(store, "bob")
    await call_tool(long_term_toolset(ada), "remember", content=FACT, importance=0.8)
    assert await recall_as(store, "bob", QUERY) == []
    (found,) = await recall_as(store, "ada", QUERY)
    assert (found["text"], found["importance"], found["tags"]) == (FACT, 0.8, [])
    # bob's own memory of the same words stays his
    await call_tool(long_term_toolset(bob), "remember", content="Bob is called Robert")
    assert [r["text"] for r in await recall_as(store, "bob", QUERY)] == ["Bob is called Robert"]
    assert [r["text"] for r in await recall_as(store, "ada", QUERY)] == [FACT]
    assert (await ada.async_count(), await bob.async_count()) == (1, 1)


async def test_user_id_given_to_the_toolset_wins(store: Any) -> None:
    ltm = memory(store, "ada")
    with pytest.raises(EntryValidationError, match="serves user 'ada' only"):
        long_term_toolset(ltm, user_id="bob")  # a memory bound to ada: ada's tools only
    unbound = memory(store, None)
    await call_tool(long_term_toolset(unbound, user_id="bob"), "remember", content=FACT)
    assert await ltm.async_count() == 0
    assert await unbound.async_count(user_id="bob") == 1
    await call_tool(long_term_toolset(unbound), "remember", content="Nobody owns this note")
    owners = sorted(str(i.user_id) for i in await unbound.async_list())
    assert owners == ["None", "bob"]


async def test_recall_limit_and_order(store: Any) -> None:
    ltm = memory(store)
    toolset = long_term_toolset(ltm)
    for n, importance in enumerate((0.2, 0.9, 0.5)):
        await call_tool(toolset, "remember", content=f"green tea note {n}", importance=importance)
    part = await call_tool(toolset, "recall", query="green tea", limit=2)
    # equally relevant: the most important first
    assert [r["importance"] for r in results(part)] == [0.9, 0.5]


BAD_CALLS = [
    pytest.param("remember", {"content": FACT, "importance": 7}, "importance", id="importance-7"),
    pytest.param(
        "remember", {"content": FACT, "importance": -0.5}, "importance", id="importance-negative"
    ),
    pytest.param(
        "remember", {"content": FACT, "importance": "very"}, "importance", id="importance-text"
    ),
    pytest.param("remember", {"content": "   "}, "content", id="blank-content"),
    pytest.param(
        "remember",
        {"content": "x" * (MAX_SEARCH_TEXT_LENGTH + 1)},
        "content",
        id="content-too-long",
    ),
    pytest.param("remember", {"content": FACT, "tags": ["ok", ""]}, "tags", id="empty-tag"),
    pytest.param(
        "remember",
        {"content": FACT, "tags": [f"t{n}" for n in range(MAX_TAGS + 1)]},
        "tags",
        id="too-many-tags",
    ),
    pytest.param("recall", {"query": "tea", "limit": 0}, "limit", id="limit-0"),
    pytest.param(
        "recall", {"query": "tea", "limit": DEFAULT_MAX_RESULTS + 1}, "limit", id="limit-too-big"
    ),
]


@pytest.mark.parametrize(("tool", "args", "field"), BAD_CALLS)
async def test_bad_arguments_come_back_as_retries_and_write_nothing(
    store: Any, tool: str, args: dict[str, Any], field: str
) -> None:
    ltm = memory(store)
    part = await call_tool(long_term_toolset(ltm), tool, **args)
    assert part.outcome == "retried", part
    assert field in str(part.content)
    assert await ltm.async_count() == 0
    assert store.load(NAMESPACE) == []


class SyncForbidden(LongTermMemory):
    """A memory whose blocking methods fail: the tools must not call them."""

    def remember(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise AssertionError("the remember tool called the blocking remember()")

    def recall(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise AssertionError("the recall tool called the blocking recall()")


async def test_tools_run_only_the_async_methods(store: Any) -> None:
    ltm = SyncForbidden(store=store, namespace=NAMESPACE, user_id="ada")
    toolset = long_term_toolset(ltm)
    assert isinstance(toolset, FunctionToolset)
    assert all(inspect.iscoroutinefunction(t.function) for t in toolset.tools.values())
    stored = await call_tool(toolset, "remember", content=FACT)
    found = await call_tool(toolset, "recall", query=QUERY)
    assert (stored.outcome, found.outcome) == ("success", "success")
    assert [r["text"] for r in results(found)] == [FACT]


# --------------------------------------------------------------------------- what it binds to


async def test_bound_to_a_manager_and_its_user(layer_backend: OpenedBackend) -> None:
    ada = MemoryManager(store=layer_backend.store, user_id="ada")
    stored = await call_tool(long_term_toolset(ada), "remember", content=FACT, tags=["identity"])
    assert stored.outcome == "success", stored
    (item,) = await ada.long_term.async_list()
    assert (item.text, item.user_id, item.tags) == (FACT, "ada", ("identity",))
    # a fork shares the manager's long-term memory
    fork = ada.fork(working_scope_id="researcher")
    found = await call_tool(long_term_toolset(fork), "recall", query=QUERY)
    assert [r["text"] for r in results(found)] == [FACT]
    # a new store object (a restarted worker): ada's manager recalls it, bob's does not
    store = layer_backend.reopen()
    again = MemoryManager(store=store, user_id="ada")
    found = await call_tool(long_term_toolset(again), "recall", query=QUERY)
    assert [r["text"] for r in results(found)] == [FACT]
    bob = MemoryManager(store=store, user_id="bob")
    assert results(await call_tool(long_term_toolset(bob), "recall", query=QUERY)) == []


@dataclass
class Holder:
    """Anything with a ``long_term`` attribute, as a MemoryManager has."""

    long_term: Any


async def test_an_object_with_long_term_memory_is_accepted() -> None:
    ltm = memory(InMemoryStore(), "ada")
    await call_tool(long_term_toolset(Holder(ltm)), "remember", content=FACT)
    assert [i.text for i in await ltm.async_list()] == [FACT]
    assert (await recall_as(ltm.store, "ada", QUERY))[0]["text"] == FACT


def test_what_it_cannot_bind_to_is_refused() -> None:
    ltm = memory(InMemoryStore())
    with pytest.raises(ValueError, match="disabled"):
        long_term_toolset(Holder(None))
    with pytest.raises(TypeError, match="must be a LongTermMemory"):
        long_term_toolset(Holder("not a memory"))
    with pytest.raises(TypeError, match="LongTermMemory"):
        long_term_toolset(object())  # type: ignore[arg-type]
    with pytest.raises(EntryValidationError, match="user_id"):
        long_term_toolset(ltm, user_id="")
    bad: Any
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ValueError, match="max_results"):
            long_term_toolset(ltm, max_results=bad)


def test_the_docstring_example_runs() -> None:
    failures, tried = doctest.testmod(tools, verbose=False)
    assert (failures, tried > 0) == (0, True)
