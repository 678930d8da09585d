"""Exactly-once appends: ``add_turn(..., idempotency_key=)`` on every store, sync and async.

A retry with the same key returns the stored turn (also after the turn was
evicted, and after an error raised once the commit had happened, as when a
connection drops right after COMMIT); the same key for another turn is refused
and writes nothing; racing writers of one key store one turn.
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from modes import call

from firefly_orm.bridges import _steps as steps
from firefly_orm.conversation import ConversationMemory, TrimEvent
from firefly_orm.conversation import _idempotency as idempotency
from firefly_orm.errors import DatabaseConnectionError, EntryValidationError


async def test_a_retry_with_the_same_key_returns_the_stored_turn(store: Any, mode: str) -> None:
    trims: list[TrimEvent] = []
    cm = ConversationMemory(store=store, on_trim=trims.append)
    cid = await call(mode, cm, "new_conversation")
    raw = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    first = await call(mode, cm, "add_turn", cid, "hi", "hello", raw, idempotency_key="req-1")
    again = await call(mode, cm, "add_turn", cid, "hi", "hello", raw, idempotency_key="req-1")
    assert again.turn_id == first.turn_id and again.timestamp == first.timestamp
    assert again.raw_messages == raw
    other = await call(mode, cm, "add_turn", cid, "hi", "hello", raw, idempotency_key="req-2")
    assert other.turn_id == first.turn_id + 1  # another key is another turn
    turns = await call(mode, cm, "get_turns", cid)
    assert [t.turn_id for t in turns] == [first.turn_id, other.turn_id]
    assert await call(mode, cm, "get_total_tokens", cid) == 2 * first.token_estimate
    assert await call(mode, cm, "verify", cid) == []


async def test_the_same_key_for_another_turn_is_refused(store: Any, mode: str) -> None:
    cm = ConversationMemory(store=store)
    cid = await call(mode, cm, "new_conversation")
    await call(mode, cm, "add_turn", cid, "hi", "hello", idempotency_key="k")
    before = await call(mode, cm, "export_conversation", cid)
    for prompt, answer, raw in (
        ("hi!", "hello", None),
        ("hi", "hello!", None),
        ("hi", "hello", [{"role": "user", "content": "hi"}]),
    ):
        with pytest.raises(EntryValidationError, match="idempotency_key"):
            await call(mode, cm, "add_turn", cid, prompt, answer, raw, idempotency_key="k")
    assert await call(mode, cm, "export_conversation", cid) == before
    for bad in ("", 7, "a" * 201, "nul\x00"):
        with pytest.raises(EntryValidationError, match="idempotency_key"):
            await call(mode, cm, "add_turn", cid, "x", "y", idempotency_key=bad)
    assert await call(mode, cm, "export_conversation", cid) == before


async def test_an_error_after_the_commit_is_retried_without_a_duplicate(
    store: Any, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection "drops" right after COMMIT: the caller sees an error, retries, and
    gets the turn that was stored, once."""
    cm = ConversationMemory(store=store)
    cid = await call(mode, cm, "new_conversation")
    perform, aperform = steps.Transaction.perform, steps.Transaction.aperform
    drops = {"left": 1}

    def lost(result: Any) -> Any:
        if drops["left"] and getattr(result, "plan", None) is not None:
            drops["left"] -= 1
            raise DatabaseConnectionError("connection lost after COMMIT was sent")
        return result

    def perform_then_drop(self: Any, store: Any) -> Any:
        return lost(perform(self, store))

    async def aperform_then_drop(self: Any, store: Any) -> Any:
        return lost(await aperform(self, store))

    monkeypatch.setattr(steps.Transaction, "perform", perform_then_drop)
    monkeypatch.setattr(steps.Transaction, "aperform", aperform_then_drop)
    with pytest.raises(DatabaseConnectionError):
        await call(mode, cm, "add_turn", cid, "pay the invoice", "done", idempotency_key="pay-7")
    retried = await call(
        mode, cm, "add_turn", cid, "pay the invoice", "done", idempotency_key="pay-7"
    )
    turns = await call(mode, cm, "get_turns", cid)
    assert [(t.turn_id, t.user_prompt) for t in turns] == [(retried.turn_id, "pay the invoice")]
    assert drops["left"] == 0


async def test_a_replay_after_eviction_returns_the_marker_copy(store: Any, mode: str) -> None:
    cm = ConversationMemory(store=store, max_tokens=30, summarize_threshold=0)
    cid = await call(mode, cm, "new_conversation")
    first = await call(mode, cm, "add_turn", cid, "the first question", "yes", idempotency_key="a")
    for i in range(6):
        await call(mode, cm, "add_turn", cid, f"question number {i}", "yes")
    assert first.turn_id not in {t.turn_id for t in await call(mode, cm, "get_turns", cid)}
    count = len(await call(mode, cm, "get_turns", cid))
    replay = await call(mode, cm, "add_turn", cid, "the first question", "yes", idempotency_key="a")
    assert (replay.turn_id, replay.user_prompt, replay.token_estimate) == (
        first.turn_id,
        first.user_prompt,
        first.token_estimate,
    )
    assert len(await call(mode, cm, "get_turns", cid)) == count


def test_racing_writers_of_one_key_store_one_turn(store: Any) -> None:
    cm = ConversationMemory(store=store)
    cid = cm.new_conversation()
    results: list[int] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def writer() -> None:
        try:
            barrier.wait()
            results.append(cm.add_turn(cid, "once", "only", idempotency_key="race").turn_id)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert len(set(results)) == 1 and len(results) == 4
    assert [t.user_prompt for t in cm.get_turns(cid)] == ["once"]


async def test_a_key_is_free_again_after_the_window(
    store: Any, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    window = timedelta(seconds=0.1)
    monkeypatch.setattr(idempotency, "IDEMPOTENCY_WINDOW", window)
    cm = ConversationMemory(store=store)
    cid = await call(mode, cm, "new_conversation")
    first = await call(mode, cm, "add_turn", cid, "hi", "hello", idempotency_key="k")
    # The marker expires `window` after the write, which is over when add_turn returns.
    if mode == "sync":
        time.sleep(window.total_seconds() + 0.05)
    else:
        await asyncio.sleep(window.total_seconds() + 0.05)
    later = await call(mode, cm, "add_turn", cid, "hi", "hello", idempotency_key="k")
    assert later.turn_id == first.turn_id + 1
