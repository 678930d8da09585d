"""OpenTelemetry: one span per public memory operation, metrics, and nothing without an SDK.

Every public method of the memory layers (found by introspection: the forms
``sync_method`` / ``async_method`` derived) is called once on SQLite, with a
secret string as content, keys and ids; each call must end exactly one span
named ``Layer.method`` carrying the documented attributes and no secret.  The
providers are the SDK's, with the in-memory span exporter and metric reader,
wired into :mod:`firefly_orm.bridges._telemetry` for this module only.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from pydantic_ai.messages import ModelRequest, UserPromptPart

from firefly_orm import MemoryManager
from firefly_orm.artifacts import Artifacts, ArtifactWorkspace
from firefly_orm.bridges import _telemetry
from firefly_orm.bridges._steps import (
    _FORMS,
    MemoryLayer,
    Operation,
    Transaction,
    async_method,
    retrying,
    sync_method,
)
from firefly_orm.conversation import ConversationMemory
from firefly_orm.errors import ConcurrencyError
from firefly_orm.long_term import LongTermMemory
from firefly_orm.migrate import downgrade, upgrade
from firefly_orm.protocols import UnitOfWork
from firefly_orm.sql import SQLiteStore
from firefly_orm.working import WorkingMemory

SECRET = "zq7secretada"
USER = f"u{SECRET}"
#: The attributes every operation span carries.
ALWAYS = {
    _telemetry.OPERATION,
    _telemetry.KIND,
    _telemetry.STORE,
    _telemetry.IS_ASYNC,
    _telemetry.INPUT_ITEMS,
    _telemetry.RETRY_COUNT,
}
#: Every attribute an operation span may carry.
DOCUMENTED = ALWAYS | {
    _telemetry.GEN_AI_OPERATION,
    _telemetry.RESULT_ITEMS,
    _telemetry.ERROR_TYPE,
    _telemetry.EVICTED_TURNS,
    _telemetry.EVICTION_REASON,
}


@dataclass
class Telemetry:
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    tracer_provider: TracerProvider

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def points(self, name: str) -> list[Any]:
        data = self.metrics.get_metrics_data()
        found: list[Any] = []
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        found.extend(metric.data.data_points)
        return found


@pytest.fixture
def telemetry(monkeypatch: pytest.MonkeyPatch) -> Iterator[Telemetry]:
    """The SDK's in-memory exporter and reader behind the telemetry module's instruments."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter(_telemetry.SCOPE)
    monkeypatch.setattr(_telemetry, "_TRACER", tracer_provider.get_tracer(_telemetry.SCOPE))
    monkeypatch.setattr(_telemetry, "_tracing", lambda: True)  # as if the global were set
    monkeypatch.setattr(
        _telemetry, "_DURATIONS", meter.create_histogram(_telemetry.DURATION, unit="s")
    )
    monkeypatch.setattr(_telemetry, "_RETRIES", meter.create_counter(_telemetry.RETRIES))
    monkeypatch.setattr(_telemetry, "_EVICTIONS", meter.create_counter(_telemetry.EVICTIONS))
    yield Telemetry(exporter, reader, tracer_provider)
    tracer_provider.shutdown()


# --------------------------------------------------------------------------- the calls


def message() -> ModelRequest:
    return ModelRequest(parts=[UserPromptPart(content=f"my secret is {SECRET}")])


@dataclass
class Layers:
    """One of each layer on one SQLite store, and what earlier calls returned."""

    store: SQLiteStore
    conversation: ConversationMemory
    working: WorkingMemory
    long_term: LongTermMemory
    artifacts: Artifacts
    workspace: ArtifactWorkspace
    manager: MemoryManager
    results: dict[str, Any] = field(default_factory=dict)
    cid: str = ""


def layers(tmp_path: Path) -> Layers:
    store = SQLiteStore(tmp_path / "memory.db")
    store.initialize()
    artifacts = Artifacts(store=store)
    built = Layers(
        store=store,
        conversation=ConversationMemory(store=store),
        working=WorkingMemory(store=store, scope_id=f"scope{SECRET}"),
        long_term=LongTermMemory(store=store),
        artifacts=artifacts,
        workspace=artifacts.create(f"ws{SECRET}"),
        manager=MemoryManager(store=store),
    )
    built.cid = built.conversation.new_conversation(user_id=USER)
    built.conversation.add_turn(built.cid, f"hi {SECRET}", f"hello {SECRET}")
    return built


