"""OpenTelemetry spans and metrics for the memory operations (a no-op without OpenTelemetry).

Every public method of a memory layer (the forms :func:`~firefly_orm.bridges._steps.sync_method`
and :func:`~firefly_orm.bridges._steps.async_method` derive) runs inside :func:`operation`, one
span named after the layer and the method (``ConversationMemory.add_turn``; the async form
``async_add_turn`` gives the same name, with ``firefly_orm.async`` true).  Migrations run inside
:func:`migration`, retries are counted by :func:`retried` and evictions by :func:`evicted`.

What a span carries (the attribute names are the module's constants, the guide lists them):

* ``gen_ai.operation.name``: the GenAI semantic conventions' memory operation, where one fits
  the method's verb (:data:`GEN_AI_OPERATIONS`): ``update_memory`` for writes,
  ``search_memory`` for reads, ``delete_memory`` for clears and erasures.  The conventions
  (``gen_ai.memory.*``) are still in development; methods no verb fits (``verify_conversation``)
  carry no ``gen_ai.operation.name``, only ``firefly_orm.operation``.
* ``firefly_orm.operation`` (the span name), ``firefly_orm.memory.kind`` (the layer's namespace
  kind: ``conversation``, ``working``, ``long_term``, ``artifacts``, ``manager``),
  ``firefly_orm.store`` (the store's class), ``firefly_orm.async``.
* sizes, never contents: ``firefly_orm.input.items`` (how many items the list, tuple, set and
  dict arguments hold) and ``firefly_orm.result.items`` (the result's length, when it is one
  of those),
  ``firefly_orm.retries`` (lost races retried), ``error.type`` on failure.

Never recorded: argument or result values, keys, queries, conversation ids, user ids (they
may carry user data; ``gen_ai.memory.query.text`` and ``gen_ai.memory.records`` are opt-in in
the conventions and not emitted, and ``gen_ai.memory.store.id`` is not emitted because a
store's only identity is its URL, which may hold credentials).

The instruments, on the meter ``firefly_orm``: ``firefly_orm.memory.operation.duration``
(histogram, seconds), ``firefly_orm.memory.retries`` and ``firefly_orm.memory.evictions``
(counters).

OpenTelemetry is the ``otel`` extra (``opentelemetry-api`` only).  Without it installed this
module does nothing; with the API but no SDK configured, the API's no-op tracer and meter make
it cost almost nothing (attributes are computed only for a recording span).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

try:
    from opentelemetry import metrics, trace
except ImportError:  # the otel extra is not installed: no spans, no metrics
    trace = None  # type: ignore[assignment]
    metrics = None  # type: ignore[assignment]

__all__ = [
    "DURATION",
    "EVICTIONS",
    "GEN_AI_OPERATIONS",
    "MEMORY_KINDS",
    "gen_ai_operation",
    "memory_kind",
    "RETRIES",
    "OperationRecord",
    "evicted",
    "migration",
    "operation",
    "retried",
]

T = TypeVar("T")

#: The tracer's and meter's instrumentation scope.
SCOPE = "firefly_orm"

#: The instrument names.
DURATION = "firefly_orm.memory.operation.duration"
RETRIES = "firefly_orm.memory.retries"
EVICTIONS = "firefly_orm.memory.evictions"

#: The span attribute names.
GEN_AI_OPERATION = "gen_ai.operation.name"
OPERATION = "firefly_orm.operation"
KIND = "firefly_orm.memory.kind"
STORE = "firefly_orm.store"
IS_ASYNC = "firefly_orm.async"
INPUT_ITEMS = "firefly_orm.input.items"
RESULT_ITEMS = "firefly_orm.result.items"
RETRY_COUNT = "firefly_orm.retries"
EVICTED_TURNS = "firefly_orm.evicted.turns"
EVICTION_REASON = "firefly_orm.eviction.reason"
ERROR_TYPE = "error.type"
REVISION = "firefly_orm.migration.revision"

#: The namespace kind of each layer, by class name (a layer not listed: its class name).
MEMORY_KINDS: Mapping[str, str] = {
    "ConversationMemory": "conversation",
    "WorkingMemory": "working",
    "LongTermMemory": "long_term",
    "DailyLogs": "long_term",
    "Artifacts": "artifacts",
    "ArtifactWorkspace": "artifacts",
    "MemoryManager": "manager",
}

#: The GenAI ``gen_ai.operation.name`` of a method, by the first word of its name.
GEN_AI_OPERATIONS: Mapping[str, str] = {
    **dict.fromkeys(
        [
            "add",
            "append",
            "copy",
            "create",
            "extend",
            "import",
            "new",
            "promote",
            "remember",
            "set",
            "update",
            "write",
        ],
        "update_memory",
    ),
    **dict.fromkeys(
        [
            "assemble",
            "audit",
            "conversation",
            "count",
            "current",
            "daily",
            "export",
            "exists",
            "files",
            "get",
            "has",
            "history",
            "info",
            "items",
            "keys",
            "list",
            "log",
            "messages",
            "owner",
            "read",
            "recall",
            "search",
            "stat",
            "to",
            "transcript",
            "user",
        ],
        "search_memory",
    ),
    **dict.fromkeys(["clear", "delete", "erase", "forget", "prune", "reset"], "delete_memory"),
}

_SIZED = (list, tuple, set, frozenset, dict)


@dataclass
class OperationRecord:
    """What one running operation counted: its lost races, and its result's size."""

    name: str
    store: str
    retries: int = 0
    result_items: int | None = None

    def done(self, result: T) -> T:
        """Note the size of a collection ``result`` (never its contents) and return it."""
        if isinstance(result, _SIZED):
            self.result_items = len(result)
        return result


