"""The budget rules of issue 33 on every store, sync and async.

* Firefly's threshold rule: above ``summarize_threshold`` the oldest turns are
  evicted and summarised down to it, whatever ``max_tokens`` is, through the SQL
  stores' one-statement append as well as the general path;
* selectools' ``max_tokens=None`` (no token limit);
* selectools' "keep at least one message": a newest turn over the budget is
  read back (or its newest messages, a tool call never split from its result),
  and the trim event says so.
"""

from __future__ import annotations

from typing import Any

from modes import call
from store_backends import OpenedBackend

from firefly_orm.conversation import ConversationMemory, ConversationTurn, TrimEvent


def words(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def summarize(turns: list[ConversationTurn]) -> str:
    return "summary of " + ",".join(str(t.turn_id) for t in turns)


def tool_round(n: int, result: str = "sunny") -> list[dict[str, Any]]:
    call_id = f"call{n}"
    return [
        {"role": "user", "content": f"weather {n}?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "w", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": result},
        {"role": "assistant", "content": f"it is {result}"},
    ]


async def test_the_threshold_evicts_down_to_itself_on_every_path(
    layer_backend: OpenedBackend, mode: str
) -> None:
    """A new memory for each turn: it knows no totals, so the SQL stores try their
    one-statement append first, which must refuse a turn that crosses the threshold
    (the planner would disagree with what it wrote)."""
    events: list[TrimEvent] = []

    def memory() -> ConversationMemory:
        return ConversationMemory(
            store=layer_backend.store,
            max_tokens=1_000,
            summarize_threshold=25,
            summarizer=summarize,
            on_trim=events.append,
        )

    for n in range(6):
        await call(mode, memory(), "add_turn", "c", words(4, f"p{n}-"), words(4, f"r{n}-"))
    mem = memory()
    turns = await call(mode, mem, "get_turns", "c")
    assert [(t.turn_id, t.token_estimate) for t in turns] == [(4, 10), (5, 10)]
    assert await call(mode, mem, "get_total_tokens", "c") == 20
    assert await call(mode, mem, "get_summary", "c") == "summary of -1,3"
    assert [(e.reason, e.evicted_turn_ids) for e in events] == [
        ("summarize_threshold", (n,)) for n in range(4)
    ]
    assert not any(e.newest_over_budget for e in events)
    assert await call(mode, mem, "verify", "c") == []


async def test_no_token_limit_on_every_store(layer_backend: OpenedBackend, mode: str) -> None:
    mem = ConversationMemory(store=layer_backend.store, max_tokens=None, max_messages=4)
    for n in range(3):
        await call(mode, mem, "add_turn", "c", words(3_000), words(3_000), [{"m": n}])
    assert await call(mode, mem, "get_message_history", "c") == [{"m": n} for n in range(3)]
    assert await call(mode, mem, "get_context", "c") == [{"m": n} for n in range(3)]
    assert await call(mode, mem, "get_total_tokens", "c") == 3 * 7_980


async def test_an_oversize_newest_turn_gives_its_newest_messages(
    layer_backend: OpenedBackend, mode: str
) -> None:
    events: list[TrimEvent] = []
    mem = ConversationMemory(store=layer_backend.store, max_tokens=30, on_trim=events.append)
    raw = [
        {"role": "user", "content": "tell me everything"},
        {"role": "assistant", "content": words(100)},
        {"role": "user", "content": "in short?"},
        {"role": "assistant", "content": "no"},
    ]
    await call(mode, mem, "add_turn", "c", "tell me everything", "no", raw)
    # The turn alone is over 30 tokens; its last two messages fit and may open a history.
    assert await call(mode, mem, "get_message_history", "c") == raw[2:]
    assert await call(mode, mem, "get_context", "c") == raw[2:]
    (event,) = events  # nothing was evicted, but the write is reported
    assert (event.turns_removed, event.newest_over_budget, event.reason) == (
        0,
        True,
        "max_tokens",
    )


async def test_a_tool_call_is_never_split_from_its_result_to_keep_one_message(
    layer_backend: OpenedBackend, mode: str
) -> None:
    events: list[TrimEvent] = []
    mem = ConversationMemory(store=layer_backend.store, max_messages=2, on_trim=events.append)
    await call(mode, mem, "add_turn", "c", "hi", "hello", [{"role": "user", "content": "hi"}])
    await call(mode, mem, "add_turn", "c", "weather 1?", "it is sunny", tool_round(1))
    # 4 messages > 2: the older turn is evicted, and the newest comes whole (its only
    # opening message is its prompt; the call and its result stay together).
    assert [t.turn_id for t in await call(mode, mem, "get_turns", "c")] == [1]
    assert await call(mode, mem, "get_message_history", "c") == tool_round(1)
    assert await call(mode, mem, "get_context", "c") == tool_round(1)
    (event,) = events
    assert (event.reason, event.evicted_turn_ids, event.newest_over_budget) == (
        "max_messages",
        (0,),
        True,
    )


async def test_the_newest_messages_follow_the_summary_and_the_pinned_turns(
    layer_backend: OpenedBackend, mode: str
) -> None:
    mem = ConversationMemory(
        store=layer_backend.store, max_tokens=40, pin_count=1, summarizer=summarize
    )
    intro = [{"role": "user", "content": "I am Ada"}, {"role": "assistant", "content": "hi"}]
    await call(mode, mem, "add_turn", "c", "I am Ada", "hi", intro)
    for n in (1, 2):
        await call(mode, mem, "add_turn", "c", f"q{n}", f"a{n}", [{"role": "user", "content": "x"}])
    big = [{"role": "user", "content": words(60)}, {"role": "assistant", "content": "ok"}]
    await call(mode, mem, "add_turn", "c", words(60), "ok", big)  # 81 tokens > 40
    assert [t.turn_id for t in await call(mode, mem, "get_turns", "c")] == [0, 3]
    context = await call(mode, mem, "get_context", "c")
    assert context[0] == {
        "role": "system",
        "content": "Summary of the earlier conversation:\nsummary of 1,2",
    }
    assert context[1:] == intro + big  # over the budget, but the newest turn is there
    assert await call(mode, mem, "get_message_history", "c") == big
