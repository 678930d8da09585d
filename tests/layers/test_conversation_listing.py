"""Conversation metadata, a user's keyset-paged list and usage totals (issue 32).

On every memory-layer backend (sync everywhere, async on the memory store and
PostgreSQL): titles, tags and the archived flag set and listed; every order
paged two at a time gives each conversation once, in order; filters; an append
moves a conversation to the top; usage totals equal the sums of the stored
turns' usage per conversation, user and day, after deletes, branches, copies
and an erase.  Then appends racing on SQLite, PostgreSQL and MongoDB: the
totals equal the sum of the turns' usage.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from modes import call
from store_backends import OpenedBackend, backend_params, layer_mode_params

from firefly_orm.conversation import ConversationInfo, ConversationMemory, UsageTotal
from firefly_orm.errors import ConversationNotFoundError, EntryValidationError

RACE_BACKENDS = backend_params(["sqlite", "postgres", "mongo"])


def _usage(n: int) -> dict[str, Any]:
    return {
        "usage": {"requests": 1, "input_tokens": n, "output_tokens": 2 * n, "total_tokens": 3 * n}
    }


async def _pages(mode: str, mem: ConversationMemory, **options: Any) -> list[ConversationInfo]:
    """Every page of a list, two at a time, checking each page's size."""
    seen: list[ConversationInfo] = []
    cursor = None
    while True:
        page = await call(mode, mem, "list_conversations", "u1", limit=2, cursor=cursor, **options)
        assert len(page.items) <= 2
        seen.extend(page.items)
        if page.next_cursor is None:
            return seen
        assert len(page.items) == 2
        cursor = page.next_cursor


