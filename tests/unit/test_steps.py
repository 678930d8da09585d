"""The step driver shared by the memory layers (firefly_orm.bridges._steps)."""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any

import pytest
from fakes import ThreadRecordingStore

from firefly_orm.bridges._steps import (
    CallOut,
    MemoryLayer,
    Operation,
    Sleep,
    StoreCall,
    Transaction,
    arun,
    async_method,
    delegate,
    retrying,
    run,
    sync_method,
)
from firefly_orm.entry import MemoryEntry, MemoryScope
from firefly_orm.errors import ConcurrencyError
from firefly_orm.protocols import UnitOfWork
from firefly_orm.store import InMemoryStore


def entry(key: str, content: Any) -> MemoryEntry:
    return MemoryEntry(namespace="ns", scope=MemoryScope.WORKING, key=key, content=content)


def put(uow: UnitOfWork, key: str, content: Any) -> str:
    uow.entries.save("ns", entry(key, content))
    return key


def put_then_fail(uow: UnitOfWork, key: str) -> None:
    uow.entries.save("ns", entry(key, "never"))
    raise ValueError("boom")


def keys(uow: UnitOfWork) -> list[str]:
    return [e.key or "" for e in uow.entries.list("ns")]


def write_read_and_recover() -> Operation[tuple[list[str], str]]:
    yield from Transaction.write(put, "a", 1)
    try:
        yield from Transaction.write(put_then_fail, "b")
    except ValueError as exc:  # thrown back into the operation at its yield
        caught = str(exc)
    yield from Sleep(0)
    seen = yield from Transaction.read(keys)
    return seen, caught


def test_sync_and_async_drivers_perform_the_same_operation() -> None:
    sync_store, async_store = InMemoryStore(), InMemoryStore()
    assert run(sync_store, write_read_and_recover()) == (["a"], "boom")
    assert asyncio.run(arun(async_store, write_read_and_recover())) == (["a"], "boom")
    # the failed transaction rolled back; the other one committed
    assert [e.key for e in sync_store.load("ns")] == [e.key for e in async_store.load("ns")]


def test_read_transactions_do_not_commit() -> None:
    store = InMemoryStore()
    run(store, iter(Transaction.read(put, "a", 1)))
    assert store.load("ns") == []


def test_an_unhandled_step_error_propagates() -> None:
    with pytest.raises(ValueError, match="boom"):
        run(InMemoryStore(), iter(Transaction.write(put_then_fail, "x")))


def conflicting(
    calls: list[int], fail_times: int, *, attempts: int = 3, seconds: float = 0.0
) -> Operation[str]:
    def work(uow: UnitOfWork) -> str:
        calls.append(1)
        if len(calls) <= fail_times:
            raise ConcurrencyError("busy")
        return "done"

    return (yield from retrying(Transaction(work, commit=True), attempts=attempts, seconds=seconds))


def test_retrying_retries_conflicts_then_gives_up() -> None:
    calls: list[int] = []
    assert run(InMemoryStore(), conflicting(calls, 2)) == "done"
    assert len(calls) == 3
    calls.clear()
    with pytest.raises(ConcurrencyError, match="busy"):
        run(InMemoryStore(), conflicting(calls, 3))
    assert len(calls) == 3


def test_retrying_keeps_waiting_its_turn_within_the_time_budget() -> None:
    """Past its attempts, a writer under contention waits (up to ``seconds``)
    instead of being refused."""
    calls: list[int] = []
    assert run(InMemoryStore(), conflicting(calls, 8, attempts=2, seconds=30.0)) == "done"
    assert len(calls) == 9


def save_op(key: str) -> Operation[None]:
    saved = entry(key, 1)
    yield from StoreCall(
        lambda store: store.save("ns", saved), lambda store: store.async_save("ns", saved)
    )


async def test_store_calls_use_async_methods_or_a_worker_thread() -> None:
    store = ThreadRecordingStore()
    await arun(store, save_op("a"))  # no async_save: the sync one, in a worker thread
    assert store.threads and store.threads[0] != threading.current_thread().name
    native = InMemoryStore()
    await arun(native, save_op("b"))
    assert [e.key for e in native.load("ns")] == ["b"]


