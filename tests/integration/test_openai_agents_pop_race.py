"""``FireflySession.pop_item`` racing ``add_items`` and other pops (issue 31's open point).

``pop_item`` is one unit of work (``ConversationMemory.pop_turn``): threads released
together by a barrier, each with its own store object and session over the same
session id, pop and append; every item ends up either stored or popped, exactly once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from races import race
from store_backends import OpenedBackend, backend_params

from firefly_orm import ConversationMemory
from firefly_orm.integrations.openai_agents import FireflySession


@pytest.mark.parametrize("layer_backend", backend_params(["sqlite", "postgres"]), indirect=True)
def test_pop_item_racing_add_items(layer_backend: OpenedBackend) -> None:
    first = FireflySession("s", ConversationMemory(store=layer_backend.store, max_tokens=None))
    base = [{"role": "user", "content": f"base {n}"} for n in range(6)]
    asyncio.run(first.add_items(base))  # type: ignore[arg-type]
    popped: list[str] = []

    def session() -> FireflySession:
        return FireflySession(
            "s", ConversationMemory(store=layer_backend.reopen(), max_tokens=None)
        )

    def adder(i: int) -> Callable[[], None]:
        mine = session()

        async def add() -> None:
            for j in range(3):
                items = [
                    {"role": "user", "content": f"w{i} n{j} q"},
                    {"role": "assistant", "content": f"w{i} n{j} a"},
                ]
                await mine.add_items(items)  # type: ignore[arg-type]

        return lambda: asyncio.run(add())

    def popper() -> Callable[[], None]:
        mine = session()

        async def pop() -> None:
            for _ in range(3):
                item = await mine.pop_item()
                if item is not None:
                    popped.append(str(dict(item)["content"]))

        return lambda: asyncio.run(pop())

    race([adder(0), adder(1), popper(), popper()])

    stored = [str(dict(item)["content"]) for item in asyncio.run(first.get_items())]
    every = [str(item["content"]) for item in base]
    every += [f"w{i} n{j} {s}" for i in range(2) for j in range(3) for s in "qa"]
    assert len(popped) == 6 and len(set(popped)) == 6  # no item popped twice
    assert sorted(stored + popped) == sorted(every)  # none lost, none doubled
    assert asyncio.run(first.memory.async_verify("s")) == []
