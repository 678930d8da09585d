"""Draining queued extractions in the background: :class:`PendingWorker` (asyncio).

An app that queues extractions (``defer=True``, or model calls that failed)
drains the queue with :meth:`KnowledgeExtractor.process_pending
<firefly_orm.knowledge.KnowledgeExtractor.process_pending>`: from a cron job
(``firefly-orm knowledge process-pending``), or from a task of its own event
loop, which :class:`PendingWorker` is: one pass every ``interval`` seconds
(at once again after a pass that emptied a full batch), until stopped.  A
pass that raises (the database is down) is logged on ``firefly_orm`` and
retried at the next interval: the worker never dies of it.  Stopping lets the
pass under way finish (each queued extraction is one transaction: nothing
half-written is left either way), or cancels it after ``timeout`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

from firefly_orm.errors import EntryValidationError

__all__ = ["PendingReport", "PendingWorker"]

logger = logging.getLogger("firefly_orm")


@dataclass(frozen=True)
class PendingReport:
    """What one :meth:`KnowledgeExtractor.process_pending` pass did.

    Attributes:
        recorded: Extractions the model answered this time, now recorded.
        retried_later: Extractions that failed again and stay queued.
        failed: Extractions that used their last attempt (marked ``failed``).
    """

    recorded: int = 0
    retried_later: int = 0
    failed: int = 0


class Drains(Protocol):
    """What the worker drives (a :class:`~firefly_orm.knowledge.KnowledgeExtractor`)."""

    def async_process_pending(self, *, limit: int = 50) -> Awaitable[PendingReport]:
        """One pass over at most ``limit`` queued extractions."""
        ...


class PendingWorker:
    """An asyncio task that drains queued extractions until it is stopped.

    Made by :meth:`KnowledgeExtractor.background
    <firefly_orm.knowledge.KnowledgeExtractor.background>` (not started) or
    :meth:`KnowledgeExtractor.start_background
    <firefly_orm.knowledge.KnowledgeExtractor.start_background>` (started).

    Usage::

        async with extractor.background(interval=30):   # started, stopped on exit
            await serve_forever()

        worker = extractor.start_background(interval=30)  # inside a running loop
        ...
        await worker.stop()

    Args:
        extractor: What is drained.
        interval: Seconds between two passes (> 0).
        limit: Queued extractions per pass (at least 1).
    """

    def __init__(self, extractor: Drains, *, interval: float = 30.0, limit: int = 50) -> None:
        if (
            isinstance(interval, bool)
            or not isinstance(interval, int | float)
            or not math.isfinite(interval)
            or interval <= 0
        ):
            raise EntryValidationError("interval", f"give seconds > 0, not {interval!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise EntryValidationError("limit", f"give a whole number >= 1, not {limit!r}")
        self._extractor = extractor
        self._interval = float(interval)
        self._limit = limit
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._passes = 0
        self._last_report: PendingReport | None = None
        self._last_error: BaseException | None = None

    @property
    def running(self) -> bool:
        """Whether the task is started and not yet finished."""
        return self._task is not None and not self._task.done()

    @property
    def passes(self) -> int:
        """Passes completed so far (failed ones not counted)."""
        return self._passes

    @property
    def last_report(self) -> PendingReport | None:
        """What the latest completed pass did."""
        return self._last_report

    @property
    def last_error(self) -> BaseException | None:
        """The error of the latest pass that raised (``None`` once a pass succeeds)."""
        return self._last_error

    def start(self) -> None:
        """Start the task on the running event loop.

        Raises:
            RuntimeError: No event loop is running, or it was started already.
        """
        try:
            asyncio.current_task()  # raises outside a running loop (the task would never run)
        except RuntimeError:
            raise RuntimeError(
                "PendingWorker.start() needs a running event loop: call it from async code "
                "(or run `firefly-orm knowledge process-pending` from a scheduler)"
            ) from None
        if self._task is not None:
            raise RuntimeError("this PendingWorker was started already; make a new one")
        self._task = asyncio.create_task(self._run(), name="firefly_orm knowledge extraction")

    async def stop(self, *, timeout: float | None = None) -> None:
        """Stop: no new pass starts; the pass under way finishes, or is cancelled after
        ``timeout`` seconds (``None``: wait for it).  Stopping twice is harmless."""
        self._stopping.set()
        task = self._task
        if task is None or task.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout)
        except TimeoutError:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                if not task.cancelled():  # it is us who are cancelled, not only the task
                    raise

    async def __aenter__(self) -> PendingWorker:
        self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def _pass(self) -> PendingReport | None:
        """One pass; ``None`` when it raised (logged)."""
        try:
            report = await self._extractor.async_process_pending(limit=self._limit)
        except Exception as exc:  # the database or the model: logged, retried next time
            self._last_error = exc
            logger.exception(
                "knowledge: draining queued extractions failed; next try in %s s", self._interval
            )
            return None
        self._passes += 1
        self._last_report, self._last_error = report, None
        if report.recorded or report.retried_later or report.failed:
            logger.info(
                "knowledge: queued extractions: %d recorded, %d to retry, %d given up",
                report.recorded,
                report.retried_later,
                report.failed,
            )
        return report

    async def _run(self) -> None:
        logger.info("knowledge: background extraction started (every %s s)", self._interval)
        try:
            while not self._stopping.is_set():
                report = await self._pass()
                if report is not None and report.recorded + report.failed >= self._limit:
                    continue  # a full batch left the queue: more may wait
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), self._interval)
        except asyncio.CancelledError:
            logger.info("knowledge: background extraction cancelled")
            raise
        logger.info("knowledge: background extraction stopped")
