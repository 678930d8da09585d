"""``ConversationMemory.verify`` / ``repair``: a conversation's head checked against its turns.

Runs on every memory-layer backend (conftest's ``layer_backend``).  Each test
corrupts a head the way a crash on a non-atomic store (or a hand edit) would,
by writing the head row directly through the store, then checks that
``verify`` names the difference, ``repair`` rebuilds the head from the stored
turns (logging a WARNING) and ``verify`` is then empty; a consistent
conversation is never written.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import pytest
from store_backends import backend_params, open_backend

from firefly_orm.conversation import (
    HEAD_KEY,
    INDEX_NAMESPACE,
    ConversationMemory,
    Inconsistency,
    conversation_namespace,
    turn_key,
)
from firefly_orm.conversation._repair import repair_head
from firefly_orm.entry import MemoryEntry
from firefly_orm.errors import (
    ConcurrencyError,
    EntryValidationError,
    NotFoundError,
    StoreCorruptedError,
)
from firefly_orm.manager import MemoryManager
from firefly_orm.uow import unit_of_work_for

# --------------------------------------------------------------------------- helpers


def _head(store: Any, cid: str) -> MemoryEntry:
    head = store.load_by_key(conversation_namespace(cid), HEAD_KEY)
    assert head is not None
    return head  # type: ignore[no-any-return]


def _corrupt_head(store: Any, cid: str, **content: Any) -> None:
    """Overwrite fields of the stored head row, as a crash or a hand edit would leave it."""
    head = _head(store, cid)
    store.save(conversation_namespace(cid), head.copy_entry(content={**head.content, **content}))


def _conversation(store: Any, turns: int = 3, **options: Any) -> tuple[ConversationMemory, str]:
    mem = ConversationMemory(store=store, **options)
    cid = mem.new_conversation()
    for n in range(turns):
        mem.add_turn(cid, f"question {n}", f"answer {n} " * (n + 1))
    return mem, cid


def _true_totals(mem: ConversationMemory, cid: str) -> tuple[int, int]:
    turns = mem.get_turns(cid)
    return len(turns), sum(t.token_estimate for t in turns)


# --------------------------------------------------------------------------- consistent


def test_a_consistent_conversation_is_reported_clean_and_never_written(
    store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    mem, cid = _conversation(store, turns=6, max_tokens=30, summarize_threshold=0)
    mem.import_conversation({"conversation_id": "imported", "turns": [{"user_prompt": "x"}]})
    empty = mem.new_conversation()
    for conversation_id in (cid, "imported", empty):
        version = _head(store, conversation_id).version
        with caplog.at_level(logging.WARNING, logger="firefly_orm"):
            assert mem.verify(conversation_id) == []
            assert mem.repair(conversation_id) == []
        assert _head(store, conversation_id).version == version  # nothing was written
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_evicted_and_archived_conversations_are_consistent(store: Any) -> None:
    mem, cid = _conversation(
        store, turns=8, max_tokens=25, summarize_threshold=0, keep_evicted=True
    )
    assert mem.get_archived_turns(cid)  # some turns were evicted into the archive
    version = _head(store, cid).version
    assert mem.verify(cid) == []
    assert mem.repair(cid) == []
    assert _head(store, cid).version == version


# --------------------------------------------------------------------------- corrupted heads


def test_wrong_counters_are_reported_then_repaired(
    store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    mem, cid = _conversation(store)
    mem.import_conversation(
        {"conversation_id": cid, "turns": mem.export_conversation(cid)["turns"], "summary": "kept"}
    )
    count, total = _true_totals(mem, cid)
    _corrupt_head(store, cid, turn_count=count + 4, total_tokens=total - 1)

    assert mem.verify(cid) == [
        Inconsistency("turn_count", count + 4, count),
        Inconsistency("total_tokens", total - 1, total),
    ]
    assert mem.get_total_tokens(cid) == total - 1  # what readers see until it is repaired
    version = _head(store, cid).version
    with caplog.at_level(logging.WARNING, logger="firefly_orm"):
        fixed = mem.repair(cid)
    assert [issue.field for issue in fixed] == ["turn_count", "total_tokens"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert cid in warnings[0] and "turn_count: stored 7, expected 3" in warnings[0]

    assert mem.verify(cid) == []
    head = _head(store, cid)
    assert head.version == version + 1  # one write, at the version read
    assert head.content["turn_count"] == count and head.content["total_tokens"] == total
    assert mem.get_total_tokens(cid) == total
    assert mem.get_summary(cid) == "kept"  # what the turns cannot tell is kept


def test_a_stale_next_turn_id_is_raised_above_every_stored_turn(store: Any) -> None:
    mem, cid = _conversation(store)
    _corrupt_head(store, cid, next_turn_id=1)  # the next turn would overwrite turn 1
    assert mem.verify(cid) == [Inconsistency("next_turn_id", 1, 3)]
    assert [issue.field for issue in mem.repair(cid)] == ["next_turn_id"]
    assert mem.verify(cid) == []
    assert mem.add_turn(cid, "after the repair", "ok").turn_id == 3
    turns = mem.get_turns(cid)
    assert [t.turn_id for t in turns] == [0, 1, 2, 3]
    assert turns[1].user_prompt == "question 1"  # not overwritten


def test_a_higher_next_turn_id_is_kept(store: Any) -> None:
    mem, cid = _conversation(store)
    _corrupt_head(store, cid, next_turn_id=50, turn_count=0)
    assert mem.verify(cid) == [Inconsistency("turn_count", 0, 3)]
    mem.repair(cid)
    assert _head(store, cid).content["next_turn_id"] == 50  # ids are never reused


def test_archived_turn_ids_are_never_reused(store: Any) -> None:
    mem, cid = _conversation(
        store, turns=8, max_tokens=25, summarize_threshold=0, keep_evicted=True
    )
    newest_archived = mem.get_archived_turns(cid)[-1].turn_id
    namespace = conversation_namespace(cid)
    for turn in mem.get_turns(cid):  # every retained turn row lost
        store.delete(namespace, store.load_by_key(namespace, turn_key(turn.turn_id)).entry_id)
    _corrupt_head(store, cid, next_turn_id=0)
    found = {issue.field: issue for issue in mem.verify(cid)}
    assert found["next_turn_id"] == Inconsistency("next_turn_id", 0, newest_archived + 1)
    assert found["turn_count"].expected == 0 and found["total_tokens"].expected == 0
    mem.repair(cid)
    assert mem.verify(cid) == []
    assert mem.add_turn(cid, "next", "one").turn_id == newest_archived + 1


def test_a_wrong_message_total_is_repaired_and_a_missing_one_is_not_an_issue(
    store: Any,
) -> None:
    mem, cid = _conversation(store)
    mem.add_turn(cid, "with raw", "messages", [{"role": "user", "content": "x"}] * 3)
    head = _head(store, cid)
    old_style = {k: v for k, v in head.content.items() if k != "total_messages"}
    store.save(conversation_namespace(cid), head.copy_entry(content=old_style))
    assert mem.verify(cid) == []  # heads written before message counts were kept have none
    _corrupt_head(store, cid, total_messages=99)
    assert mem.verify(cid) == [Inconsistency("total_messages", 99, 3 * 2 + 3)]
    mem.repair(cid)
    assert _head(store, cid).content["total_messages"] == 9
    assert mem.verify(cid) == []


def test_rebuilt_rows_keep_the_conversations_owner(store: Any) -> None:
    mem, cid = _conversation(store)
    index_row = store.load_by_key(INDEX_NAMESPACE, cid)
    store.save(INDEX_NAMESPACE, index_row.copy_entry(user_id="ada"))
    if store.load_by_key(INDEX_NAMESPACE, cid).user_id != "ada":  # user_id is new (issue 10)
        pytest.skip(f"{type(store).__name__} does not keep user_id yet")
    store.delete(conversation_namespace(cid), _head(store, cid).entry_id)
    assert [issue.field for issue in mem.repair(cid)] == ["head"]
    assert _head(store, cid).user_id == "ada"
    store.delete(INDEX_NAMESPACE, index_row.entry_id)
    assert [issue.field for issue in mem.repair(cid)] == ["indexed"]
    assert store.load_by_key(INDEX_NAMESPACE, cid).user_id == "ada"


def test_a_bad_summary_and_conversation_id_are_reported_and_fixed(store: Any) -> None:
    mem, cid = _conversation(store)
    _corrupt_head(store, cid, summary=42, conversation_id="someone-else")
    assert mem.verify(cid) == [
        Inconsistency("summary", 42, None),
        Inconsistency("conversation_id", "someone-else", cid),
    ]
    mem.repair(cid)
    assert mem.verify(cid) == []
    assert _head(store, cid).content["conversation_id"] == cid
    assert mem.get_summary(cid) is None


def test_a_missing_head_and_index_row_are_rebuilt_from_the_turns(store: Any) -> None:
    """What a crash between a first turn's insert and its head leaves on a non-atomic store."""
    mem, cid = _conversation(store)
    count, total = _true_totals(mem, cid)
    store.delete(conversation_namespace(cid), _head(store, cid).entry_id)
    store.delete(INDEX_NAMESPACE, store.load_by_key(INDEX_NAMESPACE, cid).entry_id)
    assert cid not in mem.conversation_ids

    expected_head = {
        "turn_count": count,
        "total_tokens": total,
        "next_turn_id": 3,
        "total_messages": 2 * count,  # turns without raw messages count as two
        "summary": None,
    }
    assert mem.verify(cid) == [
        Inconsistency("head", None, expected_head),
        Inconsistency("indexed", False, True),
    ]
    assert [issue.field for issue in mem.repair(cid)] == ["head", "indexed"]
    assert mem.verify(cid) == []
    assert cid in mem.conversation_ids
    assert mem.get_total_tokens(cid) == total
    assert mem.add_turn(cid, "next", "one").turn_id == 3


