"""An operation relayed step by step: each step it yields transformed, preceded or observed.

The step driver (:mod:`firefly_orm.bridges._steps`) performs what an operation
yields.  A relay sits between the two: it passes each step on (or a step made
from it), sends the outcome back into the operation as the original step's, and
lets a caller run a step of its own first or note a step that succeeded.  The
conversation layer guards every unit of work with an ownership check through
it (:func:`firefly_orm.conversation._owner.guarded`), and a session held by an
agent run is released before each call-out through it
(:func:`firefly_orm.bridges._release.released_before_callouts`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from firefly_orm.bridges._steps import Operation, Step

__all__ = ["each_step"]

T = TypeVar("T")


def each_step(
    op: Operation[T] | Step[T],
    transform: Callable[[Step[Any]], Step[Any]] | None = None,
    *,
    before: Callable[[Step[Any]], Step[Any] | None] | None = None,
    after: Callable[[Step[Any]], object] | None = None,
) -> Operation[T]:
    """``op`` (an operation or one step), each step it yields replaced by ``transform(step)``.

    What a transformed step returns or raises is sent into ``op`` as the
    original step's outcome.  ``before(step)``, when it gives a step, is
    performed first; what that step raises ends the relay (it is not sent into
    ``op``).  ``after(step)`` is called once ``step`` succeeded.
    """
    gen: Operation[T] = iter(op) if isinstance(op, Step) else op
    value: Any = None
    error: Exception | None = None
    try:
        while True:
            try:
                step = gen.throw(error) if error is not None else gen.send(value)
            except StopIteration as stop:
                return cast(T, stop.value)
            value, error = None, None
            first = None if before is None else before(step)
            if first is not None:
                yield from first
            try:
                value = yield (step if transform is None else transform(step))
            except Exception as exc:
                error = exc
                continue
            if after is not None:
                after(step)
    finally:
        gen.close()
