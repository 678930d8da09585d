"""A user's conversation list and usage totals are indexed reads on MongoDB (issue 32).

The heads of many users (half of the listing user's archived) and turns with
usage are written in bulk; then ``list_conversations`` pages ten pages deep in
both orders and ``usage_totals`` sums a user's turns by day in a time range.
The very ``find`` each sent is explained by the server (the SecantusDB test
server, or whatever ``mongo_url`` finds) with ``executionStats``: the winning
plan is an ``IXSCAN`` of the listing index of that order (or of
``ix_user_created_key``), no ``COLLSCAN``; the documents examined are the
user's turns in the range for the totals, whatever the collection holds
besides, and for a page eleven pages in ``limit + 1`` when the index gives the
order (MongoDB: no ``SORT`` stage).  SecantusDB sorts in memory whatever the
index (a ``SORT`` stage over every ``find`` with a sort): there the page
examines the heads from the cursor on, never those before it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from dbutil import CommandRecorder
from pymongo import AsyncMongoClient, MongoClient

from firefly_orm._layout import head_time, turn_key
from firefly_orm.bridges._loop_thread import shared_loop
from firefly_orm.conversation import ConversationMemory
from firefly_orm.entry import MemoryEntry
from firefly_orm.mongo import MongoDBStore
from firefly_orm.mongo._document import (
    CONVERSATION_CREATED_INDEX,
    CONVERSATION_LIST_INDEX,
    USER_TIME_INDEX,
    entry_to_document,
)

pytestmark = pytest.mark.mongo

MINE, OTHERS = 120, 100  # heads of the listing user (half archived), of others
DAYS, TURNS_A_DAY = 10, 3  # the listing user's turns with usage (another user's as many)
START = datetime(2026, 10, 1, tzinfo=UTC)


@dataclass
class Setup:
    store: MongoDBStore
    finds: CommandRecorder
    raw: MongoClient[dict[str, Any]]
    database: str


def _head(cid: str, user: str, number: int, archived: bool) -> dict[str, Any]:
    content = {
        "conversation_id": cid,
        "next_turn_id": 1,
        "total_tokens": 0,
        "turn_count": 0,
        "summary": None,
        "total_messages": 0,
        "updated_at": head_time(START + timedelta(seconds=number * 7 % 5000)),
        "archived": archived,
    }
    entry = MemoryEntry(
        namespace=f"conversation:{cid}",
        scope="conversation",
        key="head",
        content=content,
        created_at=START - timedelta(seconds=number),
        user_id=user,
    )
    return entry_to_document(entry, f"conversation:{cid}")


def _turn(cid: str, user: str, number: int, created: datetime) -> dict[str, Any]:
    usage = {"requests": 1, "input_tokens": number, "output_tokens": 1, "total_tokens": number + 1}
    entry = MemoryEntry(
        namespace=f"conversation:{cid}",
        scope="conversation",
        key=turn_key(number),
        content={"turn_id": number, "metadata": {"usage": usage}},
        created_at=created,
        user_id=user,
    )
    return entry_to_document(entry, f"conversation:{cid}")


@pytest.fixture(scope="module")
def mongo(mongo_url: str) -> Iterator[Setup]:
    finds = CommandRecorder("find")

    async def new_client() -> AsyncMongoClient[dict[str, Any]]:
        return AsyncMongoClient(mongo_url, tz_aware=True, event_listeners=[finds])

    client = shared_loop().call(new_client())  # born on the loop the store runs its I/O on
    database = "t_" + uuid.uuid4().hex[:10]
    store = MongoDBStore(client=client, database=database)
    store.initialize()
    raw: MongoClient[dict[str, Any]] = MongoClient(mongo_url, tz_aware=True)
    try:
        documents = [_head(f"a{n}", "ann", n, n % 2 == 0) for n in range(MINE)]
        documents += [_head(f"o{n}", f"user{n % 300}", n, False) for n in range(OTHERS)]
        for day in range(DAYS):
            for n in range(TURNS_A_DAY):
                moment = START + timedelta(days=day, hours=n, microseconds=n)
                documents.append(_turn(f"a{n}", "ann", day * TURNS_A_DAY + n + 1, moment))
                documents.append(_turn(f"o{n}", "bob", day * TURNS_A_DAY + n + 1, moment))
        raw[database][store.collection_name].insert_many(documents)
        yield Setup(store, finds, raw, database)
    finally:
        store.close()
        shared_loop().call(client.close())
        raw.drop_database(database)
        raw.close()


def _stages(plan: dict[str, Any]) -> list[dict[str, Any]]:
    stages = [plan]
    for child in [plan.get("inputStage"), *plan.get("inputStages", [])]:
        if isinstance(child, dict):
            stages.extend(_stages(child))
    return stages


def _explained(setup: Setup, find: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    """The winning plan's stages and the documents examined of ``find``, run again."""
    command = {k: v for k, v in find.items() if k not in ("lsid", "$db", "$clusterTime")}
    explained = setup.raw[setup.database].command("explain", command, verbosity="executionStats")
    planner = explained.get("queryPlanner", {})
    stats = explained.get("executionStats", {})
    assert "winningPlan" in planner, explained
    return _stages(planner["winningPlan"]), int(stats["totalDocsExamined"])