Args = tuple[tuple[Any, ...], dict[str, Any]]
Call = tuple[str, Callable[[Layers], Args]]


def a(*args: Any, **kwargs: Any) -> Args:
    return args, kwargs


def turn_id(x: Layers) -> int:
    return int(x.results["add_turn"].turn_id)


#: Each layer's public methods, in an order where each call has what it needs
#: (destructive ones last); a method missing here fails the test.
CALLS: dict[str, tuple[Callable[[Layers], MemoryLayer], list[Call]]] = {
    "ConversationMemory": (
        lambda x: x.conversation,
        [
            ("new_conversation", lambda x: a(user_id=USER)),
            ("add_turn", lambda x: a(x.cid, f"q {SECRET}", f"r {SECRET}", metadata={"k": SECRET})),
            ("add", lambda x: a(x.cid, message())),
            ("add_many", lambda x: a(x.cid, [message(), message()])),
            ("get_turns", lambda x: a(x.cid)),
            ("search_conversations", lambda x: a(SECRET, mode="text")),
            ("add_turns", lambda x: a(x.results["new_conversation"], x.results["get_turns"])),
            ("get_message_history", lambda x: a(x.cid)),
            ("get_context", lambda x: a(x.cid)),
            ("get_recent", lambda x: a(x.cid, 2)),
            ("get_recent_messages", lambda x: a(x.cid, 2)),
            ("get_summary", lambda x: a(x.cid)),
            ("get_total_tokens", lambda x: a(x.cid)),
            ("get_archived_turns", lambda x: a(x.cid)),
            ("exists", lambda x: a(x.cid)),
            ("owner_of", lambda x: a(x.cid)),
            ("verify", lambda x: a(x.cid)),
            ("repair", lambda x: a(x.cid)),
            ("to_dict", lambda x: a(x.cid)),
            ("export_conversation", lambda x: a(x.cid)),
            (
                "import_conversation",
                lambda x: a(x.results["export_conversation"], conversation_id=f"c1{SECRET}"),
            ),
            (
                "import_conversations",
                lambda x: a([x.results["export_conversation"]], conversation_id=f"c2{SECRET}"),
            ),
            ("copy_conversation", lambda x: a(x.cid)),
            ("copy", lambda x: a(x.cid)),
            ("conversation_info", lambda x: a(x.cid)),
            ("update_conversation", lambda x: a(x.cid, title=f"t {SECRET}", tags=["k"])),
            ("generate_title", lambda x: a(x.cid, titler=lambda turns: f"title {SECRET}")),
            ("list_conversations", lambda x: a(USER, tags=["k"])),
            ("usage_totals", lambda x: a(x.cid)),
            ("update_state", lambda x: a(x.cid, {"k": SECRET, "user:u": SECRET})),
            ("get_state", lambda x: a(x.cid)),
            ("branch", lambda x: a(x.cid, turn_id(x))),
            ("branches", lambda x: a(x.cid)),
            ("parent_of", lambda x: a(x.results["branch"])),
            ("rewind", lambda x: a(x.results["branch"], -1)),
            ("get_rewound_turns", lambda x: a(x.results["branch"])),
            ("purge_rewound", lambda x: a(x.results["branch"])),
            ("pop_turn", lambda x: a(x.results["copy"])),
            ("update_turn", lambda x: a(x.cid, turn_id(x), user_prompt=f"new {SECRET}")),
            ("delete_turn", lambda x: a(x.cid, turn_id(x))),
            ("user_conversations", lambda x: a(USER)),
            ("clear", lambda x: a(x.cid)),
            ("erase_user", lambda x: a(USER)),
            ("clear_all", lambda x: a()),
        ],
    ),
    "WorkingMemory": (
        lambda x: x.working,
        [
            ("set", lambda x: a(f"key{SECRET}", SECRET, metadata={"m": SECRET})),
            ("get", lambda x: a(f"key{SECRET}")),
            ("get_entry", lambda x: a(f"key{SECRET}")),
            ("has", lambda x: a(f"key{SECRET}")),
            ("items", lambda x: a()),
            ("keys", lambda x: a()),
            ("to_context_string", lambda x: a()),
            ("to_dict", lambda x: a()),
            ("delete", lambda x: a(f"key{SECRET}")),
            ("clear", lambda x: a()),
        ],
    ),
    "LongTermMemory": (
        lambda x: x.long_term,
        [
            ("remember", lambda x: a(f"fact {SECRET}", key=f"k{SECRET}", user_id=USER)),
            ("get", lambda x: a(f"k{SECRET}", user_id=USER)),
            ("recall", lambda x: a(SECRET, user_id=USER)),
            ("list", lambda x: a(user_id=USER)),
            ("count", lambda x: a(user_id=USER)),
            ("export_items", lambda x: a(user_id=USER)),
            ("import_items", lambda x: a(x.results["export_items"])),
            ("log_days", lambda x: a(user_id=USER)),
            ("daily_log", lambda x: a("2026-01-02", user_id=USER)),
            ("prune_daily_logs", lambda x: a(before="2020-01-01", user_id=USER)),
            ("forget", lambda x: a(f"k{SECRET}", user_id=USER)),
            ("clear", lambda x: a(user_id=USER)),
        ],
    ),
    "Artifacts": (
        lambda x: x.artifacts,
        [
            ("create", lambda x: a(f"w2{SECRET}")),
            ("get_or_create", lambda x: a(f"w3{SECRET}")),
            ("open", lambda x: a(f"w2{SECRET}")),
            ("exists", lambda x: a(f"w2{SECRET}")),
            ("info", lambda x: a(f"w2{SECRET}")),
            ("list_workspaces", lambda x: a()),
            (
                "import_snapshot",
                lambda x: a(x.workspace.export_snapshot(), key=f"w4{SECRET}"),
            ),
            ("delete_workspace", lambda x: a(f"w2{SECRET}")),
        ],
    ),
    "ArtifactWorkspace": (
        lambda x: x.workspace,
        [
            ("write_text", lambda x: a(f"notes/{SECRET}.md", SECRET, reason=SECRET)),
            ("write_json", lambda x: a(f"notes/{SECRET}.json", {"k": SECRET})),
            ("write_bytes", lambda x: a(f"notes/{SECRET}.bin", SECRET.encode())),
            ("read", lambda x: a(f"notes/{SECRET}.md")),
            ("read_text", lambda x: a(f"notes/{SECRET}.md")),
            ("read_json", lambda x: a(f"notes/{SECRET}.json")),
            ("read_bytes", lambda x: a(f"notes/{SECRET}.bin")),
            ("current_sha", lambda x: a(f"notes/{SECRET}.md")),
            ("read_version", lambda x: a(f"notes/{SECRET}.md", x.results["current_sha"])),
            ("stat", lambda x: a(f"notes/{SECRET}.md")),
            ("exists", lambda x: a(f"notes/{SECRET}.md")),
            ("files", lambda x: a()),
            ("list_paths", lambda x: a()),
            ("history", lambda x: a(f"notes/{SECRET}.md")),
            (
                "promote",
                lambda x: a(f"notes/{SECRET}.md", f"user/{SECRET}.md", actor="r", reason=SECRET),
            ),
            ("append", lambda x: a(message())),
            ("extend", lambda x: a([message(), message()])),
            ("messages", lambda x: a()),
            ("transcript", lambda x: a()),
            ("audit_log", lambda x: a()),
            ("audit_tail", lambda x: a(5)),
            ("export_snapshot", lambda x: a()),
            ("delete", lambda x: a(f"notes/{SECRET}.bin")),
        ],
    ),
    "MemoryManager": (
        lambda x: x.manager,
        [
            ("new_conversation", lambda x: a()),
            (
                "add_turn",
                lambda x: a(x.results["new_conversation"], f"q {SECRET}", f"r {SECRET}"),
            ),
            ("get_message_history", lambda x: a(x.results["new_conversation"])),
            ("get_context", lambda x: a(x.results["new_conversation"])),
            ("get_recent_messages", lambda x: a(x.results["new_conversation"], 2)),
            ("assemble_context", lambda x: a(x.results["new_conversation"], query=SECRET)),
            ("conversation_exists", lambda x: a(x.results["new_conversation"])),
            ("owner_of", lambda x: a(x.results["new_conversation"])),
            ("verify_conversation", lambda x: a(x.results["new_conversation"])),
            ("repair_conversation", lambda x: a(x.results["new_conversation"])),
            ("user_conversations", lambda x: a(USER)),
            ("conversation_info", lambda x: a(x.results["new_conversation"])),
            (
                "update_conversation",
                lambda x: a(x.results["new_conversation"], title=f"t {SECRET}"),
            ),
            ("list_conversations", lambda x: a(USER)),
            ("usage_totals", lambda x: a(x.results["new_conversation"])),
            (
                "update_state",
                lambda x: a(x.results["new_conversation"], {"k": SECRET, "app:a": SECRET}),
            ),
            ("get_state", lambda x: a(x.results["new_conversation"])),
            ("branch", lambda x: a(x.results["new_conversation"], 0)),
            ("branches", lambda x: a(x.results["new_conversation"])),
            ("parent_of", lambda x: a(x.results["branch"])),
            ("rewind", lambda x: a(x.results["branch"], -1)),
            ("get_rewound_turns", lambda x: a(x.results["branch"])),
            ("purge_rewound", lambda x: a(x.results["branch"])),
            ("copy_conversation", lambda x: a(x.results["new_conversation"])),
            ("pop_turn", lambda x: a(x.results["copy_conversation"])),
            ("set_fact", lambda x: a(f"key{SECRET}", SECRET)),
            ("get_fact", lambda x: a(f"key{SECRET}")),
            ("get_working_context", lambda x: a()),
            ("remember", lambda x: a(f"fact {SECRET}", key=f"k{SECRET}")),
            ("recall", lambda x: a(SECRET)),
            ("search_memory", lambda x: a(SECRET, mode="text")),
            ("forget", lambda x: a(f"k{SECRET}")),
            ("clone_for_isolation", lambda x: a()),
            ("clear_working", lambda x: a()),
            ("clear_conversation", lambda x: a(x.results["new_conversation"])),
            ("erase_user", lambda x: a(USER)),
            ("reset", lambda x: a()),
            ("clear_all", lambda x: a()),
        ],
    ),
}