def test_only_a_missing_index_row_writes_no_head(store: Any) -> None:
    mem, cid = _conversation(store)
    store.delete(INDEX_NAMESPACE, store.load_by_key(INDEX_NAMESPACE, cid).entry_id)
    version = _head(store, cid).version
    assert mem.repair(cid) == [Inconsistency("indexed", False, True)]
    assert _head(store, cid).version == version
    assert cid in mem.conversation_ids


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("method", ["verify", "repair"])
def test_a_missing_conversation_or_bad_id_is_refused(store: Any, method: str) -> None:
    mem, cid = _conversation(store, turns=1)
    call = getattr(mem, method)
    with pytest.raises(NotFoundError, match="no conversation 'nope' in this store"):
        call("nope")
    bad_ids: tuple[Any, ...] = ("", "a\x00b", 7)
    for bad in bad_ids:
        with pytest.raises(EntryValidationError, match="conversation_id") as bad_info:
            call(bad)
        with pytest.raises(type(bad_info.value)):  # what every other method raises
            mem.get_turns(bad)
    assert mem.verify(cid) == []  # nothing was written


def test_an_unreadable_turn_is_an_error_and_nothing_is_written(store: Any) -> None:
    mem, cid = _conversation(store)
    namespace = conversation_namespace(cid)
    row = store.load_by_key(namespace, turn_key(1))
    store.save(namespace, row.copy_entry(content={**row.content, "token_estimate": "many"}))
    _corrupt_head(store, cid, turn_count=9)
    version = _head(store, cid).version
    for method in (mem.verify, mem.repair):
        with pytest.raises(StoreCorruptedError, match="unreadable turn"):
            method(cid)
    assert _head(store, cid).version == version


