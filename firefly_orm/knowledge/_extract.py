"""Extraction by a model: a turn's entities and triples, recorded in the graph.

The model (pydantic-ai, structured output :class:`Extraction`) is called
outside any transaction; only its answer is written, in one unit of work.  A
failed call or an answer that does not validate leaves the turn (stored by the
app before) untouched and queues the extraction in ``knowledge_pending``;
:meth:`KnowledgeExtractor.process_pending` retries it, at most
``max_attempts`` times in all, then marks it ``failed`` (see :meth:`stats`).
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from firefly_orm.bridges._steps import (
    CallOut,
    MemoryLayer,
    Operation,
    Transaction,
    async_method,
    sync_method,
)
from firefly_orm.entry import utcnow, validate_user_id
from firefly_orm.errors import EntryValidationError, MissingExtraError
from firefly_orm.knowledge._backend import GraphRows, PendingRow, new_id
from firefly_orm.knowledge._graph import KnowledgeGraph
from firefly_orm.knowledge._model import Extraction, FactChange
from firefly_orm.knowledge._scoped import check_scope
from firefly_orm.knowledge._worker import PendingReport, PendingWorker

if TYPE_CHECKING:
    from pydantic_ai.models import Model

__all__ = ["DEFAULT_INSTRUCTIONS", "ExtractionResult", "KnowledgeExtractor", "PendingReport"]

logger = logging.getLogger("firefly_orm")

#: What the model is told (the output schema is :class:`Extraction`).
DEFAULT_INSTRUCTIONS = (
    "Extract the entities the user's message mentions (name, type, attributes, aliases) and "
    "the relations it states as triples (subject, predicate, object). Call the speaker 'user'. "
    "Use short snake_case predicates such as lives_in or works_at. Extract only what is stated."
)


@dataclass(frozen=True)
class ExtractionResult:
    """What :meth:`KnowledgeExtractor.extract_from_turn` did.

    Attributes:
        changes: The update rule's outcome for each triple (empty when queued).
        pending_id: The queued extraction's id when the model failed (or when
            deferred), else ``None``.
        error: Why the model's answer was not used.
    """

    changes: list[FactChange] = field(default_factory=list)
    pending_id: str | None = None
    error: str | None = None


class KnowledgeExtractor(MemoryLayer):
    """Extracts entities and facts from turns with a model and records them in ``graph``.

    Args:
        graph: Where the facts go (its store, update rule and actor).
        model: A pydantic-ai model or model name (``"openai:gpt-4o-mini"``;
            ``FunctionModel`` / ``TestModel`` in tests).
        max_attempts: Model calls an extraction gets in all (inline and
            retries) before it is marked ``failed``.
        instructions: The model's instructions.
    """

    def __init__(
        self,
        graph: KnowledgeGraph,
        model: Model | str,
        *,
        max_attempts: int = 3,
        instructions: str = DEFAULT_INSTRUCTIONS,
    ) -> None:
        super().__init__(graph.store)
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise EntryValidationError(
                "max_attempts", f"give a whole number >= 1, not {max_attempts!r}"
            )
        try:
            from pydantic_ai import Agent
        except ImportError as exc:  # pragma: no cover - the extra is installed in tests
            raise MissingExtraError("model extraction", "pydantic-ai", exc.name) from exc
        self._graph = graph
        self._on = graph.access
        self._max_attempts = max_attempts
        self._agent: Agent[None, Extraction] = Agent(
            model, output_type=Extraction, instructions=instructions
        )

    @property
    def graph(self) -> KnowledgeGraph:
        """The graph the extracted facts go to."""
        return self._graph

    async def _ask(self, text: str) -> Extraction:
        result = await self._agent.run(text)
        return result.output

    def _call(self, text: str) -> CallOut[Extraction]:
        return CallOut(self._ask, (text,), what="the extraction model")

    def _extract_from_turn(
        self,
        user_id: str,
        text: str,
        *,
        turn_ref: str,
        observed_at: datetime | None = None,
        defer: bool = False,
        conversation_id: str | None = None,
    ) -> Operation[ExtractionResult]:
        """Extract from one stored turn and record the result (call it after ``add_turn``).

        The model is called first, with no transaction open; its answer is
        recorded by :meth:`KnowledgeGraph.record` with ``turn_ref`` as the
        evidence.  When the call fails or the answer is malformed (or holds
        values the graph refuses, such as a blank name), nothing is recorded:
        the extraction is queued for :meth:`process_pending` (a warning is
        logged).  ``defer=True`` queues it without calling the model.
        ``conversation_id``: the turn's conversation (its entities and facts are
        then listed for it; kept in the queue too).
        """
        validate_user_id(user_id)
        if not isinstance(text, str) or not isinstance(turn_ref, str) or not turn_ref:
            raise EntryValidationError("turn_ref", "give the turn's text and a non-empty reference")
        when = observed_at or utcnow()
        if when.tzinfo is None:
            raise EntryValidationError("observed_at", "give a timezone-aware datetime")
        scope = check_scope(conversation_id)
        if defer:
            pending_id = yield from Transaction.write(
                self._on, _queue, user_id, turn_ref, text, when, scope, None, 0
            )
            return ExtractionResult(pending_id=pending_id)
        done = yield from self._extracted(user_id, text, turn_ref, when, scope)
        if isinstance(done, str):  # the turn stays, the extraction waits
            error = done
            logger.warning(
                "knowledge extraction of %s failed, queued for retry: %s", turn_ref, error
            )
            pending_id = yield from Transaction.write(
                self._on,
                _queue,
                user_id,
                turn_ref,
                text,
                when,
                scope,
                error,
                1,
                self._max_attempts,
            )
            return ExtractionResult(pending_id=pending_id, error=error)
        return ExtractionResult(changes=done)

    def _extracted(
        self,
        user_id: str,
        text: str,
        turn_ref: str,
        when: datetime,
        scope: str | None,
        finish: Callable[[GraphRows], object] | None = None,
    ) -> Operation[builtins.list[FactChange] | str]:
        """The model's answer for ``text`` recorded (the changes), or why it was not: the
        model failed, or its answer holds values the graph refuses (a blank name...)."""
        try:
            extraction = yield from self._call(text)
        except Exception as exc:  # any model failure
            return f"{type(exc).__name__}: {exc}"
        try:
            return (
                yield from self._graph.recording(
                    user_id, extraction, turn_ref, when, finish, conversation_id=scope
                )
            )
        except EntryValidationError as exc:  # rolled back: nothing of it was written
            return f"{type(exc).__name__}: {exc}"

    def _process_pending(self, *, limit: int = 50) -> Operation[PendingReport]:
        """Retry queued extractions (oldest first, at most ``limit``); what happened.

        Each is one model call (outside any transaction), then one transaction:
        the facts recorded and the queue row deleted together, or, on another
        failure, its attempt counted (``failed`` after ``max_attempts``).
        """
        rows = yield from Transaction.read(self._on, _waiting, limit)
        recorded = retried = failed = 0
        for row in rows:
            done = yield from self._extracted(
                row.user_id,
                row.text,
                row.turn_ref,
                row.observed_at,
                row.conversation_id,
                _Dequeue(row.pending_id),
            )
            if isinstance(done, str):
                logger.warning("knowledge extraction of %s failed again: %s", row.turn_ref, done)
                gave_up = yield from Transaction.write(
                    self._on, _count_failure, row.pending_id, done, self._max_attempts
                )
                failed, retried = failed + gave_up, retried + (not gave_up)
                continue
            recorded += 1
        return PendingReport(recorded=recorded, retried_later=retried, failed=failed)

    def _stats(self) -> Operation[dict[str, int]]:
        """Queued extractions by status: ``{"pending": n, "failed": m}``."""
        return (yield from Transaction.read(self._on, _statuses))

    def background(self, *, interval: float = 30.0, limit: int = 50) -> PendingWorker:
        """A :class:`~firefly_orm.knowledge.PendingWorker` that runs :meth:`process_pending`
        (``limit`` per pass) every ``interval`` seconds, not started: ``async with
        extractor.background(interval=30): ...`` runs it for the block."""
        return PendingWorker(self, interval=interval, limit=limit)

    def start_background(self, *, interval: float = 30.0, limit: int = 50) -> PendingWorker:
        """:meth:`background`, started on the running event loop; ``await worker.stop()``
        ends it.  Raises ``RuntimeError`` outside a running loop."""
        worker = self.background(interval=interval, limit=limit)
        worker.start()
        return worker

    extract_from_turn = sync_method(_extract_from_turn)
    process_pending = sync_method(_process_pending)
    stats = sync_method(_stats)
    async_extract_from_turn = async_method(_extract_from_turn)
    async_process_pending = async_method(_process_pending)
    async_stats = async_method(_stats)


@dataclass(frozen=True)
class _Dequeue:
    """Deletes one queued extraction (in the unit of work that records it)."""

    pending_id: str

    def __call__(self, rows: GraphRows) -> None:
        rows.dequeue(self.pending_id)


def _queue(
    rows: GraphRows,
    user_id: str,
    turn_ref: str,
    text: str,
    observed_at: datetime,
    conversation_id: str | None,
    error: str | None,
    attempts: int,
    max_attempts: int = 1,
) -> str:
    pending_id = new_id()
    row: dict[str, Any] = {"pending_id": pending_id, "user_id": user_id, "turn_ref": turn_ref}
    row["conversation_id"] = conversation_id
    row.update(text=text, observed_at=observed_at, attempts=attempts, last_error=error)
    row["status"] = "failed" if error is not None and attempts >= max_attempts else "pending"
    row["updated_at"] = utcnow()
    rows.queue(row)
    return pending_id


def _waiting(rows: GraphRows, limit: int) -> builtins.list[PendingRow]:
    return rows.waiting(limit)


def _count_failure(rows: GraphRows, pending_id: str, error: str, max_attempts: int) -> bool:
    """One more failed attempt; whether the extraction is now given up."""
    attempts = rows.attempts(pending_id) + 1
    gave_up = attempts >= max_attempts
    rows.update_pending(
        pending_id,
        {
            "attempts": attempts,
            "status": "failed" if gave_up else "pending",
            "last_error": error,
            "updated_at": utcnow(),
        },
    )
    return gave_up


def _statuses(rows: GraphRows) -> dict[str, int]:
    counts = {"pending": 0, "failed": 0}
    counts.update(rows.statuses())
    return counts