def public_methods(layer: type) -> set[str]:
    """The sync public methods ``sync_method`` derived on ``layer`` (introspected)."""
    return {
        name
        for name in dir(layer)
        if not name.startswith(("_", "async_")) and _FORMS.get(getattr(layer, name)) is not None
    }


def all_layer_classes() -> dict[str, type]:
    built = {
        "ConversationMemory": ConversationMemory,
        "WorkingMemory": WorkingMemory,
        "LongTermMemory": LongTermMemory,
        "Artifacts": Artifacts,
        "ArtifactWorkspace": ArtifactWorkspace,
        "MemoryManager": MemoryManager,
    }
    return built


def test_every_public_method_has_a_call_here() -> None:
    for name, layer in all_layer_classes().items():
        listed = {method for method, _ in CALLS[name][1]}
        assert listed == public_methods(layer), name


def check_span(
    spans: list[ReadableSpan], layer: str, method: str, is_async: bool, store: str
) -> None:
    name = f"{layer}.{method}"
    mine = [span for span in spans if span.name == name]
    assert len(mine) == 1, (name, [span.name for span in spans])
    attributes = dict(mine[0].attributes or {})
    assert ALWAYS <= attributes.keys() <= DOCUMENTED, (name, attributes)
    assert attributes[_telemetry.OPERATION] == name
    assert attributes[_telemetry.IS_ASYNC] is is_async
    assert attributes[_telemetry.STORE] == store
    assert attributes[_telemetry.KIND] == _telemetry.memory_kind(all_layer_classes()[layer])
    assert attributes.get(_telemetry.GEN_AI_OPERATION) == _telemetry.gen_ai_operation(method)
    assert mine[0].status.is_ok, (name, mine[0].status)
    for span in spans:
        for key, value in (span.attributes or {}).items():
            assert SECRET not in str(value), (span.name, key)
        assert SECRET not in span.name


