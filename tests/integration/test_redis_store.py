"""RedisStore against a real Redis server (tests/redis_server.py starts redis-server).

The store contract and the memory layers run on it from the backend registry
(``tests/store_backends.py``); these tests check what is Redis's own: the key
layout left behind (nothing after a clear, an erase, a cleanup), TTLs as key
expiry, the ``WATCH``/``MULTI`` commit retried after a concurrent writer, reads
in one round trip whatever the namespace holds, paging, and the errors.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis import Redis
from redis.client import Pipeline

from firefly_orm.entry import MemoryEntry, utcnow
from firefly_orm.errors import (
    ConcurrencyError,
    DatabaseConnectionError,
    EntryValidationError,
    StoreError,
)
from firefly_orm.redis import RedisStore, _commit, _reads
from firefly_orm.redis import _store as redis_store_module
from firefly_orm.redis._layout import expiry_ms
from firefly_orm.store import InMemoryStore
from firefly_orm.uow import check_preconditions, unit_of_work_for

pytestmark = pytest.mark.redis


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    name = "t_" + uuid.uuid4().hex[:10]
    yield name
    from redis_server import drop_prefix

    drop_prefix(redis_url, name)


@pytest.fixture
def store(redis_url: str, prefix: str) -> Iterator[RedisStore]:
    s = RedisStore(redis_url, prefix=prefix)
    s.initialize()
    yield s
    s.close()


def _keys(store: RedisStore) -> list[bytes]:
    return sorted(store.client.scan_iter(match=store.prefix.encode() + b":*"))


def _kinds(store: RedisStore) -> set[str]:
    """The kinds of key the store holds (``e``, ``r``, ``t``, ...)."""
    return {key.split(b":", 2)[1].decode() for key in _keys(store)}


class Commands:
    """The commands every client and pipeline sends or queues, by name.

    Outside a pipeline each command is one round trip (the reads use no pipeline).
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.names: list[str] = []
        for cls in (Redis, Pipeline):
            original = cls.execute_command

            def counted(this: Any, *args: Any, _original: Any = original, **options: Any) -> Any:
                self.names.append(str(args[0]).upper())
                return _original(this, *args, **options)

            monkeypatch.setattr(cls, "execute_command", counted)


# --------------------------------------------------------------------------- layout


def test_clear_erase_and_cleanup_leave_no_keys_behind(store: RedisStore) -> None:
    past = utcnow() - timedelta(seconds=1)
    store.save("a", MemoryEntry(key="k1", content=1, user_id="ann", search_text="red fox"))
    store.save("b", MemoryEntry(key="k2", content=2, user_id="ann", search_text="blue"))
    store.save("b", MemoryEntry(key="k3", content=3, user_id="bob", expires_at=past))
    assert _kinds(store) == {"e", "r", "t", "k", "ut", "uk", "U", "w", "n", "x"}
    with unit_of_work_for(store) as uow:
        uow.entries.erase_user("ann")
        uow.commit()
    # bob's expired entry: its body is gone (Redis dropped it), its record stays ...
    assert _kinds(store) == {"r", "t", "k", "ut", "uk", "U", "n", "x"}
    assert store.cleanup_expired() == 1
    # ... until cleanup_expired; only the list of namespaces ever written is left.
    assert _keys(store) == [store.prefix.encode() + b":n"]
    assert store.namespaces == []
    store.save("c", MemoryEntry(content="x"))
    store.clear("c")
    assert _keys(store) == [store.prefix.encode() + b":n"]


def test_an_update_moves_every_index(store: RedisStore) -> None:
    entry = MemoryEntry(key="old", content=1, user_id="ann", search_text="alpha")
    store.save("ns", entry)
    store.save("ns", entry.copy_entry(key="new", user_id="bob", search_text="beta"))
    with unit_of_work_for(store) as uow:
        assert uow.entries.search("ns", "alpha") == []
        assert [h.entry.key for h in uow.entries.search("ns", "beta")] == ["new"]
        assert uow.entries.list("ns", user_id="ann") == []
        assert [e.key for e in uow.entries.list("ns", user_id="bob", key_prefix="n")] == ["new"]
    assert store.load_by_key("ns", "old") is None
    names = {key.decode(errors="replace") for key in _keys(store)}
    assert not any("alpha" in n or "ann" in n for n in names), names


