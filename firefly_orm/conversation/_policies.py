"""Conversation policies: the limits a conversation is held to, and who is told when they bite.

:func:`make_limits` validates a configuration once, at construction, so a
policy that can never hold (a pinned part that alone fills the window) is
refused before anything is written.  :class:`TrimEvent` and
:class:`SummarizeEvent` are what ``on_trim`` / ``on_summarize`` observers
receive, after the unit of work has committed (:func:`notify` calls them and
logs, never raises, what they raise).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

from firefly_orm.bridges._steps import CallOut, Operation, is_coroutine_callable
from firefly_orm.conversation._model import ConversationTurn, check_int
from firefly_orm.conversation._plan import Limits
from firefly_orm.errors import EntryValidationError
from firefly_orm.protocols import UnitOfWork

__all__ = [
    "Observer",
    "PromotionPolicy",
    "SummarizeEvent",
    "TrimEvent",
    "make_limits",
    "notify",
]

logger = logging.getLogger("firefly_orm")


class PromotionPolicy(Protocol):
    """What the conversation layer asks of a promotion of evicted turns.

    :class:`firefly_orm.long_term.Promotion` implements it; the conversation
    layer reaches long-term memory only through this protocol (it never
    imports :mod:`firefly_orm.long_term`'s operations).
    """

    def score(self, turns: Sequence[ConversationTurn]) -> Operation[tuple[float, ...]]:
        """Rate ``turns`` from 0.0 to 1.0, outside any unit of work."""
        ...

    def store(
        self,
        uow: UnitOfWork,
        conversation_id: str,
        owner: str | None,
        turns: Sequence[ConversationTurn],
        scores: Sequence[float],
    ) -> tuple[str, ...]:
        """Write the promoted items inside the eviction's unit of work; return their ids."""
        ...


@dataclass(frozen=True)
class TrimEvent:
    """Turns left a conversation's window (evicted by :meth:`add_turn`).

    Attributes:
        conversation_id: The conversation.
        reason: What started the eviction: ``"max_tokens"``,
            ``"summarize_threshold"`` (a threshold below ``max_tokens``, or
            without one) or ``"max_messages"``.
        evicted_turn_ids: The turns removed, oldest first (archived when
            ``keep_evicted``).
        turns_removed: How many turns were removed.
        messages_removed: How many model messages they held.
        turns_remaining: Turns retained afterwards.
        messages_remaining: Model messages retained afterwards.
        tokens_remaining: The retained token total afterwards.
        promoted_ids: The long-term items evicted turns were promoted to
            (see ``ConversationMemory(long_term=...)``).
        newest_over_budget: The newest turn alone exceeds ``max_tokens`` or
            ``max_messages``.  It is kept (a conversation always keeps its
            newest turn), and ``get_message_history`` / ``get_context`` return
            it, or its newest messages, over the budget rather than nothing.
            Such a write is reported even when it evicted nothing
            (``turns_removed == 0``).
    """

    conversation_id: str
    reason: str
    evicted_turn_ids: tuple[int, ...]
    turns_removed: int
    messages_removed: int
    turns_remaining: int
    messages_remaining: int
    tokens_remaining: int
    promoted_ids: tuple[str, ...] = ()
    newest_over_budget: bool = False


@dataclass(frozen=True)
class SummarizeEvent:
    """A new rolling summary was stored.

    Attributes:
        conversation_id: The conversation.
        summary: The new summary.
        turn_ids: The evicted turns it folded in, oldest first.
    """

    conversation_id: str
    summary: str
    turn_ids: tuple[int, ...]


#: An observer: a callable taking the event (sync, or async from async code).
Observer = Callable[[Any], object] | Callable[[Any], Awaitable[object]]


def make_limits(
    *,
    max_tokens: Any,
    summarize_threshold: Any,
    max_messages: Any,
    pin_count: Any,
    recent_count: Any,
) -> Limits:
    """Validated :class:`~firefly_orm.conversation._plan.Limits`.

    ``max_tokens=None`` turns the token limit off; ``summarize_threshold=None``
    (or ``0``) means no threshold (see :func:`~firefly_orm._layout.token_caps`).

    Raises:
        EntryValidationError: A value out of range, or pinned turns that cannot
            fit: every turn counts at least one token and one message, and the
            newest turn needs room beside the pinned ones.
    """
    limits = Limits(
        max_tokens=None if max_tokens is None else check_int("max_tokens", max_tokens, 1),
        summarize_threshold=None
        if summarize_threshold is None
        else check_int("summarize_threshold", summarize_threshold, 0),
        max_messages=None if max_messages is None else check_int("max_messages", max_messages, 1),
        pin_count=check_int("pin_count", pin_count, 0),
        recent_count=check_int("recent_count", recent_count, 0),
    )
    if limits.pin_count:
        caps = [cap for cap in (limits.max_tokens, limits.max_messages) if cap is not None]
        if caps and limits.pin_count + 1 > min(caps):
            raise EntryValidationError(
                "pin_count",
                f"{limits.pin_count} pinned turns leave no room for the newest turn within "
                f"max_tokens={limits.max_tokens}, max_messages={limits.max_messages}",
            )
    return limits


def check_observer(name: str, observer: Any) -> Observer | None:
    """``observer`` if it is ``None`` or callable, else ``TypeError``."""
    if observer is not None and not callable(observer):
        raise TypeError(f"{name} must be callable, got {type(observer).__name__}")
    return cast(Observer | None, observer)


def notify(observer: Observer | None, event: Any) -> Operation[None]:
    """Call ``observer(event)``; what it raises is logged at ERROR, never re-raised."""
    if observer is None:
        return
    name = getattr(observer, "__name__", type(observer).__name__)
    async_form: Callable[..., Awaitable[Any]] | None = None
    if is_coroutine_callable(observer):
        async_form = cast(Callable[..., Awaitable[Any]], observer)
    try:
        yield from CallOut[Any](
            observer,
            (event,),
            async_fn=async_form,
            what=f"the observer {name}",
            use_instead="the async_ method (the write itself was committed)",
        )
    except Exception:
        logger.exception(
            "observer %s raised on %s for conversation %r (the write was committed)",
            name,
            type(event).__name__,
            getattr(event, "conversation_id", None),
        )