_CURRENT: ContextVar[OperationRecord | None] = ContextVar("firefly_orm_operation", default=None)

if trace is not None:
    # Proxies until the application sets its providers, then forwarding to them.
    _TRACER = trace.get_tracer(SCOPE)
    _NO_TRACING = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
    _METER = metrics.get_meter(SCOPE)
    _DURATIONS = _METER.create_histogram(
        DURATION, unit="s", description="How long a public memory operation took, retries included."
    )
    _RETRIES = _METER.create_counter(
        RETRIES, unit="{retry}", description="Transactions retried after a lost race."
    )
    _EVICTIONS = _METER.create_counter(
        EVICTIONS, unit="{turn}", description="Conversation turns evicted from the window."
    )


def _items(values: Any) -> int:
    """How many items the collections among ``values`` hold (other values count none)."""
    return sum(len(value) for value in values if isinstance(value, _SIZED))


def gen_ai_operation(method: str) -> str | None:
    """The ``gen_ai.operation.name`` of the method ``method`` (sync or async name), if any."""
    return GEN_AI_OPERATIONS.get(method.removeprefix("async_").split("_", 1)[0])


def memory_kind(layer: type) -> str:
    """The namespace kind of the layer class ``layer`` (:data:`MEMORY_KINDS`, else its name)."""
    for cls in layer.__mro__:
        if cls.__name__ in MEMORY_KINDS:
            return MEMORY_KINDS[cls.__name__]
    return layer.__name__


_DESCRIBED: dict[tuple[type, str], tuple[str, dict[str, Any]]] = {}


def _described(layer: type, method: str) -> tuple[str, dict[str, Any]]:
    """The span name and the fixed attributes of ``layer.method`` (worked out once)."""
    known = _DESCRIBED.get((layer, method))
    if known is not None:
        return known
    name = f"{layer.__name__}.{method.removeprefix('async_')}"
    attributes: dict[str, Any] = {
        OPERATION: name,
        KIND: memory_kind(layer),
        IS_ASYNC: method.startswith("async_"),
    }
    gen_ai = gen_ai_operation(method)
    if gen_ai is not None:
        attributes[GEN_AI_OPERATION] = gen_ai
    known = _DESCRIBED[layer, method] = name, attributes
    return known


def _tracing() -> bool:
    """Whether the application configured a tracer provider (else no span is started)."""
    return not isinstance(trace.get_tracer_provider(), _NO_TRACING)


@contextmanager
def operation(
    layer: Any, method: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> Iterator[OperationRecord]:
    """One span and one duration measurement around the public method ``method`` of ``layer``.

    ``method`` is the attribute name (``add_turn`` or ``async_add_turn``);
    ``args`` and ``kwargs`` are the call's arguments, of which only the sizes
    are recorded.  The record yielded counts the operation's retries
    (:func:`retried`) and takes the result's size (:meth:`OperationRecord.done`).
    Without a configured tracer provider no span is started (the duration is
    still measured, for a meter provider set on its own).
    """
    name, fixed = _described(type(layer), method)
    record = OperationRecord(name, type(layer.store).__name__)
    token = _CURRENT.set(record)
    try:
        if trace is None:
            yield record
            return
        with (
            _TRACER.start_as_current_span(name, attributes={**fixed, STORE: record.store})
            if _tracing()
            else nullcontext(None)
        ) as span:
            started = time.perf_counter()
            error: str | None = None
            try:
                yield record
            except BaseException as exc:
                error = type(exc).__qualname__
                raise
            finally:
                _finish(span, record, fixed, error, time.perf_counter() - started, args, kwargs)
    finally:
        _CURRENT.reset(token)


def _finish(
    span: Any,
    record: OperationRecord,
    fixed: Mapping[str, Any],
    error: str | None,
    seconds: float,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> None:
    """Set the sizes and the outcome on ``span`` (``None``: no span); record the duration."""
    measured: dict[str, Any] = {OPERATION: record.name, STORE: record.store}
    if GEN_AI_OPERATION in fixed:
        measured[GEN_AI_OPERATION] = fixed[GEN_AI_OPERATION]
    if error is not None:
        measured[ERROR_TYPE] = error
    _DURATIONS.record(seconds, measured)
    if span is None or not span.is_recording():
        return
    span.set_attribute(INPUT_ITEMS, _items(args) + _items(kwargs.values()))
    span.set_attribute(RETRY_COUNT, record.retries)
    if record.result_items is not None:
        span.set_attribute(RESULT_ITEMS, record.result_items)
    if error is not None:
        span.set_attribute(ERROR_TYPE, error)


def retried() -> None:
    """Count one lost race retried by the running operation (``ConcurrencyError``)."""
    record = _CURRENT.get()
    if record is not None:
        record.retries += 1
    if trace is None:
        return
    attributes = {OPERATION: record.name, STORE: record.store} if record is not None else {}
    _RETRIES.add(1, attributes)


def evicted(turns: int, reason: str) -> None:
    """Count ``turns`` evicted from a conversation's window (a trim) for ``reason``."""
    if trace is None or turns <= 0:
        return
    record = _CURRENT.get()
    attributes = {EVICTION_REASON: reason}
    if record is not None:
        attributes[STORE] = record.store
    _EVICTIONS.add(turns, attributes)
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attribute(EVICTED_TURNS, turns)
        span.set_attribute(EVICTION_REASON, reason)


@contextmanager
def migration(direction: str, revision: str) -> Iterator[None]:
    """The span ``firefly_orm.migrate.<direction>`` around an upgrade or downgrade."""
    if trace is None:
        yield
        return
    name = f"firefly_orm.migrate.{direction}"
    with _TRACER.start_as_current_span(name, attributes={OPERATION: name, REVISION: revision}):
        yield
