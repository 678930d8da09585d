"""Recall over long-term items and past conversations at once: ``MemoryManager.search_memory``.

:func:`recall_with_conversations` runs a long-term recall
(:mod:`firefly_orm.long_term._recall`) and a search of the user's past
conversations (:mod:`firefly_orm.conversation._search`) for one query, in ONE
read transaction, and merges the two rankings by reciprocal rank
(:func:`~firefly_orm.vector.fuse_by`): the first item and the first turn tie,
then the second of each, and so on, whatever the scales of their own scores.
The query is embedded once, before the transaction, by the long-term
memory's embedder (the conversation memory's when only it has one); with
the same model on both sides (``MemoryManager(embedder=...)``), that one
vector serves both searches.  Each result is a :class:`MemoryHit`: an item or
a turn, and the fused score.
"""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from firefly_orm.bridges._steps import Operation, Transaction
from firefly_orm.conversation._memory import ConversationMemory
from firefly_orm.conversation._model import check_conversation_id, check_int
from firefly_orm.conversation._search import TurnMatch, TurnSearch, search_turns
from firefly_orm.errors import EntryValidationError
from firefly_orm.long_term._memory import LongTermMemory
from firefly_orm.long_term._model import MemoryItem, Recalled
from firefly_orm.long_term._recall import RecallMode, RecallRequest, run_recall
from firefly_orm.protocols import UnitOfWork
from firefly_orm.vector._spec import fuse_by

__all__ = ["MemoryHit", "recall_with_conversations"]


@dataclass(frozen=True)
class MemoryHit:
    """One result of a recall over long-term items and past conversations.

    Attributes:
        source: ``"long_term"`` (``item`` is set) or ``"conversation"`` (``turn``).
        score: The fused rank score (higher is better; within one result list).
        item: The long-term item found.
        turn: The turn found, with its conversation and position.
    """

    source: Literal["long_term", "conversation"]
    score: float
    item: MemoryItem | None = None
    turn: TurnMatch | None = None

    @property
    def text(self) -> str:
        """The item's text, or the turn as ``"{user_prompt}\\n{assistant_response}"``."""
        if self.item is not None:
            return self.item.text
        return "" if self.turn is None else self.turn.text


def _both(
    uow: UnitOfWork, items: RecallRequest, turns: TurnSearch
) -> tuple[builtins.list[Recalled], builtins.list[TurnMatch]]:
    """Transaction: both rankings, in one snapshot."""
    return run_recall(uow, items), search_turns(uow, turns)


def recall_with_conversations(
    long_term: LongTermMemory,
    conversation: ConversationMemory,
    query: str,
    *,
    limit: int = 5,
    mode: RecallMode | None = None,
    min_importance: float = 0.0,
    tags: Iterable[str] | None = None,
    kind: str | None = None,
    exclude_conversations: Iterable[str] | None = None,
    user_id: str | None = None,
) -> Operation[builtins.list[MemoryHit]]:
    """The ``limit`` best long-term items and past-conversation turns for ``query``.

    ``mode``, ``min_importance``, ``tags``, ``kind`` and ``user_id`` as for
    :meth:`LongTermMemory.recall <firefly_orm.long_term.LongTermMemory.recall>`
    (the filters apply to the items; turns are filtered by owner only);
    ``mode`` applies to both searches (``None``: hybrid with an embedder, else
    text; a vector mode needs the long-term memory's embedder).
    ``exclude_conversations``: never search these (the current conversation).

    Raises:
        EntryValidationError: A bad argument (nothing is read).
        VectorUnavailableError: A vector mode on a store that keeps no vectors.
    """
    if not isinstance(query, str):
        raise EntryValidationError("query", f"must be a str, got {type(query).__name__}")
    limit = check_int("limit", limit, 0)
    floor = LongTermMemory.recall_floor(min_importance)
    owner = long_term._owner(user_id)
    checked_mode = long_term._mode(mode)
    items = RecallRequest(
        long_term.namespace,
        query,
        limit,
        floor,
        owner,
        long_term.language,
        long_term._filter(tags, kind),
        checked_mode,
    )
    excluded = [] if exclude_conversations is None else exclude_conversations
    if isinstance(excluded, str):
        raise EntryValidationError("exclude_conversations", "must be a list of conversation ids")
    turns = TurnSearch(
        query=query,
        mode=checked_mode,
        limit=limit,
        user_id=conversation._acting_user(owner),
        exclude=tuple(check_conversation_id(c) for c in excluded),
        language=long_term.language,
    )
    if limit == 0 or not query.strip():
        return []
    embedding = long_term._embedding or conversation._embedding
    if checked_mode != "text" and embedding is not None:
        meaning = yield from embedding.query(query)
        items = dataclasses.replace(items, meaning=meaning)
        turns = dataclasses.replace(turns, meaning=meaning)
    recalled, matches = yield from Transaction.read(_both, items, turns)
    hits = [MemoryHit("long_term", r.score, item=r.item) for r in recalled]
    hits += [MemoryHit("conversation", m.score, turn=m) for m in matches]
    long_term_hits, turn_hits = hits[: len(recalled)], hits[len(recalled) :]
    fused = fuse_by([long_term_hits, turn_hits], key=id)
    return [dataclasses.replace(hit, score=score) for hit, score in fused[:limit]]
