"""Draining queued knowledge extractions (issue 30): ``firefly-orm knowledge process-pending``
and the background task (:class:`PendingWorker`), on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import types
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cli_runner import run_cli
from dbutil import drop_schema
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from firefly_orm.errors import EntryValidationError
from firefly_orm.knowledge import KnowledgeExtractor, KnowledgeGraph, PendingReport, PendingWorker
from firefly_orm.sql import PostgreSQLStore, SQLAlchemyStore, SQLiteStore

T0 = datetime(2026, 3, 1, tzinfo=UTC)
#: Each text says where the user lives; anything else gets a malformed answer.
CITIES = {f"I live in City{n}": f"City{n}" for n in range(5)}
POISON = "I live in   "


def _answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    prompt = next(p.content for m in messages for p in m.parts if isinstance(p, UserPromptPart))
    if prompt == POISON:  # valid for pydantic, refused by the graph (a blank subject)
        triple = {"subject": "  ", "predicate": "lives_in", "object": "Nowhere"}
        args = json.dumps({"triples": [triple]})
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, args)])
    if prompt not in CITIES:
        return ModelResponse(parts=[TextPart("no JSON today")])
    triple = {"subject": "user", "predicate": "lives_in", "object": CITIES[prompt]}
    return ModelResponse(
        parts=[ToolCallPart(info.output_tools[0].name, json.dumps({"triples": [triple]}))]
    )


def fake_model() -> FunctionModel:
    return FunctionModel(_answer)


class Where:
    """A SQL store's place: the CLI's arguments and a way to open it."""

    def __init__(self, kind: str, tmp_path: Path, postgres_url: str | None) -> None:
        self.kind = kind
        if kind == "sqlite":
            self.path = tmp_path / "drain.sqlite3"
            self.args = ["--url", f"sqlite:///{self.path}"]
        else:
            assert postgres_url is not None
            self.url, self.schema = postgres_url, "kg_" + uuid.uuid4().hex[:10]
            self.args = ["--url", postgres_url, "--schema", self.schema]

    def open(self) -> SQLAlchemyStore:
        store: SQLAlchemyStore = (
            SQLiteStore(self.path)
            if self.kind == "sqlite"
            else PostgreSQLStore(self.url, schema_name=self.schema)
        )
        store.initialize()
        return store


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Where]:
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    found = Where(request.param, tmp_path, url)
    yield found
    if url is not None:
        drop_schema(url, found.schema)


def _queue(store: SQLAlchemyStore, texts: list[str]) -> KnowledgeExtractor:
    extractor = KnowledgeExtractor(KnowledgeGraph(store), fake_model(), max_attempts=2)
    for n, text in enumerate(texts):
        when = T0.replace(day=n + 1)
        extractor.extract_from_turn("ann", text, turn_ref=f"c1:{n}", observed_at=when, defer=True)
    return extractor


def test_the_cli_drains_the_queue(where: Where, monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("kg_drain_models")
    module.fake_model = fake_model  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "kg_drain_models", module)
    drain = ["knowledge", "process-pending", *where.args, "--model-factory"]
    both = run_cli(*drain, "x:y", "--model", "test")
    assert both.returncode == 2 and "either --model or --model-factory" in both.stderr
    missing = run_cli(*drain, "kg_drain_models:nothing")
    assert missing.returncode == 2 and "nothing" in missing.stderr
    assert run_cli(*drain, "kg_drain_models:fake_model", "--limit", "0").returncode == 2

    store = where.open()
    try:
        _queue(store, [*list(CITIES)[:3], "gibberish"])
        once = run_cli(*drain, "kg_drain_models:fake_model", "--limit", "2", "--once", "--json")
        assert once.returncode == 0, once.stderr
        first = json.loads(once.stdout)
        assert (first["recorded"], first["passes"]) == (2, 1)
        assert first["queue"] == {"pending": 2, "failed": 0}

        done = run_cli(*drain, "kg_drain_models:fake_model", "--limit", "1", "--max-attempts", "1")
        assert done.returncode == 0, done.stderr
        assert "1 extraction(s) recorded, 0 to retry later, 1 given up" in done.stdout
        assert "queue: 0 pending, 1 failed" in done.stdout
        graph = KnowledgeGraph(store)
        (fact,) = graph.facts_about("ann", "user")
        assert fact.object == "City2" and fact.evidence == ["c1:2"]
        assert [h["actor"] for h in graph.history("ann", limit=1)] == ["cli"]
    finally:
        store.close()


def test_the_background_task_drains_until_stopped(
    where: Where, caplog: pytest.LogCaptureFixture
) -> None:
    store = where.open()
    try:
        extractor = _queue(store, list(CITIES)[:3])

        async def scenario() -> PendingWorker:
            async with extractor.background(interval=0.05, limit=2) as worker:
                assert worker.running
                for _ in range(200):
                    if (await extractor.async_stats())["pending"] == 0:
                        break
                    await asyncio.sleep(0.02)
                # Queued while it runs: picked up at the next pass.
                await extractor.async_extract_from_turn(
                    "ann",
                    list(CITIES)[3],
                    turn_ref="c1:3",
                    observed_at=T0.replace(day=9),
                    defer=True,
                )
                for _ in range(200):
                    if (await extractor.async_stats())["pending"] == 0:
                        break
                    await asyncio.sleep(0.02)
            assert not worker.running
            return worker

        with caplog.at_level(logging.INFO, logger="firefly_orm"):
            worker = asyncio.run(scenario())
        assert worker.passes >= 2 and worker.last_error is None
        (fact,) = extractor.graph.facts_about("ann", "user")
        assert fact.object == "City3"
        messages = [r.getMessage() for r in caplog.records if r.name == "firefly_orm"]
        assert any("background extraction started" in m for m in messages)
        assert any("background extraction stopped" in m for m in messages)
        assert any("recorded" in m for m in messages)
    finally:
        store.close()


class Slow:
    """A drain whose passes take long, or fail, as the test says."""

    def __init__(self) -> None:
        self.calls = 0
        self.fail = False
        self.gate = asyncio.Event()

    async def async_process_pending(self, *, limit: int = 50) -> PendingReport:
        self.calls += 1
        if self.fail:
            raise RuntimeError("database down")
        await self.gate.wait()
        return PendingReport()


def test_stop_cancels_a_pass_after_its_timeout_and_errors_do_not_kill_the_task(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        slow = Slow()
        worker = PendingWorker(slow, interval=0.01)
        worker.start()
        with pytest.raises(RuntimeError, match="started already"):
            worker.start()
        await asyncio.sleep(0.05)  # the first pass waits on the gate
        await worker.stop(timeout=0.05)
        assert not worker.running and worker.passes == 0 and slow.calls == 1
        await worker.stop()  # twice is harmless

        failing = Slow()
        failing.fail = True
        async with PendingWorker(failing, interval=0.01) as again:
            for _ in range(100):
                if failing.calls >= 3:
                    break
                await asyncio.sleep(0.01)
            assert again.running and isinstance(again.last_error, RuntimeError)
            failing.fail = False
            failing.gate.set()
            for _ in range(100):
                if again.passes:
                    break
                await asyncio.sleep(0.01)
        assert again.passes >= 1 and again.last_error is None

    with caplog.at_level(logging.INFO, logger="firefly_orm"):
        asyncio.run(scenario())
    assert any("database down" in (r.exc_text or "") for r in caplog.records if r.exc_info)
    assert any("cancelled" in r.getMessage() for r in caplog.records)


def test_bad_settings_and_no_loop(tmp_path: Path) -> None:
    slow: Any = Slow()
    bad: list[Any] = [0, -1, float("nan"), True, "5"]
    for interval in bad:
        with pytest.raises(EntryValidationError, match="interval"):
            PendingWorker(slow, interval=interval)
    with pytest.raises(EntryValidationError, match="limit"):
        PendingWorker(slow, limit=0)
    with pytest.raises(RuntimeError, match="running event loop"):
        PendingWorker(slow).start()


def test_an_answer_the_graph_refuses_is_queued_and_does_not_block_the_queue(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "poison.sqlite3")
    store.initialize()
    try:
        extractor = KnowledgeExtractor(KnowledgeGraph(store), fake_model(), max_attempts=2)
        inline = extractor.extract_from_turn("ann", POISON, turn_ref="c1:0", observed_at=T0)
        assert inline.pending_id is not None and not inline.changes
        assert inline.error is not None and "EntryValidationError" in inline.error
        extractor.extract_from_turn("ann", "I live in City0", turn_ref="c1:1", defer=True)
        report = extractor.process_pending()  # the refused one first, then the good one
        assert (report.recorded, report.retried_later, report.failed) == (1, 0, 1)
        (fact,) = extractor.graph.facts_about("ann", "user")
        assert fact.object == "City0"
        assert extractor.stats() == {"pending": 0, "failed": 1}
    finally:
        store.close()
