"""Promotion of evicted turns, ``assemble_context`` and ``MemoryManager.long_term`` (issue 11).

On every layer backend, sync and async: evicted turns scored at or above the
threshold become long-term items in the same unit of work as the eviction
(never twice, nothing written when the scorer or the write fails); the
assembled context holds the summary, recalled items, facts and recent turns
within the budget; forks share the long-term memory as they share
conversations.  Last, selectools' unified-memory example on our API: a name
said early ages out, is promoted, and a later run's model receives it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from modes import call
from pydantic_ai import Agent
from pydantic_ai import messages as pai
from pydantic_ai.models.function import AgentInfo, FunctionModel
from store_backends import OpenedBackend, backend_params, open_backend

from firefly_orm.assemble import LONG_TERM_CONTEXT_PREFIX, ContextShares
from firefly_orm.conversation import ConversationMemory, ConversationTurn, TrimEvent
from firefly_orm.errors import EntryValidationError
from firefly_orm.long_term import LongTermMemory
from firefly_orm.long_term.promotion import (
    PROMOTED_TAG,
    Promotion,
    default_scorer,
    promoted_key,
)
from firefly_orm.manager import MemoryManager
from firefly_orm.store import InMemoryStore
from firefly_orm.tokens import TokenEstimator

NAME_TURN = ("Hi! My name is Alice and I work at Acme Corp", "Nice to meet you, Alice.")


async def call_off_loop(mode: str, obj: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    """:func:`call`, with the sync form in a worker thread (no event loop of its own there)."""
    if mode == "sync":
        return await asyncio.to_thread(getattr(obj, name), *args, **kwargs)
    return await getattr(obj, f"async_{name}")(*args, **kwargs)


def small_talk(i: int) -> tuple[str, str]:
    return (f"how is the weather today, round {i}?", "it is sunny and mild")


def memory_with_promotion(
    store: Any, events: list[TrimEvent] | None = None, **options: Any
) -> tuple[ConversationMemory, LongTermMemory]:
    ltm = LongTermMemory(store=store)
    cm = ConversationMemory(
        max_tokens=60,
        summarize_threshold=0,
        store=store,
        long_term=ltm,
        on_trim=None if events is None else events.append,
        **options,
    )
    return cm, ltm


# --------------------------------------------------------------------------- the scorer


def turn(prompt: str) -> ConversationTurn:
    return ConversationTurn(user_prompt=prompt, assistant_response="ok")


@pytest.mark.parametrize(
    ("prompt", "promoted"),
    [
        ("My name is Alice", True),
        ("I work at Acme as an engineer", True),
        ("please always answer in French, remember that", True),
        ("Remember: the launch code is 1234", True),
        ("what's the weather like?", False),
        ("thanks, that helps", False),
        ("tell me a joke", False),
    ],
)
def test_default_scorer_promotes_identity_and_explicit_requests(
    prompt: str, promoted: bool
) -> None:
    score = default_scorer(turn(prompt))
    assert 0.0 <= score <= 1.0
    assert (score >= 0.6) is promoted, (prompt, score)


# --------------------------------------------------------------------------- promotion


async def test_evicted_identity_turn_is_promoted_small_talk_is_not(store: Any, mode: str) -> None:
    events: list[TrimEvent] = []
    cm, ltm = memory_with_promotion(store, events)
    cid = await call(mode, cm, "new_conversation", user_id="alice")
    await call(mode, cm, "add_turn", cid, *NAME_TURN)
    for i in range(8):
        await call(mode, cm, "add_turn", cid, *small_talk(i))
    evicted = {tid for event in events for tid in event.evicted_turn_ids}
    assert 0 in evicted and len(evicted) >= 3  # the name turn and some small talk left

    items = await call(mode, ltm, "list", user_id="alice")
    assert [item.key for item in items] == [promoted_key(cid, 0)]
    (item,) = items
    assert item.text == "\n".join(NAME_TURN)
    assert item.user_id == "alice" and item.tags == (PROMOTED_TAG,)
    assert item.metadata == {"conversation_id": cid, "turn_id": 0}
    assert item.importance == default_scorer(turn(NAME_TURN[0]))
    promoted = [pid for event in events for pid in event.promoted_ids]
    assert promoted == [item.id]
    found = await call(mode, ltm, "recall", "where does Alice work?", user_id="alice")
    assert [r.item.id for r in found] == [item.id]


async def test_custom_async_scorer_and_threshold(store: Any, mode: str) -> None:
    seen: list[int] = []

    async def score(t: ConversationTurn) -> float:
        await asyncio.sleep(0)
        seen.append(t.turn_id)
        return 0.9 if t.turn_id % 2 == 0 else 0.2

    cm, ltm = memory_with_promotion(store, promotion_scorer=score, importance_threshold=0.5)
    cid = await call(mode, cm, "new_conversation")
    for i in range(8):
        await call_off_loop(mode, cm, "add_turn", cid, *small_talk(i))
    keys = {item.key for item in await call(mode, ltm, "list", limit=None)}
    assert seen and keys == {promoted_key(cid, t) for t in set(seen) if t % 2 == 0}
    assert all(item.importance == 0.9 for item in await call(mode, ltm, "list"))


async def test_auto_promote_off_keeps_long_term_untouched(store: Any, mode: str) -> None:
    cm, ltm = memory_with_promotion(store, auto_promote=False)
    assert cm.promotion is None and cm.long_term is ltm
    cid = await call(mode, cm, "new_conversation")
    await call(mode, cm, "add_turn", cid, *NAME_TURN)
    for i in range(8):
        await call(mode, cm, "add_turn", cid, *small_talk(i))
    assert await call(mode, ltm, "count") == 0


async def test_a_failing_scorer_writes_nothing(store: Any, mode: str) -> None:
    def broken(t: ConversationTurn) -> float:
        raise RuntimeError("scorer down")

    cm, ltm = memory_with_promotion(store, promotion_scorer=broken)
    cid = await call(mode, cm, "new_conversation")
    added = 0
    with pytest.raises(RuntimeError, match="scorer down"):
        for i in range(20):
            await call(mode, cm, "add_turn", cid, *small_talk(i))
            added += 1
    turns = await call(mode, cm, "get_turns", cid)
    assert [t.turn_id for t in turns] == list(range(added))  # the failed turn is not there
    assert await call(mode, ltm, "count") == 0


async def test_a_scorer_returning_no_number_is_refused(store: Any, mode: str) -> None:
    cm, ltm = memory_with_promotion(store, promotion_scorer=lambda t: "high")
    cid = await call(mode, cm, "new_conversation")
    with pytest.raises(TypeError, match="must return a number"):
        for i in range(20):
            await call(mode, cm, "add_turn", cid, *small_talk(i))
    assert await call(mode, ltm, "count") == 0


class WriteFailed(RuntimeError):
    """Raised inside the unit of work, after the promoted items were written."""


async def test_a_failed_write_loses_neither_turn_nor_item(
    store: Any, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The promotion and the eviction share one unit of work: a failure undoes both."""
    cm, ltm = memory_with_promotion(store)
    cid = await call(mode, cm, "new_conversation")
    await call(mode, cm, "add_turn", cid, *NAME_TURN)
    original = Promotion.store

    def store_then_fail(self: Promotion, *args: Any) -> tuple[str, ...]:
        ids = original(self, *args)
        if ids:
            raise WriteFailed("disk full")
        return ids

    monkeypatch.setattr(Promotion, "store", store_then_fail)
    with pytest.raises(WriteFailed, match="disk full"):
        for i in range(20):
            await call(mode, cm, "add_turn", cid, *small_talk(i))
    turns = await call(mode, cm, "get_turns", cid)
    assert turns[0].turn_id == 0 and turns[0].user_prompt == NAME_TURN[0]
    assert await call(mode, ltm, "count") == 0
    monkeypatch.setattr(Promotion, "store", original)
    await call(mode, cm, "add_turn", cid, *small_talk(99))
    assert [i.key for i in await call(mode, ltm, "list")] == [promoted_key(cid, 0)]


