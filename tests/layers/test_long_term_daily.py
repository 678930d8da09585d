"""Daily logs of long-term memory on every store (selectools' knowledge-memory logs).

remember() writes its line in the same unit of work as the item; daily_log(day)
reads a day, log_days() lists them, prune_daily_logs(before=...) removes whole days.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from modes import call
from store_backends import OpenedBackend, layer_mode_params

from firefly_orm.bridges._steps import Transaction, run
from firefly_orm.errors import EntryValidationError
from firefly_orm.long_term import LongTermMemory
from firefly_orm.long_term._daily import store_and_log

BACKEND_MODES = pytest.mark.parametrize(
    ("layer_backend", "mode"),
    layer_mode_params(async_on=("memory", "sqlite", "redis")),
    indirect=True,
)


def remember_on(memory: LongTermMemory, day: date, text: str) -> str:
    """Remember ``text`` as if on ``day`` (noon UTC), through the same transaction."""
    entry = memory.entry_for(text, tags=["old"]).copy_entry(
        created_at=datetime(day.year, day.month, day.day, 12, tzinfo=UTC)
    )
    run(memory.store, iter(Transaction.write(store_and_log, memory.namespace, [entry], None)))
    return entry.entry_id


@BACKEND_MODES
async def test_remember_logs_the_day_and_owners_read_their_own(
    layer_backend: OpenedBackend, mode: str
) -> None:
    ada = LongTermMemory(store=layer_backend.store, user_id="ada")
    bob = LongTermMemory(store=layer_backend.store, user_id="bob")
    tea = await call(mode, ada, "remember", "Ada likes tea", tags=["drinks"], importance=0.9)
    await call(mode, ada, "remember", "Ada met Bob", kind="episodic", key="met-bob")
    await call(mode, bob, "remember", "Bob likes coffee")
    today = datetime.now(UTC).date()
    again = LongTermMemory(store=layer_backend.reopen(), user_id="ada")
    assert await call(mode, again, "log_days") == [today]
    lines = await call(mode, again, "daily_log", today)
    assert [(x.text, x.kind, x.tags, x.key, x.user_id) for x in lines] == [
        ("Ada likes tea", "semantic", ("drinks",), None, "ada"),
        ("Ada met Bob", "episodic", (), "met-bob", "ada"),
    ]
    assert lines[0].item_id == tea and lines[0].importance == 0.9
    assert str(lines[1]).endswith("[episodic] Ada met Bob")
    assert await call(mode, again, "daily_log", today.isoformat()) == lines
    assert [x.text for x in await call(mode, bob, "daily_log", today)] == ["Bob likes coffee"]
    # Forgetting an item keeps its line: the log is history.
    assert await call(mode, ada, "forget", tea)
    assert len(await call(mode, ada, "daily_log", today)) == 2
    assert await call(mode, ada, "daily_log", today - timedelta(days=3)) == []
    with pytest.raises(EntryValidationError):
        await call(mode, ada, "daily_log", "yesterday")


@BACKEND_MODES
async def test_prune_removes_whole_days_before_a_date(
    layer_backend: OpenedBackend, mode: str
) -> None:
    ada = LongTermMemory(store=layer_backend.store, user_id="ada")
    bob = LongTermMemory(store=layer_backend.store, user_id="bob")
    days = [date(2026, 1, 1), date(2026, 1, 2), date(2026, 1, 5)]
    for n, day in enumerate(days):
        remember_on(ada, day, f"fact {n}")
    remember_on(ada, days[0], "another on day one")
    remember_on(bob, days[0], "bob's")
    assert await call(mode, ada, "log_days") == days
    assert await call(mode, ada, "prune_daily_logs", before=days[2]) == 3
    assert await call(mode, ada, "log_days") == [days[2]]
    assert await call(mode, ada, "daily_log", days[0]) == []
    assert [x.text for x in await call(mode, ada, "daily_log", days[2])] == ["fact 2"]
    # The items stay, and so does another owner's log.
    assert await call(mode, ada, "count") == 4
    assert await call(mode, bob, "log_days") == [days[0]]
    with pytest.raises(EntryValidationError):
        await call(mode, ada, "prune_daily_logs", before=datetime(2026, 1, 3))  # naive
    assert await call(mode, bob, "prune_daily_logs", before="2027-01-01") == 1
    assert await call(mode, bob, "log_days") == []


def test_the_log_is_encrypted_with_its_items() -> None:
    from firefly_orm.privacy import Encryption, KeyRing, generate_key, protect
    from firefly_orm.store import InMemoryStore

    raw = InMemoryStore()
    keys = KeyRing({"k1": generate_key()})
    encryption = Encryption(keys, namespaces=["long-term"], searchable=["long-term"])
    memory = LongTermMemory(store=protect(raw, encryption=encryption))
    memory.remember("Zebra7741Secret lives here")
    rows = raw.load("long-term:daily-log")
    assert len(rows) == 2 and all("Zebra7741" not in str(row.content) for row in rows)
    (day,) = memory.log_days()
    assert [line.text for line in memory.daily_log(day)] == ["Zebra7741Secret lives here"]