def test_prefixes_isolate_stores_on_one_server(redis_url: str, store: RedisStore) -> None:
    other = RedisStore(redis_url, prefix=store.prefix + "x")
    try:
        store.save("ns", MemoryEntry(key="k", content="mine"))
        assert other.load("ns") == [] and other.load_by_key("ns", "k") is None
        other.clear("ns")
        assert [e.content for e in store.load("ns")] == ["mine"]
    finally:
        from redis_server import drop_prefix

        drop_prefix(redis_url, other.prefix)
        other.close()


# --------------------------------------------------------------------------- expiry


def test_expires_at_is_the_body_keys_expiry(store: RedisStore) -> None:
    expires = (utcnow() + timedelta(minutes=5)).replace(microsecond=1001)
    lasting, passing = MemoryEntry(content=1), MemoryEntry(content=2, expires_at=expires)
    store.save("ns", lasting)
    store.save("ns", passing)
    client = store.client
    assert client.pexpiretime(f"{store.prefix}:e:{lasting.entry_id}") == -1
    # Rounded up to the next millisecond: Redis never drops a body before expires_at.
    assert client.pexpiretime(f"{store.prefix}:e:{passing.entry_id}") == expiry_ms(expires)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    micros = (expires - epoch) // timedelta(microseconds=1)
    assert expiry_ms(expires) == micros // 1000 + 1  # rounded up
    # Lifting the expiry makes the body persistent again.
    store.save("ns", passing.copy_entry(expires_at=None))
    assert client.pexpiretime(f"{store.prefix}:e:{passing.entry_id}") == -1


def test_an_expired_entry_keeps_its_version_until_cleanup(store: RedisStore) -> None:
    entry = MemoryEntry(key="k", content=1, expires_at=utcnow() - timedelta(seconds=1))
    store.save("ns", entry)
    assert store.load("ns") == []
    store.save("ns", entry.copy_entry(expires_at=None))
    [again] = store.load("ns")
    assert again.version == 2  # as the SQL stores and InMemoryStore count it


def test_commits_purge_expired_records_now_and_then(
    store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis_store_module, "PURGE_EVERY", 3)
    gone = MemoryEntry(key="gone", expires_at=utcnow() - timedelta(seconds=1))
    store.save("ns", gone)  # commit 1
    store.save("ns", MemoryEntry(key="kept"))  # commit 2
    record = f"{store.prefix}:r:{gone.entry_id}"
    assert store.client.exists(record)
    store.save("ns", MemoryEntry(key="more"))  # commit 3: and a purge
    assert not store.client.exists(record)
    assert store.cleanup_expired() == 0
    assert sorted(e.key or "" for e in store.load("ns")) == ["kept", "more"]


# --------------------------------------------------------------------------- commits