async def test_promotion_respects_the_long_term_limit(store: Any, mode: str) -> None:
    ltm = LongTermMemory(store=store, long_term_limit=2)
    await call(mode, ltm, "remember", "very important fact one", importance=1.0)
    await call(mode, ltm, "remember", "very important fact two", importance=1.0)
    cm = ConversationMemory(max_tokens=60, summarize_threshold=0, store=store, long_term=ltm)
    cid = await call(mode, cm, "new_conversation")
    await call(mode, cm, "add_turn", cid, *NAME_TURN)
    for i in range(8):
        await call(mode, cm, "add_turn", cid, *small_talk(i))
    items = await call(mode, ltm, "list")
    assert sorted(i.text for i in items) == ["very important fact one", "very important fact two"]


def test_concurrent_writers_promote_each_evicted_turn_exactly_once(store: Any) -> None:
    """Writers racing on one conversation: every evicted turn becomes exactly one item."""
    cm, ltm = memory_with_promotion(store)
    cid = cm.new_conversation()
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            for i in range(8):
                cm.add_turn(cid, f"Remember: my name is Writer{w}x{i}", "noted")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    retained = {t.turn_id for t in cm.get_turns(cid)}
    evicted = set(range(32)) - retained
    items = ltm.list(limit=None)
    assert sorted(str(i.key) for i in items) == sorted(promoted_key(cid, t) for t in evicted)
    texts = {i.text.split("\n")[0] for i in items}
    assert len(texts) == len(items)  # one item per turn, each with its own turn's text


