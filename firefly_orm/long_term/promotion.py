"""Promotion: evicted conversation turns that matter become long-term items.

When :meth:`ConversationMemory.add_turn <firefly_orm.ConversationMemory.add_turn>`
evicts turns, a :class:`Promotion` rates each one with its scorer (outside the
unit of work, like the summarizer), and the turns rated at or above the
threshold are written as long-term items **in the same unit of work as the
eviction** (:meth:`Promotion.store`): a failed write loses neither the turn
nor the item, and a lost race re-plans and re-rates.

Each promoted item has the key ``turn:<conversation id>:<turn id>`` (so
writing it again is an upsert: a turn is never promoted twice), the
conversation's owner as ``user_id``, the tag ``"promoted"``, the score as its
importance, and ``{"conversation_id", "turn_id"}`` as metadata.  Its text is
the prompt and the answer, one per line.

The default scorer (:func:`default_scorer`) is a heuristic over the user's
prompt, documented there; pass any callable ``turn -> float`` (sync or async)
instead, e.g. one asking a model.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from firefly_orm.bridges._steps import CallOut, Operation
from firefly_orm.conversation._model import ConversationTurn
from firefly_orm.entry import MAX_SEARCH_TEXT_LENGTH, MemoryEntry
from firefly_orm.entry._rules import check_unit_interval
from firefly_orm.long_term._model import SEMANTIC
from firefly_orm.protocols import UnitOfWork

if TYPE_CHECKING:
    from firefly_orm.long_term._memory import LongTermMemory

__all__ = [
    "DEFAULT_IMPORTANCE_THRESHOLD",
    "PROMOTED_TAG",
    "Promotion",
    "Scorer",
    "check_threshold",
    "default_scorer",
    "promoted_key",
]

logger = logging.getLogger(__name__)

#: Turns scored at or above this are promoted unless told otherwise.
DEFAULT_IMPORTANCE_THRESHOLD = 0.6
#: The tag every promoted item carries.
PROMOTED_TAG = "promoted"

#: A scorer: ``turn -> importance`` from 0.0 to 1.0 (sync, or async).
Scorer = Callable[[ConversationTurn], float] | Callable[[ConversationTurn], Awaitable[float]]

# What the default scorer looks for in the user's prompt (case-insensitive).
_IDENTITY = re.compile(
    r"\b(my name is|call me|i am|i'm|i work|i live|i was born|my (?:job|role|title|"
    r"birthday|email|phone|address|wife|husband|partner|son|daughter|team|company|"
    r"employer|manager|boss|pronouns))\b",
    re.IGNORECASE,
)
_PREFERENCE = re.compile(
    r"\b(i (?:prefer|like|love|hate|dislike|always|never|usually|want|need)|"
    r"please (?:always|never)|don't ever|do not ever)\b",
    re.IGNORECASE,
)
_EXPLICIT = re.compile(
    r"\b(remember|don't forget|do not forget|keep in mind|note that|for future reference|"
    r"important)\b",
    re.IGNORECASE,
)
_SPECIFIC = re.compile(r"\d|@|\b[A-Z][a-z]+\b")


def default_scorer(turn: ConversationTurn) -> float:
    """How worth keeping a turn is, from its user prompt alone (0.0-1.0).

    A heuristic, documented so it can be predicted: start at ``0.2``; add
    ``0.5`` when the user says something about themselves ("my name is", "I
    am", "I work", "I live", "my email", ...), ``0.3`` for a preference or
    standing instruction ("I prefer", "I like", "please always", ...), ``0.4``
    when they ask for it to be kept ("remember", "keep in mind", "important",
    ...), and ``0.1`` when the prompt holds specifics (digits, an ``@``, or a
    capitalised word after the first); cap at ``1.0``.  So with the default
    threshold (:data:`DEFAULT_IMPORTANCE_THRESHOLD`, 0.6) identity statements
    and explicit requests are promoted, small talk and questions are not.
    """
    prompt = turn.user_prompt
    score = 0.2
    if _IDENTITY.search(prompt):
        score += 0.5
    if _PREFERENCE.search(prompt):
        score += 0.3
    if _EXPLICIT.search(prompt):
        score += 0.4
    if _SPECIFIC.search(prompt, 1):
        score += 0.1
    return min(1.0, round(score, 6))


def check_threshold(value: Any, field: str = "importance_threshold") -> float:
    """``value`` if it is a number from 0.0 to 1.0."""
    return check_unit_interval(value, field)


def promoted_key(conversation_id: str, turn_id: int) -> str:
    """The key of the item a turn is promoted to (one item per turn, whatever happens)."""
    return f"turn:{conversation_id}:{turn_id}"


def _turn_text(turn: ConversationTurn) -> str:
    """What a promoted item says: the prompt and the answer (NUL removed, cut to the limit)."""
    text = f"{turn.user_prompt}\n{turn.assistant_response}".replace("\x00", "")
    return text[:MAX_SEARCH_TEXT_LENGTH]


def _checked_score(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise TypeError(f"the promotion scorer must return a number, got {value!r}")
    return min(1.0, max(0.0, float(value)))


@dataclass(frozen=True)
class Promotion:
    """How a conversation promotes its evicted turns (see the module docstring).

    Attributes:
        memory: The long-term memory items go to; it must use the same store
            as the conversation (one unit of work covers both).
        scorer: Rates a turn from 0.0 to 1.0 (sync or async callable); scores
            outside that range are clipped.
        threshold: Turns scored at or above it are promoted.
    """

    memory: LongTermMemory
    scorer: Scorer = default_scorer
    threshold: float = DEFAULT_IMPORTANCE_THRESHOLD

    def score(self, turns: Sequence[ConversationTurn]) -> Operation[tuple[float, ...]]:
        """Rate ``turns`` (outside any unit of work): one call of the scorer per turn.

        Raises:
            TypeError: The scorer returned something other than a number
                (nothing is written).
        """
        scores: list[float] = []
        for turn in turns:
            if self.scorer is default_scorer:
                value: Any = default_scorer(turn)
            else:
                value = yield from CallOut[Any](
                    self.scorer,
                    (turn,),
                    what="the promotion scorer",
                    use_instead="async_add_turn (nothing was written)",
                )
            scores.append(_checked_score(value))
        return tuple(scores)

    def entries(
        self,
        conversation_id: str,
        owner: str | None,
        turns: Sequence[ConversationTurn],
        scores: Sequence[float],
    ) -> list[MemoryEntry]:
        """The items of the turns scored at or above the threshold (no I/O)."""
        return [
            self.memory.entry_for(
                _turn_text(turn),
                importance=score,
                tags=(PROMOTED_TAG,),
                metadata={"conversation_id": conversation_id, "turn_id": turn.turn_id},
                key=promoted_key(conversation_id, turn.turn_id),
                user_id=owner,
                kind=SEMANTIC,
            )
            for turn, score in zip(turns, scores, strict=True)
            if score >= self.threshold
        ]

    def store(
        self,
        uow: UnitOfWork,
        conversation_id: str,
        owner: str | None,
        turns: Sequence[ConversationTurn],
        scores: Sequence[float],
    ) -> tuple[str, ...]:
        """Write the promoted items inside the eviction's unit of work; return their ids.

        The long-term memory's ``long_term_limit`` applies in the same unit of
        work (a promoted item ranking lowest may be evicted at once).
        """
        from firefly_orm.long_term._ops import store_items

        entries = self.entries(conversation_id, owner, turns, scores)
        if not entries:
            return ()
        store_items(uow, self.memory.namespace, entries, self.memory.long_term_limit)
        ids = tuple(entry.entry_id for entry in entries)
        logger.debug(
            "conversation %r: promoted %d of %d evicted turn(s) to %r",
            conversation_id,
            len(ids),
            len(turns),
            self.memory.namespace,
        )
        return ids