@pytest.mark.parametrize(
    ("order", "index"),
    [("updated_desc", CONVERSATION_LIST_INDEX), ("created_asc", CONVERSATION_CREATED_INDEX)],
)
def test_a_deep_page_examines_limit_plus_one_heads(mongo: Setup, order: str, index: str) -> None:
    mem = ConversationMemory(store=mongo.store)
    cursor = None
    seen: list[str] = []
    for _ in range(11):
        mongo.finds.sent.clear()
        page = mem.list_conversations("ann", limit=5, order=order, cursor=cursor)
        seen += [item.conversation_id for item in page.items]
        cursor = page.next_cursor
    assert len(seen) == len(set(seen)) == 55
    assert all(int(cid[1:]) % 2 == 1 for cid in seen)  # the archived ones are not listed
    stamps = [
        item.updated_at if order == "updated_desc" else item.created_at for item in page.items
    ]
    assert stamps == sorted(stamps, reverse=order.endswith("desc"))  # type: ignore[type-var]
    # not archived: one find for archived false, one for no flag (none here)
    sent = [f for f in mongo.finds.sent if f.get("filter", {}).get("key") == "head"]
    assert len(sent) == 2
    for find in sent:
        stages, examined = _explained(mongo, find)
        names = [(s.get("stage"), s.get("indexName")) for s in stages]
        print(f"\nmongo list_conversations {order}, page 11: {names}, examined {examined}")
        assert ("IXSCAN", index) in names, names
        assert not any(stage == "COLLSCAN" for stage, _ in names), names
        if any(stage == "SORT" for stage, _ in names):
            # SecantusDB never takes the order from an index (it sorts what the
            # scan gives): it still seeks to the cursor, so it examines the heads
            # past it (those of this state), not the ones before it or others'.
            flag = find["filter"]["content.archived"]
            assert examined == (MINE // 2 - 50 if flag is False else 0), examined
        else:
            assert examined <= 6  # MongoDB: limit + 1, eleven pages in


def test_usage_totals_find_examines_the_users_turns_in_range(mongo: Setup) -> None:
    mem = ConversationMemory(store=mongo.store)
    since, until = START + timedelta(days=5), START + timedelta(days=8)
    mongo.finds.sent.clear()
    totals = mem.usage_totals(user_id="ann", by="day", since=since, until=until)
    assert [t.group for t in totals] == ["2026-10-06", "2026-10-07", "2026-10-08"]
    for day, total in zip(range(5, 8), totals, strict=True):
        numbers = [day * TURNS_A_DAY + n + 1 for n in range(TURNS_A_DAY)]
        assert (total.turns, total.input_tokens) == (TURNS_A_DAY, sum(numbers))
    [find] = [f for f in mongo.finds.sent if "created_at" in f.get("filter", {})]
    stages, examined = _explained(mongo, find)
    names = [(s.get("stage"), s.get("indexName")) for s in stages]
    print(f"\nmongo usage_totals by day, 3 of {DAYS} days: {names}, documents examined {examined}")
    assert ("IXSCAN", USER_TIME_INDEX) in names, names
    assert not any(stage == "COLLSCAN" for stage, _ in names), names
    assert examined == 3 * TURNS_A_DAY  # the user's turns of those days, nothing else