@pytest.mark.parametrize(
    ("layer_backend", "mode"), layer_mode_params(async_on=["memory", "postgres"]), indirect=True
)
async def test_metadata_listing_and_usage(layer_backend: OpenedBackend, mode: str) -> None:
    mem = ConversationMemory(store=layer_backend.store, max_tokens=None)
    ids: list[str] = []
    for n in range(5):
        cid = await call(mode, mem, "new_conversation", user_id="u1")
        await call(mode, mem, "add_turn", cid, f"question {n}", "answer", metadata=_usage(n + 1))
        ids.append(cid)
    other = await call(mode, mem, "new_conversation", user_id="u2")
    await call(mode, mem, "add_turn", other, "theirs", "answer", metadata=_usage(100))

    info = await call(mode, mem, "update_conversation", ids[1], title="Trip", tags=["travel", "x"])
    assert (info.title, info.tags, info.archived) == ("Trip", ["travel", "x"], False)
    await call(mode, mem, "update_conversation", ids[3], tags=["travel"])
    await call(mode, mem, "update_conversation", ids[4], archived=True)
    info = await call(mode, mem, "conversation_info", ids[1])
    assert info.turn_count == 1 and info.turns_added == 1 and info.user_id == "u1"
    assert info.created_at <= info.last_turn_at <= info.updated_at
    # metadata survives an append on the one-statement path and the general one
    await call(mode, mem, "add_turn", ids[1], "more", "answer", metadata=_usage(10))
    info = await call(mode, mem, "conversation_info", ids[1])
    assert (info.title, info.tags, info.turn_count) == ("Trip", ["travel", "x"], 2)

    # newest change first: ids[1] (its turn), then the others by their last write
    listed = await _pages(mode, mem)
    assert [i.conversation_id for i in listed] == [ids[1], ids[3], ids[2], ids[0]]
    oldest = await _pages(mode, mem, order="updated_asc")
    assert oldest == listed[::-1]
    created = await _pages(mode, mem, order="created_desc", archived=None)
    assert [i.conversation_id for i in created] == ids[::-1]
    assert await _pages(mode, mem, order="created_asc", archived=None) == created[::-1]
    assert [i.conversation_id for i in await _pages(mode, mem, archived=True)] == [ids[4]]
    tagged = await _pages(mode, mem, tags=["travel"])
    assert [i.conversation_id for i in tagged] == [ids[1], ids[3]]
    assert [i.conversation_id for i in await _pages(mode, mem, tags=["travel", "x"])] == [ids[1]]
    since = (await call(mode, mem, "conversation_info", ids[3])).updated_at
    assert [i.conversation_id for i in await _pages(mode, mem, updated_after=since)] == [ids[1]]
    await call(mode, mem, "update_conversation", ids[1], clear_title=True)
    assert (await call(mode, mem, "conversation_info", ids[1])).title is None

    # usage: per conversation, per user, per day; the sums of the stored turns
    def total(expected: int, turns: int) -> UsageTotal:
        return UsageTotal(None, turns, turns, expected, 2 * expected, 3 * expected, 0)

    assert await call(mode, mem, "usage_totals", ids[1]) == [total(12, 2)]
    assert await call(mode, mem, "usage_totals", user_id="u1") == [total(25, 6)]
    by_conversation = await call(mode, mem, "usage_totals", user_id="u1", by="conversation")
    assert {t.group: t.input_tokens for t in by_conversation} == {
        ids[0]: 1,
        ids[1]: 12,
        ids[2]: 3,
        ids[3]: 4,
        ids[4]: 5,
    }
    today = datetime.now(UTC)
    days = await call(mode, mem, "usage_totals", user_id="u1", by="day")
    assert [t.input_tokens for t in days] == [25] and days[0].group is not None
    months = await call(mode, mem, "usage_totals", user_id="u1", by="month")
    assert [(t.group, t.input_tokens) for t in months] == [(days[0].group[:7], 25)]
    later = today + timedelta(days=1)
    assert await call(mode, mem, "usage_totals", user_id="u1", since=later) == [total(0, 0)]
    # a branch's and a copy's copied turns are not counted again; their own turns are
    branch = await call(mode, mem, "branch", ids[1], 0)
    await call(mode, mem, "copy_conversation", ids[2])
    await call(mode, mem, "add_turn", branch, "edited", "answer", metadata=_usage(7))
    assert await call(mode, mem, "usage_totals", user_id="u1") == [total(32, 7)]
    # a deleted turn leaves the totals; an erased user leaves nothing
    assert await call(mode, mem, "delete_turn", ids[0], 0)
    assert await call(mode, mem, "usage_totals", user_id="u1") == [total(31, 6)]
    await call(mode, mem, "erase_user", "u1")
    assert await call(mode, mem, "usage_totals", user_id="u1") == [total(0, 0)]
    assert (await call(mode, mem, "list_conversations", "u1")).items == []
    assert await call(mode, mem, "usage_totals", user_id="u2") == [total(100, 1)]


@pytest.mark.parametrize("layer_backend", backend_params(["memory", "sqlite"]), indirect=True)
async def test_bad_input_and_ownership(layer_backend: OpenedBackend, mode: str) -> None:
    mem = ConversationMemory(store=layer_backend.store)
    cid = await call(mode, mem, "new_conversation", user_id="u1")
    await call(mode, mem, "add_turn", cid, "Plan a trip\nto Rome", "Sure")
    for bad in ({"title": ""}, {"title": "x" * 501}, {"tags": "one"}, {"tags": [""]}):
        with pytest.raises(EntryValidationError):
            await call(mode, mem, "update_conversation", cid, **bad)
    for bad_list in ({"order": "title"}, {"limit": 0}, {"cursor": "nonsense"}):
        with pytest.raises(EntryValidationError):
            await call(mode, mem, "list_conversations", "u1", **bad_list)
    with pytest.raises(EntryValidationError):  # a cursor of another order
        page = await call(mode, mem, "list_conversations", "u1", limit=1, archived=None)
        await call(mode, mem, "new_conversation", user_id="u1")
        page = await call(mode, mem, "list_conversations", "u1", limit=1)
        await call(
            mode, mem, "list_conversations", "u1", order="created_asc", cursor=page.next_cursor
        )
    with pytest.raises(EntryValidationError):
        await call(mode, mem, "usage_totals", cid, user_id="u1")
    with pytest.raises(EntryValidationError):
        await call(mode, mem, "usage_totals", user_id="u1", by="week")
    with pytest.raises(ConversationNotFoundError):
        await call(mode, mem, "update_conversation", "missing", title="x")
    # bound to another user: the conversation is not found, the list refused
    theirs = mem.for_user("u2")
    with pytest.raises(ConversationNotFoundError):
        await call(mode, theirs, "conversation_info", cid)
    with pytest.raises(ConversationNotFoundError):
        await call(mode, theirs, "update_conversation", cid, title="mine")
    with pytest.raises(EntryValidationError):
        await call(mode, theirs, "list_conversations", "u1")
    # a title made without a model: the first prompt's first line
    assert await call(mode, mem, "generate_title", cid) == "Plan a trip"
    seen: list[int] = []

    def titler(turns: list[Any]) -> str:
        seen.append(len(turns))
        return '"Rome in May"\nmore text'

    assert await call(mode, mem, "generate_title", cid, titler=titler) == "Rome in May"
    assert seen == [1]
    assert (await call(mode, mem, "conversation_info", cid)).title == "Rome in May"