# --------------------------------------------------------------------------- twins and facade


def test_async_twins(store: Any) -> None:
    mem, cid = _conversation(store)
    count, _total = _true_totals(mem, cid)
    _corrupt_head(store, cid, turn_count=count + 1)

    async def main() -> tuple[list[Inconsistency], list[Inconsistency], list[Inconsistency]]:
        return await mem.async_verify(cid), await mem.async_repair(cid), await mem.async_verify(cid)

    before, fixed, after = asyncio.run(main())
    assert before == fixed == [Inconsistency("turn_count", count + 1, count)]
    assert after == []
    with pytest.raises(NotFoundError, match="no conversation"):
        asyncio.run(mem.async_repair("nope"))


def test_the_manager_mirrors_verify_and_repair(store: Any) -> None:
    mgr = MemoryManager(store=store)
    cid = mgr.new_conversation()
    mgr.add_turn(cid, "hi", "hello")
    _corrupt_head(store, cid, total_tokens=0)
    assert [i.field for i in mgr.verify_conversation(cid)] == ["total_tokens"]
    assert [i.field for i in asyncio.run(mgr.async_verify_conversation(cid))] == ["total_tokens"]
    assert [i.field for i in mgr.repair_conversation(cid)] == ["total_tokens"]
    assert asyncio.run(mgr.async_repair_conversation(cid)) == []
    assert mgr.verify_conversation(cid) == []