def test_each_sync_method_emits_one_span(tmp_path: Path, telemetry: Telemetry) -> None:
    x = layers(tmp_path)
    for layer_name, (pick, calls) in CALLS.items():
        layer = pick(x)
        for method, arguments in calls:
            args, kwargs = arguments(x)
            telemetry.spans.clear()
            x.results[method] = getattr(layer, method)(*args, **kwargs)
            check_span(telemetry.finished(), layer_name, method, False, "SQLiteStore")
        x.results.clear()


def test_each_async_method_emits_one_span(tmp_path: Path, telemetry: Telemetry) -> None:
    x = layers(tmp_path)

    async def call_all() -> None:
        for layer_name, (pick, calls) in CALLS.items():
            layer = pick(x)
            for method, arguments in calls:
                args, kwargs = arguments(x)
                telemetry.spans.clear()
                x.results[method] = await getattr(layer, f"async_{method}")(*args, **kwargs)
                check_span(telemetry.finished(), layer_name, method, True, "SQLiteStore")
            x.results.clear()

    asyncio.run(call_all())


# --------------------------------------------------------------------------- outcomes and metrics


class Flaky(MemoryLayer):
    """A layer whose one write loses ``losses`` races before it commits."""

    def __init__(self, store: SQLiteStore, losses: int) -> None:
        super().__init__(store)
        self.losses = losses

    def _write(self, value: str) -> Operation[str]:
        """Write ``value`` (losing the first races)."""

        def work(uow: UnitOfWork) -> str:
            if self.losses > 0:
                self.losses -= 1
                raise ConcurrencyError("lost a race")
            return value

        return (yield from retrying(Transaction(work, commit=True), seconds=0.0))

    write = sync_method(_write)
    async_write = async_method(_write)