@pytest.mark.parametrize("layer_backend", RACE_BACKENDS, indirect=True)
def test_usage_totals_after_racing_appends(layer_backend: OpenedBackend) -> None:
    writers, per_writer = 2, 5
    stores = [layer_backend.reopen() for _ in range(writers)]
    mem = ConversationMemory(store=layer_backend.store, max_tokens=None)
    cid = mem.new_conversation(user_id="u1")
    barrier = threading.Barrier(writers)
    errors: list[BaseException] = []

    def write(i: int) -> None:
        local = ConversationMemory(store=stores[i], max_tokens=None)
        barrier.wait()
        try:
            for j in range(per_writer):
                local.add_turn(cid, f"w{i} {j}", "a", metadata=_usage(i * 10 + j))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    turns = mem.get_turns(cid)
    assert len(turns) == writers * per_writer
    stored = sum(t.metadata["usage"]["input_tokens"] for t in turns)
    assert stored == sum(i * 10 + j for i in range(writers) for j in range(per_writer))
    [total] = mem.usage_totals(cid)
    assert (total.turns, total.input_tokens, total.total_tokens) == (10, stored, 3 * stored)
    assert mem.usage_totals(user_id="u1") == [total]
    info = mem.conversation_info(cid)
    assert info.turn_count == info.turns_added == 10
    assert mem.list_conversations("u1").items == [info]


@pytest.mark.parametrize("layer_backend", backend_params(["mongo"]), indirect=True)
def test_mongodb_pages_come_from_its_indexed_find(layer_backend: OpenedBackend) -> None:
    """MongoDB's find over ``ix_user_key_archived_updated`` pages as the general path does."""
    from firefly_orm.conversation._listing import ListRequest, list_page
    from firefly_orm.uow import unit_of_work_for

    mem = ConversationMemory(store=layer_backend.store)
    ids = [mem.new_conversation(user_id="u1") for _ in range(5)]
    for n, cid in enumerate(ids):
        mem.add_turn(cid, f"q{n}", "a")
        mem.update_conversation(cid, tags=["even"] if n % 2 == 0 else [], archived=n == 4)
    for options in ({}, {"order": "updated_asc", "tags": ["even"]}, {"archived": None}):
        cursor = None
        while True:
            request = ListRequest.build(
                "u1",
                order=str(options.get("order", "updated_desc")),
                limit=2,
                archived=options.get("archived", False),  # type: ignore[arg-type]
                tags=options.get("tags"),
                updated_after=None,
                cursor=cursor,
            )
            reader = mem._head_reader(request)
            assert reader is not None  # the indexed find serves it
            with unit_of_work_for(layer_backend.store, read_only=True) as uow:
                general = list_page(uow, request)
                indexed = list_page(uow, request, reader)
            assert indexed == general
            if indexed.next_cursor is None:
                break
            cursor = indexed.next_cursor
