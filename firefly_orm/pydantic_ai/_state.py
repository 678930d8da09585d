"""The state change a :class:`~firefly_orm.pydantic_ai.MemoryAgent` run stores with its turn.

A run's state change is staged in memory while the run goes on and written
only with the run's turn, in the turn's unit of work
(``add_turn(..., state_delta=)``): the run's ``state_delta=`` first, then what
its tools staged with :meth:`MemoryDeps.stage_state
<firefly_orm.pydantic_ai.MemoryDeps.stage_state>`, in the order they staged it
(a later value of a key wins).  A run that stores no turn (it raised, was
cancelled, or its stream or iteration was left before the end) writes none of
it.

Why staged rather than written by the tool: a tool that called
``memory.async_update_state`` would commit at once, in its own unit of work,
also when the run then fails; staged, the state and the turn that explains it
commit together or not at all, as ADK commits an event's ``state_delta`` with
the event.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from firefly_orm.conversation._state import APP_PREFIX, TEMP_PREFIX, USER_PREFIX, check_state_delta
from firefly_orm.errors import EntryValidationError

__all__ = ["StagedState", "checked_state"]


def checked_state(delta: Mapping[str, Any] | None, name: str) -> dict[str, Any]:
    """``delta`` checked as a state delta, as a dict of JSON copies (keys with their prefix).

    Raises:
        EntryValidationError: Not a mapping, a bad key, or a value that is not JSON.
    """
    checked = check_state_delta(delta, name=name)
    copied: dict[str, Any] = dict(checked.own)
    for prefix, values in (
        (APP_PREFIX, checked.app),
        (USER_PREFIX, checked.user),
        (TEMP_PREFIX, checked.temp),
    ):
        copied.update({prefix + key: value for key, value in values.items()})
    return copied


class StagedState:
    """The state change one run has staged so far (a later value of a key wins).

    Each :meth:`stage` is one ``dict.update`` of values already checked, so
    sync tools pydantic-ai runs in worker threads stage without a lock.  A
    stage no run has started (a ``MemoryDeps`` the app built and never gave
    a run) refuses to stage: nothing would store it.
    """

    __slots__ = ("_values",)

    def __init__(self) -> None:
        self._values: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"StagedState({self._values!r})"

    def stage(self, delta: Mapping[str, Any]) -> None:
        """Check ``delta`` and stage it over what is staged (nothing staged on a bad one).

        Raises:
            EntryValidationError: A bad delta, or no run started this stage.
        """
        checked = checked_state(delta, "delta")
        if self._values is None:
            raise EntryValidationError(
                "delta",
                "this MemoryDeps belongs to no MemoryAgent run: only a run's deps "
                "(or a MemoryDeps passed to a run as deps=) store their staged state",
            )
        self._values.update(checked)

    def reset(self, start: Mapping[str, Any]) -> None:
        """Drop what is staged, then stage ``start`` (checked already): a run begins."""
        self._values = dict(start)

    def view(self) -> dict[str, Any]:
        """A copy of what is staged, ``temp:`` keys included."""
        return dict(self._values or {})