def test_retries_are_counted_on_the_span_and_the_counter(
    tmp_path: Path, telemetry: Telemetry
) -> None:
    store = SQLiteStore(tmp_path / "memory.db")
    store.initialize()
    telemetry.spans.clear()
    assert Flaky(store, 2).write(SECRET) == SECRET
    assert asyncio.run(Flaky(store, 1).async_write(SECRET)) == SECRET
    spans = telemetry.finished()
    assert [span.name for span in spans] == ["Flaky.write", "Flaky.write"]
    assert [span.attributes[_telemetry.RETRY_COUNT] for span in spans] == [2, 1]  # type: ignore[index]
    assert spans[0].attributes[_telemetry.KIND] == "Flaky"  # type: ignore[index]
    assert _telemetry.GEN_AI_OPERATION in spans[0].attributes  # type: ignore[operator]
    (retries,) = telemetry.points(_telemetry.RETRIES)
    assert retries.value == 3
    assert retries.attributes == {
        _telemetry.OPERATION: "Flaky.write",
        _telemetry.STORE: "SQLiteStore",
    }


def test_a_failed_operation_ends_its_span_with_the_error_type(
    tmp_path: Path, telemetry: Telemetry
) -> None:
    store = SQLiteStore(tmp_path / "memory.db")
    store.initialize()
    telemetry.spans.clear()
    with pytest.raises(ConcurrencyError):
        Flaky(store, 10**6).write(SECRET)
    (span,) = telemetry.finished()
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes[_telemetry.ERROR_TYPE] == "ConcurrencyError"  # type: ignore[index]
    (duration,) = telemetry.points(_telemetry.DURATION)
    assert duration.attributes[_telemetry.ERROR_TYPE] == "ConcurrencyError"
    assert duration.count == 1


