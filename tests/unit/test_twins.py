"""The async-twin bridge (firefly_orm.bridges.twins) on a custom sync store."""

from __future__ import annotations

import threading

from fakes import ThreadRecordingStore

from firefly_orm.bridges.twins import AsyncTwins, SyncBackedAsyncUnitOfWork
from firefly_orm.entry import MemoryEntry
from firefly_orm.protocols import AsyncMemoryStore, UnitOfWork
from firefly_orm.store import InMemoryStore
from firefly_orm.testing._samples import in_past
from firefly_orm.uow import BestEffortUnitOfWork, async_unit_of_work_for

NS = "twins:test"


class TwinnedStore(ThreadRecordingStore, AsyncTwins):
    """The five sync methods, recording threads, with derived async twins."""


class InlineStore(TwinnedStore):
    twins_in_thread = False


async def test_twins_run_the_sync_methods_in_a_worker_thread() -> None:
    store = TwinnedStore()
    assert isinstance(store, AsyncMemoryStore)
    entry = MemoryEntry(key="k", content="v")
    await store.async_save(NS, entry)
    found = await store.async_load_by_key(NS, "k")
    assert found is not None and found.content == "v"
    assert [e.entry_id for e in await store.async_load(NS)] == [entry.entry_id]
    await store.async_delete(NS, entry.entry_id)
    await store.async_clear(NS)
    assert await store.async_load(NS) == []
    assert len(store.threads) == 6
    assert threading.current_thread().name not in store.threads


async def test_inline_twins_stay_on_the_event_loop_thread() -> None:
    store = InlineStore()
    await store.async_save(NS, MemoryEntry(content="v"))
    assert store.threads == [threading.current_thread().name]


async def test_twins_of_missing_optional_methods_are_absent() -> None:
    store = TwinnedStore()
    # probed as the contract suite and async_unit_of_work_for probe them
    assert getattr(store, "async_cleanup_expired", None) is None
    assert getattr(store, "async_unit_of_work", None) is None
    auow = async_unit_of_work_for(store)  # falls back to the best-effort unit of work
    assert isinstance(auow, SyncBackedAsyncUnitOfWork)

    def save(uow: UnitOfWork) -> None:
        assert isinstance(uow, BestEffortUnitOfWork)
        uow.entries.save(NS, MemoryEntry(content="staged"))

    async with auow as uow:
        await uow.run_sync(save)
        await uow.commit()
    assert [e.content for e in store.inner.load(NS)] == ["staged"]


async def test_in_memory_store_derives_its_optional_twins() -> None:
    store = InMemoryStore()
    assert await store.async_cleanup_expired() == 0
    async with store.async_unit_of_work(read_only=True) as uow:
        assert await uow.run_sync(lambda u: u.entries.list(NS)) == []


class CleaningStore(TwinnedStore):
    """Adds ``cleanup_expired`` and ``unit_of_work`` to a parent lacking both."""

    def cleanup_expired(self) -> int:
        return self.inner.cleanup_expired()

    def unit_of_work(self, *, read_only: bool = False) -> BestEffortUnitOfWork:
        return BestEffortUnitOfWork(self)


class PlainAgain(CleaningStore):
    """Takes both optional methods away again."""

    cleanup_expired = None  # type: ignore[assignment]
    unit_of_work = None  # type: ignore[assignment]


async def test_a_subclass_adding_the_sync_methods_gets_the_twins_back() -> None:
    store = CleaningStore()
    store.inner.save(NS, MemoryEntry(content="old", expires_at=in_past()))
    assert await store.async_cleanup_expired() == 1
    async with store.async_unit_of_work() as uow:
        await uow.run_sync(lambda u: u.entries.save(NS, MemoryEntry(content="staged")))
        await uow.commit()
    assert [e.content for e in store.inner.load(NS)] == ["staged"]
    # the parent lacking the sync methods keeps its twins absent
    assert getattr(TwinnedStore(), "async_cleanup_expired", None) is None
    assert getattr(TwinnedStore(), "async_unit_of_work", None) is None


def test_a_subclass_removing_the_sync_methods_loses_the_twins() -> None:
    store = PlainAgain()
    assert getattr(store, "async_cleanup_expired", None) is None
    assert getattr(store, "async_unit_of_work", None) is None
    assert callable(getattr(CleaningStore(), "async_cleanup_expired", None))


async def test_a_hand_written_twin_is_kept() -> None:
    class OwnTwin(TwinnedStore):
        def cleanup_expired(self) -> int:
            return 0

        async def async_cleanup_expired(self) -> int:
            return 42

    assert await OwnTwin().async_cleanup_expired() == 42