def summarize_op(fn: Any, async_fn: Any = None) -> Operation[str]:
    result = yield from CallOut[str](fn, ("x",), async_fn=async_fn, use_instead="the async form")
    return result


async def shout(text: str) -> str:
    return text.upper()


def test_call_out_from_sync_code() -> None:
    assert run(InMemoryStore(), summarize_op(str.upper)) == "X"
    # an async callable runs on the shared loop thread when none runs here
    assert run(InMemoryStore(), summarize_op(shout)) == "X"


async def test_call_out_from_async_code() -> None:
    threads: list[str] = []

    def blocking(text: str) -> str:
        threads.append(threading.current_thread().name)
        return text

    assert await arun(InMemoryStore(), summarize_op(blocking)) == "x"
    assert threads[0] != threading.current_thread().name  # ran in a worker thread
    assert await arun(InMemoryStore(), summarize_op(blocking, async_fn=shout)) == "X"
    # sync code reaching an async callable while this thread runs a loop: a clear error
    with pytest.raises(RuntimeError, match="use the async form"):
        run(InMemoryStore(), summarize_op(shout))


class Counter(MemoryLayer):
    def _count(self, namespace: str, *, plus: int = 0) -> Operation[int]:
        """How many entries ``namespace`` holds, plus ``plus``."""
        entries = yield from StoreCall(
            lambda store: store.load(namespace), lambda store: store.async_load(namespace)
        )
        return len(entries) + plus

    count = sync_method(_count)
    async_count = async_method(_count)


def counter_of(facade: Facade) -> Counter:
    return facade.counter


class Facade(MemoryLayer):
    def __init__(self) -> None:
        super().__init__(InMemoryStore())
        self.counter = Counter(self.store)

    _tally = delegate(Counter._count, counter_of)
    tally = sync_method(_tally)


def test_layer_methods_are_derived_from_one_operation() -> None:
    counter = Counter(InMemoryStore())
    counter.store.save("ns", entry("a", 1))
    assert counter.count("ns", plus=1) == 2
    assert asyncio.run(counter.async_count("ns")) == 1
    assert Facade().tally("ns", plus=5) == 5
    assert Counter.count.__name__ == "count"
    assert Counter.async_count.__qualname__ == "Counter.async_count"
    assert Counter.count.__doc__ == "How many entries ``namespace`` holds, plus ``plus``."
    assert Counter.async_count.__doc__ == "Async twin of :meth:`count`."
    assert (
        str(inspect.signature(Facade.tally))
        == "(self, namespace: 'str', *, plus: 'int' = 0) -> 'int'"
    )
    assert inspect.signature(Counter.async_count) == inspect.signature(Counter.count)
    assert inspect.iscoroutinefunction(Counter.async_count)
    assert not inspect.iscoroutinefunction(Counter.count)


def test_derived_methods_return_what_the_operation_returns() -> None:
    # Evaluated annotations (a module without ``from __future__ import annotations``)
    # give the evaluated result type; a method not annotated Operation[...] gets none.
    def size(layer: MemoryLayer) -> Operation[list[int]]:
        return (yield from StoreCall(lambda store: [0], lambda store: asyncio.sleep(0, [0])))

    def untyped(layer: MemoryLayer) -> Operation[int]:
        return (yield from StoreCall(lambda store: 1, lambda store: asyncio.sleep(0, 1)))

    size.__annotations__["return"] = Operation[list[int]]
    untyped.__annotations__["return"] = "Generator[Step[Any], Any, int]"
    forms = {
        "size": sync_method(size),
        "async_size": async_method(size),
        "untyped": sync_method(untyped),
    }
    layer = type("Sized", (MemoryLayer,), forms)(InMemoryStore())
    assert inspect.signature(type(layer).size).return_annotation == list[int]
    assert inspect.signature(type(layer).async_size).return_annotation == list[int]
    assert inspect.signature(layer.untyped).return_annotation is inspect.Signature.empty
    assert layer.size() == [0]
    assert asyncio.run(layer.async_size()) == [0]