# --------------------------------------------------------------------------- concurrency


@pytest.mark.parametrize("backend", backend_params(["memory", "file", "mongo"]))
def test_repair_saves_at_the_version_it_read(request: pytest.FixtureRequest, backend: str) -> None:
    """A head changed after the repair read it fails the repair's commit: nothing is written.

    (On SQL stores the head is locked instead: a concurrent writer waits, which
    ``test_verify_and_repair_beside_writers`` runs.)
    """
    opened = open_backend(request, backend)
    try:
        mem, cid = _conversation(opened.store)
        _corrupt_head(opened.store, cid, turn_count=99)
        with pytest.raises(ConcurrencyError), unit_of_work_for(opened.store) as uow:
            assert [i.field for i in repair_head(uow, cid)] == ["turn_count"]
            mem.add_turn(cid, "meanwhile", "a writer")  # commits head version + 1 (and 99 + 1)
            uow.commit()
        head = _head(opened.store, cid)
        assert head.content["turn_count"] == 100  # the writer's head, not the repair's
        assert [i.field for i in mem.repair(cid)] == ["turn_count"]  # a new attempt works
        assert mem.verify(cid) == []
    finally:
        opened.close()


@pytest.mark.parametrize("backend", backend_params(["sqlite", "postgres"]))
def test_verify_and_repair_beside_writers(request: pytest.FixtureRequest, backend: str) -> None:
    """SQL stores read the head under the writers' lock: a turn being added is never reported."""
    opened = open_backend(request, backend)
    try:
        mem, cid = _conversation(opened.store, turns=1, max_tokens=60, summarize_threshold=0)
        writers, per_writer = 3, 15
        reports: list[list[Inconsistency]] = []
        done = threading.Event()
        errors: list[BaseException] = []

        def write(n: int) -> None:
            try:
                for i in range(per_writer):
                    mem.add_turn(cid, f"writer {n} turn {i}", "an answer of a few words")
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        def check() -> None:
            while not done.is_set():
                reports.append(mem.verify(cid))
                reports.append(mem.repair(cid))

        threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
        checker = threading.Thread(target=check)
        checker.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done.set()
        checker.join()
        print(f"{backend}: {len(reports)} checks beside {writers * per_writer} turns added")
        assert errors == []
        assert [r for r in reports if r] == []
        assert len(reports) >= 2
        assert mem.verify(cid) == []
        assert _head(opened.store, cid).content["next_turn_id"] == 1 + writers * per_writer
    finally:
        opened.close()
