"""The step driver every memory layer uses: an operation written once, run sync or async.

Use it when a memory layer (conversation, working memory, the manager, a new
layer) needs I/O: write the logic once as an *operation*, a generator that
yields *steps* and receives their results, and let :func:`run` (sync code) or
:func:`arun` (async code) perform the steps.  The operation never knows which
world it runs in; the steps are the only places that cross:

* :class:`Transaction`: ``work(uow)`` inside one unit of work of the store
  (:func:`~firefly_orm.uow.unit_of_work_for`; the async path,
  :func:`~firefly_orm.uow.arun_in_unit_of_work`, awaits the same sync
  function through ``await uow.run_sync(work)``, or on SQL stores whose async
  work runs on a sync engine, runs the whole unit of work in one worker
  thread), committed by :meth:`Transaction.write`, rolled back by
  :meth:`Transaction.read` and whenever ``work`` raises.
* :class:`StoreCall`: one of the store's own single-call methods (``save``,
  ``load_by_key``...; no unit of work, so no transaction overhead).  The async
  path awaits the store's ``async_*`` method, or runs the sync one in a worker
  thread when the store has no async methods.
* :class:`CallOut`: a sync-or-async callable outside the store, such as a
  summarizer.  Async code awaits an async callable and runs a sync one in a
  worker thread; sync code calls a sync one and runs an async one on
  :func:`~firefly_orm.bridges._loop_thread.shared_loop` (refusing when an event
  loop already runs in the calling thread, which it would block).
* :class:`Sleep`: a back-off pause (``time.sleep`` / ``asyncio.sleep``).
* :class:`HoldingTransaction`: a transaction that calls out (a summarizer)
  while its unit of work stays open, for stores that :func:`locks_rows`; ask
  with the :class:`LocksRows` step.

How to write an operation: take every input as an explicit parameter, and get
each step's typed result with ``yield from``::

    def rename(namespace: str, old: str, new: str) -> Operation[bool]:
        moved = yield from Transaction.write(move_key, namespace, old, new)
        if not moved:
            yield from Sleep(0.01)
        return moved

    def move_key(uow: UnitOfWork, namespace: str, old: str, new: str) -> bool:
        ...  # plain sync code over uow.entries; the unit of work commits after it

    moved = run(store, rename("working:s1", "a", "b"))          # sync code
    moved = await arun(store, rename("working:s1", "a", "b"))   # async code

A step that fails is thrown back into the operation at its ``yield from``, so
``try``/``except`` around it works (:func:`retrying` retries a transaction on
:class:`~firefly_orm.errors.ConcurrencyError` with back-off).  Operations
compose: ``value = yield from other_operation(...)``.

A layer whose methods are operations gets both public forms from one
definition with :func:`sync_method` and :func:`async_method` (a facade forwards
another layer's operation with :func:`delegate`)::

    class Notes(MemoryLayer):
        def _count(self, namespace: str) -> Operation[int]:
            \"\"\"How many notes ``namespace`` holds.\"\"\"
            entries = yield from StoreCall(
                lambda s: s.load(namespace), lambda s: s.async_load(namespace)
            )
            return len(entries)

        count = sync_method(_count)
        async_count = async_method(_count)

The layer derives from :class:`MemoryLayer`, which holds the store the steps
run on.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import random
import time
import typing
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Coroutine, Generator
from dataclasses import dataclass
from typing import (
    Any,
    Concatenate,
    Generic,
    ParamSpec,
    Protocol,
    TypeAlias,
    TypeGuard,
    TypeVar,
    cast,
    overload,
)

from firefly_orm.bridges import _telemetry
from firefly_orm.bridges._loop_thread import loop_running, shared_loop
from firefly_orm.bridges._threads import call_blocking
from firefly_orm.errors import ConcurrencyError
from firefly_orm.protocols import AsyncMemoryStore, JoinsSession, MemoryStore, UnitOfWork, declares
from firefly_orm.protocols import LocksRows as LocksRowsFact
from firefly_orm.uow import arun_in_unit_of_work, async_unit_of_work_for, unit_of_work_for

__all__ = [
    "MAX_ATTEMPTS",
    "RETRY_SECONDS",
    "RetryBudget",
    "CallOut",
    "HoldingTransaction",
    "HoldingWork",
    "LayerMethod",
    "LocksRows",
    "MemoryLayer",
    "Operation",
    "Sleep",
    "Step",
    "StoreCall",
    "Transaction",
    "arun",
    "async_method",
    "backoff",
    "delegate",
    "is_coroutine_callable",
    "locks_rows",
    "retrying",
    "run",
    "sync_method",
]

T = TypeVar("T")
P = ParamSpec("P")

#: How many times :func:`retrying` tries a transaction before giving up.
MAX_ATTEMPTS = 25
#: How long a writer keeps retrying under contention once :data:`MAX_ATTEMPTS`
#: are spent: writers wait their turn (a queue) rather than being refused.
RETRY_SECONDS = 10.0


class Step(ABC, Generic[T]):
    """One thing an operation asks its driver to do; ``yield from step`` gives its result."""

    def __iter__(self) -> Generator[Step[Any], Any, T]:
        result = yield self
        return cast(T, result)

    @abstractmethod
    def perform(self, store: MemoryStore) -> T:
        """Do the step from sync code."""

    @abstractmethod
    async def aperform(self, store: MemoryStore) -> T:
        """Do the step from async code."""


#: An operation: yields steps, receives their results, returns a ``T``.
Operation: TypeAlias = Generator[Step[Any], Any, T]


# --------------------------------------------------------------------------- the steps


@dataclass(frozen=True)
class Transaction(Step[T]):
    """Run ``work(uow)`` in one unit of work of the store.

    Build it with :meth:`read` or :meth:`write`.  ``work`` is a plain sync
    function over ``uow.entries``; if it raises, the unit of work rolls back
    and the error reaches the operation.
    """

    work: Callable[[UnitOfWork], T]
    read_only: bool = False
    commit: bool = False

    @classmethod
    def read(
        cls, fn: Callable[Concatenate[UnitOfWork, P], T], /, *args: P.args, **kwargs: P.kwargs
    ) -> Transaction[T]:
        """``fn(uow, *args, **kwargs)`` in a read-only unit of work, never committed.

        Read-only units of work let readers run alongside writers where the
        store can (SQLite under WAL).
        """
        return cls(lambda uow: fn(uow, *args, **kwargs), read_only=True)

    @classmethod
    def write(
        cls, fn: Callable[Concatenate[UnitOfWork, P], T], /, *args: P.args, **kwargs: P.kwargs
    ) -> Transaction[T]:
        """``fn(uow, *args, **kwargs)`` in a unit of work committed when ``fn`` returns."""
        return cls(lambda uow: fn(uow, *args, **kwargs), commit=True)

    def perform(self, store: MemoryStore) -> T:
        with unit_of_work_for(store, read_only=self.read_only) as uow:
            result = self.work(uow)
            if self.commit:
                uow.commit()
        return result

    async def aperform(self, store: MemoryStore) -> T:
        return await arun_in_unit_of_work(
            store, self.work, read_only=self.read_only, commit=self.commit
        )


@dataclass(frozen=True)
class StoreCall(Step[T]):
    """Call one of the store's own methods: ``sync(store)`` or ``await async_(store)``.

    Example: ``StoreCall(lambda s: s.load(ns), lambda s: s.async_load(ns))``.
    A store without the ``async_*`` methods has ``sync`` run in a worker thread.
    """

    sync: Callable[[MemoryStore], T]
    async_: Callable[[AsyncMemoryStore], Awaitable[T]]

    def perform(self, store: MemoryStore) -> T:
        return self.sync(store)

    async def aperform(self, store: MemoryStore) -> T:
        if _has_async_methods(store):
            return await self.async_(store)
        return await call_blocking(self.sync, store)


_ASYNC_STORE_TYPES: dict[type, bool] = {}


def _has_async_methods(store: MemoryStore) -> TypeGuard[AsyncMemoryStore]:
    """Whether ``store`` has the ``async_*`` methods (decided once per store class)."""
    known = _ASYNC_STORE_TYPES.get(type(store))
    if known is None:
        known = _ASYNC_STORE_TYPES[type(store)] = isinstance(store, AsyncMemoryStore)
    return known


@dataclass(frozen=True)
class CallOut(Step[T]):
    """Call ``fn(*args)``, a sync or async callable that is not the store (a summarizer).

    Attributes:
        fn: The callable; it may return a value or an awaitable.
        args: Its arguments.
        async_fn: Preferred on the async path when given (an object's
            ``async_summarize`` next to its blocking ``__call__``).
        what: Names the callable in errors.
        use_instead: What to call instead when an async callable is reached
            from sync code while an event loop runs in the thread.
    """

    fn: Callable[..., T | Awaitable[T]]
    args: tuple[Any, ...] = ()
    async_fn: Callable[..., Awaitable[T]] | None = None
    what: str = "the callable"
    use_instead: str = "the async form of this method"

    def perform(self, store: MemoryStore) -> T:
        result = self.fn(*self.args)
        if not inspect.isawaitable(result):
            return result
        if not loop_running():  # no loop in this thread to block: run it on the shared one
            return shared_loop().call(_await(cast(Awaitable[T], result)))
        if inspect.iscoroutine(result):
            result.close()
        raise RuntimeError(
            f"{self.what} is async and an event loop is running in this thread: "
            f"use {self.use_instead}"
        )

    async def aperform(self, store: MemoryStore) -> T:
        fn = self.async_fn if self.async_fn is not None else self.fn
        if is_coroutine_callable(fn):
            return await cast(Awaitable[T], fn(*self.args))
        result = await call_blocking(fn, *self.args)
        if inspect.isawaitable(result):
            return await cast(Awaitable[T], result)
        return result


@dataclass(frozen=True)
class Sleep(Step[None]):
    """Pause for ``seconds`` (a back-off between retries)."""

    seconds: float

    def perform(self, store: MemoryStore) -> None:
        time.sleep(self.seconds)

    async def aperform(self, store: MemoryStore) -> None:
        await asyncio.sleep(self.seconds)


def locks_rows(store: object) -> bool:
    """Whether ``store`` declares ``locks_rows = True``.

    Such a store's ``get_by_key(..., for_update=True)`` locks that one row until
    the unit of work ends (PostgreSQL's ``SELECT ... FOR UPDATE``), so a unit of
    work kept open during a call-out makes only the writers of that row wait, in
    the database's lock queue.  Elsewhere it would block every writer (SQLite's
    database-wide write lock) or protect nothing (staged stores check versions
    at commit), and :class:`HoldingTransaction` is not used.
    """
    return declares(store, LocksRowsFact) and cast(LocksRowsFact, store).locks_rows is True


@dataclass(frozen=True)
class LocksRows(Step[bool]):
    """Whether a :class:`HoldingTransaction` may queue writers on the store.

    The store :func:`locks_rows` and does not join a caller's session
    (:class:`~firefly_orm.protocols.JoinsSession`): holding a lock there would
    keep the caller's transaction open across the call-out (a model call).
    """

    def perform(self, store: MemoryStore) -> bool:
        joins = declares(store, JoinsSession) and cast(JoinsSession, store).session is not None
        return locks_rows(store) and not joins

    async def aperform(self, store: MemoryStore) -> bool:
        return self.perform(store)


#: The work of a :class:`HoldingTransaction`: over the unit of work, a generator
#: that may yield :class:`CallOut` steps only (their results are sent back in)
#: and returns the transaction's result.
HoldingWork: TypeAlias = Generator[Step[Any], Any, T]


@dataclass(frozen=True)
class HoldingTransaction(Step[T]):
    """``work(uow)`` in one unit of work that stays open while the work calls out.

    ``work`` is a generator over the unit of work (build the step with
    :meth:`write`); each :class:`CallOut` it yields (``yield from CallOut(...)``,
    e.g. a summarizer) runs while the unit of work is open and its locks are
    held, and its result (or error) is sent back in.  The unit of work commits
    when ``work`` returns and rolls back when it raises.  Async code resumes the
    work through ``uow.run_sync`` and awaits the call-outs in between.

    Meant for stores that :func:`locks_rows`: a writer holding a row lock while
    it calls out makes the other writers of that row queue behind it, instead of
    each redoing the call-out after every lost race.
    """

    work: Callable[[UnitOfWork], HoldingWork[T]]

    @classmethod
    def write(
        cls,
        fn: Callable[Concatenate[UnitOfWork, P], HoldingWork[T]],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> HoldingTransaction[T]:
        """``fn(uow, *args, **kwargs)`` (a generator function), committed when it returns."""
        return cls(lambda uow: fn(uow, *args, **kwargs))

    def perform(self, store: MemoryStore) -> T:
        with unit_of_work_for(store) as uow:
            work = self.work(uow)
            call, result = _resume(work, None, None)
            while call is not None:
                value: Any = None
                error: Exception | None = None
                try:
                    value = call.perform(store)
                except Exception as exc:
                    error = exc
                call, result = _resume(work, value, error)
            uow.commit()
        return result

    async def aperform(self, store: MemoryStore) -> T:
        async with async_unit_of_work_for(store) as uow:
            work: HoldingWork[T] = await uow.run_sync(self.work)
            outcome: tuple[CallOut[Any] | None, T] = await uow.run_sync(
                _resume_in, work, None, None
            )
            while (call := outcome[0]) is not None:
                value: Any = None
                error: Exception | None = None
                try:
                    value = await call.aperform(store)
                except Exception as exc:
                    error = exc
                outcome = await uow.run_sync(_resume_in, work, value, error)
            await uow.commit()
        return outcome[1]


def _resume(
    work: HoldingWork[T], value: Any, error: Exception | None
) -> tuple[CallOut[Any] | None, T]:
    """Resume ``work``: ``(next call-out, _)``, or ``(None, result)`` once it returned."""
    try:
        step = work.throw(error) if error is not None else work.send(value)
    except StopIteration as stop:
        return None, cast(T, stop.value)
    if not isinstance(step, CallOut):
        work.close()
        raise TypeError(
            f"a HoldingTransaction may only yield CallOut steps, not {type(step).__name__}"
        )
    return step, cast(T, None)


def _resume_in(
    uow: UnitOfWork, work: HoldingWork[T], value: Any, error: Exception | None
) -> tuple[CallOut[Any] | None, T]:
    """:func:`_resume` as a ``uow.run_sync`` callback (the unit of work is already in ``work``)."""
    return _resume(work, value, error)


def is_coroutine_callable(obj: object) -> bool:
    """Whether calling ``obj`` gives a coroutine (an ``async def`` function or ``__call__``)."""
    if inspect.iscoroutinefunction(obj):
        return True
    call = getattr(type(obj), "__call__", None)  # noqa: B004
    return not inspect.isfunction(obj) and call is not None and inspect.iscoroutinefunction(call)


async def _await(awaitable: Awaitable[T]) -> T:
    return await awaitable


# --------------------------------------------------------------------------- retrying


def backoff(attempt: int) -> float:
    """A random pause before retry ``attempt + 1``: up to 1 ms doubling, at most 50 ms."""
    return random.uniform(0.0, min(0.05, 0.001 * 2**attempt))


class RetryBudget:
    """How long an operation keeps retrying after lost races.

    It is spent once BOTH ``attempts`` tries were made and ``seconds`` have
    passed since it was created: a fast machine gets at least ``attempts``
    tries, a loaded one keeps waiting its turn for up to ``seconds``.
    """

    def __init__(self, attempts: int = MAX_ATTEMPTS, seconds: float = RETRY_SECONDS) -> None:
        self.attempts = attempts
        self.seconds = seconds
        self.used = 0
        self._deadline = time.monotonic() + seconds

    def spend(self) -> bool:
        """Count one lost attempt; ``False`` once the budget is spent."""
        self.used += 1
        return self.used < self.attempts or time.monotonic() < self._deadline

    def pause(self) -> Sleep:
        """The :func:`backoff` step before the next attempt."""
        return Sleep(backoff(min(self.used - 1, 16)))


def retrying(
    step: Transaction[T], *, attempts: int = MAX_ATTEMPTS, seconds: float = RETRY_SECONDS
) -> Operation[T]:
    """Perform ``step``, retrying it after a :func:`backoff` on ``ConcurrencyError``.

    Retries go on while the :class:`RetryBudget` (``attempts`` tries and
    ``seconds``) lasts; then the last :class:`~firefly_orm.errors.ConcurrencyError`
    propagates.
    """
    budget = RetryBudget(attempts, seconds)
    while True:
        try:
            return (yield from step)
        except ConcurrencyError:
            if not budget.spend():
                raise
            _telemetry.retried()
            yield from budget.pause()


# --------------------------------------------------------------------------- the drivers


class _Driver(Generic[T]):
    """Feeds an operation the outcome of its last step and hands out the next one."""

    def __init__(self, op: Operation[T]) -> None:
        self._op = op
        self._value: Any = None
        self._error: Exception | None = None
        self.result: T

    def next_step(self) -> Step[Any] | None:
        """The next step, or ``None`` once the operation has returned :attr:`result`."""
        error, self._error = self._error, None
        try:
            step = self._op.throw(error) if error is not None else self._op.send(self._value)
        except StopIteration as stop:
            self.result = stop.value
            return None
        self._value = None
        return step

    def succeeded(self, value: Any) -> None:
        self._value = value

    def failed(self, error: Exception) -> None:
        self._error = error


def run(store: MemoryStore, op: Operation[T]) -> T:
    """Perform ``op`` from sync code, its steps against ``store``; return its result."""
    driver = _Driver(op)
    while (step := driver.next_step()) is not None:
        try:
            driver.succeeded(step.perform(store))
        except Exception as exc:
            driver.failed(exc)
    return driver.result


async def arun(store: MemoryStore, op: Operation[T]) -> T:
    """Perform ``op`` from async code, its steps against ``store``; return its result."""
    driver = _Driver(op)
    while (step := driver.next_step()) is not None:
        try:
            driver.succeeded(await step.aperform(store))
        except Exception as exc:
            driver.failed(exc)
    return driver.result


# --------------------------------------------------------------------------- layer methods

# The operation behind each public method made by sync_method / async_method,
# and whether that method is the async form (read when the class is created).
_FORMS: dict[Callable[..., Any], tuple[Callable[..., Any], bool]] = {}


class MemoryLayer:
    """Base of the memory layers: the store their operations run on.

    Its subclasses define each public method once, as an operation method, and
    derive both forms with :func:`sync_method` / :func:`async_method`; when the
    subclass is created, every derived method gets its attribute name, its
    operation's signature (returning what the operation returns: ``-> X`` for
    ``-> Operation[X]``) and docstring (the async form's docstring points at
    the sync form).  A form calls the operation it was made from: to change a
    method in a subclass, derive new forms from the new operation.

    Args:
        store: The store (each layer picks its default store, not this bridge).
    """

    def __init__(self, store: MemoryStore) -> None:
        self._store = store

    @property
    def store(self) -> MemoryStore:
        """The store this memory reads and writes."""
        return self._store

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, value in vars(cls).items():
            form = _FORMS.get(value) if inspect.isfunction(value) else None
            if form is None:
                continue
            op, is_async = form
            value.__name__ = name
            value.__qualname__ = f"{cls.__qualname__}.{name}"
            value.__module__ = cls.__module__
            value.__doc__ = (
                f"Async twin of :meth:`{name.removeprefix('async_')}`." if is_async else op.__doc__
            )
            signature = inspect.signature(op)
            value.__signature__ = signature.replace(
                return_annotation=_operation_result(signature.return_annotation)
            )


def _operation_result(annotation: Any) -> Any:
    """``X`` for an operation method's return annotation ``Operation[X]``.

    The annotation is a string under ``from __future__ import annotations``
    (``"Operation[X]"`` gives ``"X"``) or the evaluated generator type; anything
    else gives no annotation.
    """
    if isinstance(annotation, str):
        inner = annotation.removeprefix("Operation[")
        if inner != annotation and inner.endswith("]"):
            return inner[:-1]
        return inspect.Signature.empty
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is Generator and len(args) == 3:
        return args[2]
    return inspect.Signature.empty


L = TypeVar("L", bound=MemoryLayer)
M = TypeVar("M", bound=MemoryLayer)
L_contra = TypeVar("L_contra", bound=MemoryLayer, contravariant=True)
R_co = TypeVar("R_co", covariant=True)


class LayerMethod(Protocol[L_contra, P, R_co]):
    """The static type of a form made by :func:`sync_method` / :func:`async_method`.

    At run time a form is a plain function (``def method(layer, /, *args,
    **kwargs)``), which Python binds like any method.  Typed as a bare
    ``Callable``, a class attribute holding it is bound by mypy but not by
    every checker (ty reads ``manager.add_turn(cid, ...)`` as a call of an
    unbound function and wants the ``self``).  This protocol states what the
    function really is, a descriptor: read on an instance it is the method
    without its layer (``Callable[P, R_co]``), read on the class it is the
    function itself.  mypy, pyright and ty all bind through ``__get__``.
    """

    def __call__(self, layer: L_contra, /, *args: P.args, **kwargs: P.kwargs) -> R_co: ...

    @overload
    def __get__(
        self, instance: None, owner: type[Any], /
    ) -> Callable[Concatenate[L_contra, P], R_co]: ...

    @overload
    def __get__(self, instance: object, owner: type[Any] | None = None, /) -> Callable[P, R_co]: ...


def sync_method(op: Callable[Concatenate[L, P], Operation[T]]) -> LayerMethod[L, P, T]:
    """The sync public method of an operation method: performs it with :func:`run`.

    Each call is one telemetry span (:mod:`firefly_orm.bridges._telemetry`).
    """

    def method(layer: L, /, *args: P.args, **kwargs: P.kwargs) -> T:
        with _telemetry.operation(layer, method.__name__, args, kwargs) as record:
            return record.done(run(layer.store, op(layer, *args, **kwargs)))

    _FORMS[method] = (op, False)
    return method


def async_method(
    op: Callable[Concatenate[L, P], Operation[T]],
) -> LayerMethod[L, P, Coroutine[Any, Any, T]]:
    """The async public method of an operation method: performs it with :func:`arun`."""

    async def method(layer: L, /, *args: P.args, **kwargs: P.kwargs) -> T:
        with _telemetry.operation(layer, method.__name__, args, kwargs) as record:
            return record.done(await arun(layer.store, op(layer, *args, **kwargs)))

    _FORMS[method] = (op, True)
    return method


def delegate(
    op: Callable[Concatenate[M, P], Operation[T]], to: Callable[[L], M]
) -> LayerMethod[L, P, Operation[T]]:
    """The operation method ``op`` of the layer ``to(self)``, as an operation method of self.

    A facade declares ``_add_turn = delegate(ConversationMemory._add_turn, conversation_of)``
    instead of repeating the signature; the forms derived from it keep ``op``'s
    signature and docstring.
    """

    def forwarded(layer: L, /, *args: P.args, **kwargs: P.kwargs) -> Operation[T]:
        return op(to(layer), *args, **kwargs)

    functools.update_wrapper(forwarded, op)
    return forwarded