def test_promotion_configuration_is_checked() -> None:
    store = InMemoryStore()
    with pytest.raises(ValueError, match=r"conversation.s store"):
        ConversationMemory(store=store, long_term=LongTermMemory(store=InMemoryStore()))
    with pytest.raises(TypeError, match="LongTermMemory"):
        ConversationMemory(store=store, long_term="yes")  # type: ignore[arg-type]
    for bad in (-0.1, 1.5, float("nan"), True, "0.5"):
        with pytest.raises(EntryValidationError, match="importance_threshold"):
            ConversationMemory(
                store=store,
                long_term=LongTermMemory(store=store),
                importance_threshold=bad,  # type: ignore[arg-type]
            )
    with pytest.raises(TypeError, match="promotion_scorer"):
        ConversationMemory(store=store, promotion_scorer=0.5)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- manager + context


def estimate(messages: list[Any], estimator: TokenEstimator, stored: dict[str, int]) -> int:
    total = 0
    for message in messages:
        text = message["content"]
        total += stored.get(text, 0) if message["role"] != "system" else estimator.estimate(text)
    return total


async def test_assemble_context_orders_parts_within_the_budget(store: Any, mode: str) -> None:
    manager = MemoryManager(
        store=store,
        max_conversation_tokens=80,
        summarize_threshold=0,
        summarizer=lambda turns: f"{len(turns)} turns about the weather",
        auto_promote=True,
        user_id="alice",
    )
    cid = await call(mode, manager, "new_conversation")
    await call(mode, manager, "add_turn", cid, *NAME_TURN)
    for i in range(10):
        await call(mode, manager, "add_turn", cid, *small_talk(i))
    await call(mode, manager, "set_fact", "timezone", "CET")
    await call(mode, manager, "remember", "Alice's manager is Bob", importance=0.9)

    budget = 120
    context = await call(
        mode, manager, "assemble_context", cid, max_tokens=budget, query="Where does Alice work?"
    )
    roles = [m["role"] for m in context]
    assert roles[:3] == ["system", "system", "system"]
    assert context[0]["content"].startswith("Summary of the earlier conversation:")
    assert context[1]["content"].startswith(LONG_TERM_CONTEXT_PREFIX)
    assert "Acme Corp" in context[1]["content"]
    assert context[2]["content"] == "Working Memory:\n- timezone: CET"
    assert roles[3:] == ["user", "assistant"] * ((len(roles) - 3) // 2)
    assert context[-2]["content"] == small_talk(9)[0]
    turns = await call(mode, manager.conversation, "get_turns", cid)
    estimator = manager.conversation.estimator
    stored = {t.user_prompt: t.token_estimate for t in turns}
    assert estimate(context, estimator, stored) <= budget

    for tight in (10, 25, 40, 60):
        small = await call(mode, manager, "assemble_context", cid, max_tokens=tight)
        assert estimate(small, estimator, stored) <= tight
    few = await call(mode, manager, "assemble_context", cid, max_tokens=budget, max_messages=3)
    assert len(few) <= 3
    no_extras = await call(
        mode,
        manager,
        "assemble_context",
        cid,
        max_tokens=budget,
        query="Acme",
        shares=ContextShares(long_term=0.0, working=0.0),
    )
    assert not any(LONG_TERM_CONTEXT_PREFIX in str(m) for m in no_extras)
    assert not any("Working Memory" in str(m) for m in no_extras)


async def test_assemble_context_validates_and_handles_unknown_conversations(
    store: Any, mode: str
) -> None:
    manager = MemoryManager(store=store)
    assert await call(mode, manager, "assemble_context", "a" * 32) == []
    for kwargs in ({"max_tokens": 0}, {"style": "xml"}, {"query": 3}, {"recall_limit": -1}):
        with pytest.raises(EntryValidationError):
            await call(mode, manager, "assemble_context", "a" * 32, **kwargs)
    with pytest.raises(EntryValidationError, match="shares"):
        ContextShares(long_term=0.8, working=0.5)


async def test_forks_share_long_term_memory_and_only_the_root_clears_it(
    store: Any, mode: str
) -> None:
    root = MemoryManager(store=store, user_id="alice")
    child = root.fork(working_scope_id="child")
    assert child.long_term is root.long_term
    await call(mode, child, "remember", "the project is called Firefly")
    assert [r.item.text for r in await call(mode, root, "recall", "project")] == [
        "the project is called Firefly"
    ]
    await call(mode, child, "clear_all")
    assert await call(mode, root.long_term, "count") == 1
    await call(mode, root, "clear_all")
    assert await call(mode, root.long_term, "count") == 0


async def test_erase_user_removes_promoted_items(store: Any, mode: str) -> None:
    alice = MemoryManager(
        store=store,
        max_conversation_tokens=60,
        summarize_threshold=0,
        auto_promote=True,
        user_id="alice",
    )
    bob = MemoryManager(store=store, user_id="bob")
    cid = await call(mode, alice, "new_conversation")
    await call(mode, alice, "add_turn", cid, *NAME_TURN)
    for i in range(8):
        await call(mode, alice, "add_turn", cid, *small_talk(i))
    await call(mode, bob, "remember", "Bob likes green tea")
    assert await call(mode, alice.long_term, "count") == 1
    await call(mode, alice, "erase_user", "alice")
    assert await call(mode, alice.long_term, "count") == 0
    assert await call(mode, bob.long_term, "count") == 1


# --------------------------------------------------------------------------- selectools example


def name_reporting_model() -> tuple[FunctionModel, list[str]]:
    """A model that answers with the name it finds in its system prompts (or "unknown")."""
    seen: list[str] = []

    def respond(messages: list[pai.ModelMessage], info: AgentInfo) -> pai.ModelResponse:
        system = [
            part.content
            for message in messages
            if isinstance(message, pai.ModelRequest)
            for part in message.parts
            if isinstance(part, pai.SystemPromptPart)
        ]
        seen.extend(system)
        name = "Alice" if any("Alice" in text for text in system) else "unknown"
        return pai.ModelResponse(parts=[pai.TextPart(content=f"Your name is {name}.")])

    return FunctionModel(respond), seen


@pytest.fixture(params=backend_params(["sqlite", "postgres", "mongo"]))
def database_backend(request: pytest.FixtureRequest) -> Iterator[OpenedBackend]:
    """The database backends the issue names for the example."""
    opened = open_backend(request, str(request.param))
    try:
        yield opened
    finally:
        opened.close()


async def test_selectools_unified_memory_example(
    database_backend: OpenedBackend, mode: str
) -> None:
    """A name said early ages out of the window, is promoted, and a later run recalls it."""
    layer_backend = database_backend

    def manager(store: Any) -> MemoryManager:
        return MemoryManager(
            store=store,
            max_conversation_tokens=150,
            summarize_threshold=0,
            auto_promote=True,
            user_id="alice",
        )

    first = manager(layer_backend.store)
    cid = await call(mode, first, "new_conversation")
    await call(mode, first, "add_turn", cid, *NAME_TURN)
    for i in range(12):
        await call(mode, first, "add_turn", cid, *small_talk(i))
    history = await call(mode, first, "get_message_history", cid)
    assert not any("Alice" in str(m) for m in history)  # aged out of the window

    later = manager(layer_backend.reopen())  # a later run, over the same database
    context = await call(
        mode, later, "assemble_context", cid, query="What is my name?", style="pydantic-ai"
    )
    model, seen = name_reporting_model()
    agent = Agent(model)
    if mode == "sync":
        result = await asyncio.to_thread(
            agent.run_sync, "What is my name?", message_history=context
        )
    else:
        result = await agent.run("What is my name?", message_history=context)
    assert result.output == "Your name is Alice."
    assert any(text.startswith(LONG_TERM_CONTEXT_PREFIX) and "Alice" in text for text in seen)


async def test_from_config_sets_long_term_and_promotion(env: pytest.MonkeyPatch, mode: str) -> None:
    for name, value in {
        "LONG_TERM_NAMESPACE": "facts",
        "LONG_TERM_LIMIT": "3",
        "EPISODIC_RETENTION_DAYS": "2",
        "SEARCH_LANGUAGE": "english",
        "AUTO_PROMOTE": "true",
        "IMPORTANCE_THRESHOLD": "0.4",
    }.items():
        env.setenv(f"FIREFLY_AGENTIC_MEMORY_{name}", value)
    if mode == "sync":
        manager = MemoryManager.from_config()
    else:
        manager = await MemoryManager.async_from_config()
    ltm = manager.long_term
    assert (ltm.namespace, ltm.long_term_limit, ltm.episodic_retention_days, ltm.language) == (
        "facts",
        3,
        2.0,
        "english",
    )
    promotion = manager.conversation.promotion
    assert promotion is not None and promotion.threshold == 0.4 and promotion.memory is ltm