def test_durations_and_evictions_are_measured(tmp_path: Path, telemetry: Telemetry) -> None:
    store = SQLiteStore(tmp_path / "memory.db")
    store.initialize()
    memory = ConversationMemory(store=store, max_messages=2, max_tokens=None)
    cid = memory.new_conversation()
    for n in range(3):
        memory.add_turn(cid, f"q{n} {SECRET}", f"r{n} {SECRET}")
    adds = [span for span in telemetry.finished() if span.name == "ConversationMemory.add_turn"]
    assert [span.attributes.get(_telemetry.EVICTED_TURNS) for span in adds] == [None, 1, 1]  # type: ignore[union-attr]
    (evictions,) = telemetry.points(_telemetry.EVICTIONS)
    assert evictions.value == 2
    assert evictions.attributes == {
        _telemetry.EVICTION_REASON: "max_messages",
        _telemetry.STORE: "SQLiteStore",
    }
    durations = {
        point.attributes[_telemetry.OPERATION]: point
        for point in telemetry.points(_telemetry.DURATION)
    }
    assert durations["ConversationMemory.add_turn"].count == 3
    assert durations["ConversationMemory.add_turn"].sum > 0
    assert (
        durations["ConversationMemory.new_conversation"].attributes[_telemetry.GEN_AI_OPERATION]
        == "update_memory"
    )


def test_sqlalchemy_spans_nest_under_the_operation_span(
    tmp_path: Path, telemetry: Telemetry
) -> None:
    instrumentor = SQLAlchemyInstrumentor()
    # The instrumentation declares sqlalchemy < 2.1 and refuses 2.1 unless told to skip
    # that check; it works on 2.1 (this test is the proof).
    instrumentor.instrument(tracer_provider=telemetry.tracer_provider, skip_dep_check=True)
    try:
        store = SQLiteStore(tmp_path / "memory.db")  # its engines are instrumented
        store.initialize()
        memory = ConversationMemory(store=store)
        cid = memory.new_conversation()
        reads: list[Callable[[], object]] = [
            lambda: memory.get_turns(cid),
            lambda: asyncio.run(memory.async_get_turns(cid)),
        ]
        for read in reads:
            telemetry.spans.clear()
            read()
            spans = telemetry.finished()
            (outer,) = [span for span in spans if span.name == "ConversationMemory.get_turns"]
            inner = [span for span in spans if span is not outer]
            assert inner, "SQLAlchemy's instrumentation emitted no span"
            assert {span.parent.span_id if span.parent else None for span in inner} == {
                outer.context.span_id
            }
            assert {span.context.trace_id for span in inner} == {outer.context.trace_id}
    finally:
        instrumentor.uninstrument()


def test_migrations_have_spans(tmp_path: Path, telemetry: Telemetry) -> None:
    url = f"sqlite:///{tmp_path / 'migrated.db'}"
    upgrade(url)
    downgrade(url, "base")
    spans = {span.name: span for span in telemetry.finished()}
    assert spans["firefly_orm.migrate.upgrade"].attributes[_telemetry.REVISION] == "head"  # type: ignore[index]
    assert spans["firefly_orm.migrate.downgrade"].attributes[_telemetry.REVISION] == "base"  # type: ignore[index]


# --------------------------------------------------------------------------- without an SDK

WITHOUT_SDK = """
import asyncio, sys, tempfile
from pathlib import Path
{block}
from firefly_orm.bridges import _telemetry
from firefly_orm.sql import SQLiteStore
from firefly_orm.working import WorkingMemory
store = SQLiteStore(Path(tempfile.mkdtemp()) / "m.db")
store.initialize()
memory = WorkingMemory(store=store)
memory.set("k", "v")
assert asyncio.run(memory.async_get("k")) == "v"
{after}
print("ok")
"""

#: Once the application sets a provider, the proxies the module took at import forward to it.
SET_LATER = """
assert _telemetry.trace is not None
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
memory.get("k")
assert [s.name for s in exporter.get_finished_spans()] == ["WorkingMemory.get"]
"""


@pytest.mark.parametrize(
    ("block", "after"),
    [
        pytest.param(
            "sys.modules['opentelemetry'] = None", "assert _telemetry.trace is None", id="no-otel"
        ),
        pytest.param("", SET_LATER, id="api-no-sdk-then-sdk"),
    ],
)
def test_no_sdk_no_error(block: str, after: str) -> None:
    source = WITHOUT_SDK.format(block=block, after=textwrap.indent(after, ""))
    done = subprocess.run(
        [sys.executable, "-c", source], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
