"""Stopping a graph step's lease heartbeat never swallows a cancellation of the run itself."""

from __future__ import annotations

import asyncio

import pytest

from firefly_orm.pydantic_ai.graph import _stop


async def _slow_to_stop(stopped: asyncio.Event) -> None:
    """A heartbeat that takes a moment to wind down once cancelled."""
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        await asyncio.sleep(0.05)
        stopped.set()
        raise


def test_stopping_the_heartbeat_alone_returns() -> None:
    async def scenario() -> bool:
        stopped = asyncio.Event()
        beat = asyncio.create_task(_slow_to_stop(stopped))
        await asyncio.sleep(0)
        await _stop(beat)
        return stopped.is_set()

    assert asyncio.run(scenario()) is True


def test_a_run_cancelled_while_its_heartbeat_stops_stays_cancelled() -> None:
    async def scenario() -> None:
        stopped = asyncio.Event()
        beat = asyncio.create_task(_slow_to_stop(stopped))
        await asyncio.sleep(0)
        run = asyncio.create_task(_stop(beat))
        await asyncio.sleep(0.01)  # the run now waits for the heartbeat to wind down
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(run, timeout=5)

    asyncio.run(scenario())