def test_a_concurrent_writer_makes_the_commit_start_again(
    store: RedisStore, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = MemoryEntry(key="k", content="first")
    store.save("ns", entry)
    other = RedisStore(redis_url, prefix=store.prefix)
    calls: list[int] = []
    original = check_preconditions

    def racing(*args: Any) -> None:
        calls.append(1)
        if len(calls) == 1:  # between our WATCH and our EXEC, another writer commits
            other.save("ns", entry.copy_entry(content="theirs"))
        original(*args)

    monkeypatch.setattr(_commit, "check_preconditions", racing)
    with unit_of_work_for(store) as uow:
        uow.entries.save("ns", entry.copy_entry(content="ours"))
        uow.commit()
    other.close()
    assert len(calls) == 3  # ours, theirs (no race), ours again
    [stored] = store.load("ns")
    assert (stored.content, stored.version) == ("ours", 3)  # no lost update


def test_a_commit_that_keeps_losing_writes_nothing(
    store: RedisStore, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = MemoryEntry(key="k", content=0)
    store.save("ns", entry)
    other = Redis.from_url(redis_url)
    original = check_preconditions

    def always_racing(*args: Any) -> None:
        other.set(
            f"{store.prefix}:r:{entry.entry_id}",
            store.client.get(f"{store.prefix}:r:{entry.entry_id}") or b"",
        )
        original(*args)

    monkeypatch.setattr(_commit, "MAX_ATTEMPTS", 3)
    monkeypatch.setattr(_commit, "check_preconditions", always_racing)
    fresh = MemoryEntry(key="k2", content="new")
    with (
        pytest.raises(ConcurrencyError, match="nothing was written"),
        unit_of_work_for(store) as uow,
    ):
        uow.entries.save("ns", entry.copy_entry(content=1))
        uow.entries.save("ns", fresh)
        uow.commit()
    other.close()
    monkeypatch.undo()
    assert [(e.content, e.version) for e in store.load("ns")] == [(0, 1)]


def test_a_failed_precondition_sends_no_write(
    store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = MemoryEntry(key="k", content=0)
    store.save("ns", entry)
    commands = Commands(monkeypatch)
    with pytest.raises(ConcurrencyError), unit_of_work_for(store) as uow:
        uow.entries.save("ns", MemoryEntry(content="x"))
        uow.entries.save("ns", entry.copy_entry(content=1), expected_version=7)
        uow.commit()
    assert {"WATCH", "MGET"} <= set(commands.names)  # it read what it checks ...
    assert not {"SET", "ZADD", "SADD", "MULTI", "EXEC"} & set(commands.names)  # ... wrote nothing
    assert [e.content for e in store.load("ns")] == [0]


def test_concurrent_increments_are_never_lost(store: RedisStore, redis_url: str) -> None:
    """Two writers (own clients) bump one counter with version preconditions; each
    refused bump is retried, so the counter ends at the number of bumps."""
    counter = MemoryEntry(key="counter", content=0)
    store.save("ns", counter)
    refused: list[int] = []

    def bump(writer: RedisStore, times: int) -> None:
        for _ in range(times):
            while True:
                try:
                    with unit_of_work_for(writer) as uow:
                        current = uow.entries.get_by_key("ns", "counter")
                        assert current is not None
                        uow.entries.save(
                            "ns",
                            current.copy_entry(content=current.content + 1),
                            expected_version=current.version,
                        )
                        uow.commit()
                    break
                except ConcurrencyError:
                    refused.append(1)

    writers = [RedisStore(redis_url, prefix=store.prefix) for _ in range(2)]
    threads = [threading.Thread(target=bump, args=(w, 25)) for w in writers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for writer in writers:
        writer.close()
    final = store.load_by_key("ns", "counter")
    assert final is not None and (final.content, final.version) == (50, 51)
    print(f"50 bumps, {len(refused)} refused by a version precondition and retried")


# --------------------------------------------------------------------------- reads


def test_indexed_reads_are_one_round_trip_whatever_the_namespace_holds(
    store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    with unit_of_work_for(store) as uow:
        for i in range(300):
            user = "ann" if i % 100 == 0 else "bob"
            uow.entries.save("ns", MemoryEntry(key=f"turn:{i:04d}", content=i, user_id=user))
        uow.entries.save("ns", MemoryEntry(key="head", content="h"))
        uow.commit()
    commands = Commands(monkeypatch)
    assert store.load_by_key("ns", "head") is not None
    assert len(commands.names) == 1
    with unit_of_work_for(store) as uow:
        commands.names.clear()
        last = uow.entries.list_contents("ns", key_prefix="turn:", limit=3, newest_first=True)
        assert last == [299, 298, 297] and len(commands.names) == 1
        commands.names.clear()
        assert uow.entries.list_contents("ns", user_id="ann") == [0, 100, 200]
        assert len(commands.names) == 1
        commands.names.clear()
        assert uow.entries.get("ns", "missing") is None and len(commands.names) == 1


def test_long_reads_are_paged(store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_reads, "PAGE", 4)
    for i in range(11):
        store.save("ns", MemoryEntry(key=f"k{i:02d}", content=i))
    commands = Commands(monkeypatch)
    assert [e.content for e in store.load("ns")] == list(range(11))
    assert len(commands.names) == 3  # 4 + 4 + 3 members
    with unit_of_work_for(store) as uow:
        newest = uow.entries.list_contents("ns", key_prefix="k", newest_first=True, limit=6)
    assert newest == [10, 9, 8, 7, 6, 5]


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["save", "delete", "expire"]),
        st.integers(0, 7),  # which entry
        st.sampled_from(["a", "ab", "b", "ba", None]),  # its key
        st.sampled_from(["ann", "bob", None]),  # its user
        st.integers(0, 3),  # its created_at, in seconds from a base
    ),
    max_size=25,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ops=_OPS,
    prefix_=st.sampled_from([None, "", "a", "b"]),
    limit=st.sampled_from([None, 0, 1, 3]),
    newest=st.booleans(),
    user=st.sampled_from([None, "ann"]),
)
def test_list_reads_agree_with_the_in_memory_store(
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    ops: list[tuple[str, int, str | None, str | None, int]],
    prefix_: str | None,
    limit: int | None,
    newest: bool,
    user: str | None,
) -> None:
    monkeypatch.setattr(_reads, "PAGE", 3)  # several pages for most reads
    redis_store = RedisStore(redis_url, prefix="h_" + uuid.uuid4().hex[:10])
    model = InMemoryStore()
    base = utcnow() - timedelta(hours=1)
    ids = [uuid.uuid4().hex for _ in range(8)]
    try:
        for op, which, key, owner, second in ops:
            if op == "delete":
                for s in (redis_store, model):
                    s.delete("ns", ids[which])
                continue
            entry = MemoryEntry(
                entry_id=ids[which],
                key=key,
                user_id=owner,
                content=[which, second],
                created_at=base + timedelta(seconds=second),
                expires_at=base if op == "expire" else None,
            )
            for s in (redis_store, model):
                s.save("ns", entry.copy_entry())
        options: dict[str, Any] = {"key_prefix": prefix_, "limit": limit, "newest_first": newest}
        if user is not None:
            options["user_id"] = user
        with unit_of_work_for(redis_store) as got, unit_of_work_for(model) as want:
            assert [e.to_dict() for e in got.entries.list("ns", **options)] == [
                e.to_dict() for e in want.entries.list("ns", **options)
            ]
        assert [e.to_dict() for e in redis_store.load("ns")] == [
            e.to_dict() for e in model.load("ns")
        ]
    finally:
        from redis_server import drop_prefix

        drop_prefix(redis_url, redis_store.prefix)
        redis_store.close()


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"url": "http://localhost"}, "url"),
        ({"url": None}, "url"),
        ({"url": "redis://localhost", "prefix": "a:b"}, "prefix"),
        ({"url": "redis://localhost", "prefix": ""}, "prefix"),
        ({"url": "redis://localhost", "socket_timeout": 0}, "socket_timeout"),
        ({"url": "redis://:pw@localhost:notaport/0"}, "url"),
        ({"url": "redis://localhost:99999"}, "url"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(EntryValidationError) as info:
        RedisStore(**kwargs)
    assert info.value.field == field


def test_unknown_list_options_are_refused(store: RedisStore) -> None:
    bad: dict[str, Any] = {"limt": 1}
    with pytest.raises(TypeError, match="limt"):
        store.read_list("ns", **bad)


def test_an_id_that_is_no_string_is_refused(store: RedisStore) -> None:
    bad: Any = 7
    with pytest.raises(EntryValidationError, match="entry_id"):
        store.delete("ns", bad)
    with pytest.raises(EntryValidationError, match="entry_id"), unit_of_work_for(store) as uow:
        uow.entries.get("ns", bad)


def test_a_decoding_client_is_refused(redis_url: str) -> None:
    client = Redis.from_url(redis_url, decode_responses=True)
    try:
        with pytest.raises(EntryValidationError, match="decode"):
            RedisStore(client=client)
    finally:
        client.close()


def test_an_unreachable_server_is_named_without_its_password() -> None:
    store = RedisStore("redis://:s3cret-pw@127.0.0.1:1/0", socket_timeout=2)
    for call in (
        lambda: store.load("ns"),
        lambda: store.save("ns", MemoryEntry(content=1)),
        store.initialize,
    ):
        with pytest.raises(DatabaseConnectionError) as info:
            call()
        assert "127.0.0.1:1" in str(info.value) and "s3cret-pw" not in str(info.value)
    assert "s3cret-pw" not in repr(store)


def test_an_old_server_is_refused(store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    fresh = RedisStore(client=store.client, prefix=store.prefix)
    answer: Callable[..., dict[str, str]] = lambda *a, **k: {"redis_version": "6.0.16"}  # noqa: E731
    monkeypatch.setattr(store.client, "info", answer)
    with pytest.raises(StoreError, match=r"6\.2 or newer; the server is 6\.0\.16"):
        fresh.initialize()


def test_with_blocks_initialise_and_close(redis_url: str, prefix: str) -> None:
    """``with`` and ``async with`` open the store (checking the server) and close it."""
    with RedisStore(redis_url, prefix=prefix) as store:
        store.save("ns", MemoryEntry(key="k", content="v"))

    async def scenario() -> list[MemoryEntry]:
        async with RedisStore(redis_url, prefix=prefix) as opened:
            return await opened.async_load("ns")

    assert [e.content for e in asyncio.run(scenario())] == ["v"]
