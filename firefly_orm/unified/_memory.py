"""UnifiedMemory: the conversation, long-term, episodic and graph tiers behind one object.

Nothing is stored here: every read and write goes through the existing layers,
:class:`~firefly_orm.manager.MemoryManager` (conversations, long-term items and
their episodic kind, working memory, :meth:`~firefly_orm.manager.MemoryManager.reset`)
and :class:`~firefly_orm.knowledge.KnowledgeGraph` /
:class:`~firefly_orm.knowledge.KnowledgeExtractor` (entities and facts).
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from firefly_orm.bridges._steps import (
    MemoryLayer,
    Operation,
    Transaction,
    async_method,
    sync_method,
)
from firefly_orm.conversation import ConversationTurn, TurnMatch
from firefly_orm.errors import EntryValidationError
from firefly_orm.knowledge import Entity, Fact, KnowledgeExtractor, KnowledgeGraph
from firefly_orm.knowledge._backend import GraphRows
from firefly_orm.long_term import MemoryHit, MemoryItem
from firefly_orm.long_term._recall import RecallMode
from firefly_orm.manager import MemoryManager
from firefly_orm.vector._spec import fuse_by

__all__ = ["Tier", "UnifiedHit", "UnifiedMemory"]

#: Where a :class:`UnifiedHit` comes from.
Tier = Literal["conversation", "long_term", "entity", "fact"]

#: Words of a query that stand for the speaker: they match the graph's ``user`` entity.
_SPEAKER = frozenset({"i", "me", "my", "mine", "myself", "user"})
#: At most this many of the user's entities (most mentioned first) are matched against a query.
ENTITY_SCAN = 200


@dataclass(frozen=True)
class UnifiedHit:
    """One result of :meth:`UnifiedMemory.recall`.

    Attributes:
        tier: ``"conversation"`` (a turn of a past conversation), ``"long_term"``
            (a long-term item, semantic or episodic), ``"entity"`` (an entity
            the query names) or ``"fact"`` (a current fact about one).
        text: The hit as text (a turn as ``"{prompt}\\n{answer}"``, a fact as
            ``"subject predicate object"``, an entity as ``"name (type)"``).
        score: The reciprocal-rank score across tiers (higher is better; within
            one result list).
        source: What was found: a :class:`~firefly_orm.long_term.MemoryItem`, a
            ``TurnMatch``, an :class:`~firefly_orm.knowledge.Entity` or a
            :class:`~firefly_orm.knowledge.Fact`.
    """

    tier: Tier
    text: str
    score: float
    source: MemoryItem | TurnMatch | Entity | Fact


def _fact_text(fact: Fact) -> str:
    return f"{fact.subject} {fact.predicate.replace('_', ' ')} {fact.object}"


def _entity_text(entity: Entity) -> str:
    return f"{entity.name} ({entity.entity_type})"


def _words(text: str) -> str:
    """``text`` case-folded, words separated by single spaces and padded by one."""
    return " " + " ".join(re.findall(r"\w+", text.casefold())) + " "


def _named_in(query: str, entity: Entity) -> bool:
    words = _words(query)
    if entity.name.casefold() == "user" and _SPEAKER & set(words.split()):
        return True
    return any(_words(name) in words for name in [entity.name, *entity.aliases] if name.strip())


def _graph_hits(rows: GraphRows, user_id: str, query: str) -> builtins.list[UnifiedHit]:
    """Transaction: the entities ``query`` names, then their current facts (one snapshot)."""
    named = [e for e in rows.list_entities(user_id, ENTITY_SCAN) if _named_in(query, e)]
    hits: list[UnifiedHit] = []
    seen: set[str] = set()
    for entity in named:
        for fact in rows.facts_touching(user_id, entity.entity_id, None):
            if fact.fact_id not in seen:
                seen.add(fact.fact_id)
                hits.append(UnifiedHit("fact", _fact_text(fact), 0.0, fact))
    hits += [UnifiedHit("entity", _entity_text(e), 0.0, e) for e in named]
    return hits


def _memory_hit(hit: MemoryHit) -> UnifiedHit:
    source: MemoryItem | TurnMatch | None = hit.item if hit.item is not None else hit.turn
    assert source is not None
    return UnifiedHit(hit.source, hit.text, hit.score, source)


class UnifiedMemory(MemoryLayer):
    """One user's memory over every tier, built on the existing layers (selectools' shape).

    * **short-term**: the conversations of ``manager`` (:meth:`add_turn` is the
      one write path: it stores the turn, then extracts its entities and facts);
    * **long-term and episodic**: ``manager.long_term`` (items of kind
      ``"semantic"`` and ``"episodic"``; write them with ``manager.remember``);
    * **entity / graph**: ``graph`` (a :class:`~firefly_orm.knowledge.KnowledgeGraph`
      on the same SQL or MongoDB store), filled by ``extractor``.

    :meth:`recall` searches them all and says which tier each hit is from;
    :meth:`assemble_context` turns the hits into one budgeted text block;
    :meth:`reset` forgets the short-term and episodic tiers and keeps long-term
    knowledge (semantic items and the graph).  Every method has an ``async_`` twin.

    Args:
        manager: A manager bound to one user (:meth:`MemoryManager.for_user
            <firefly_orm.manager.MemoryManager.for_user>`) when there is a graph:
            the graph is per user.
        graph: The knowledge graph (``None``: no entity/fact tier).
        extractor: Extracts each added turn's entities and facts into ``graph``
            (``None``: nothing is extracted; the graph is still recalled).
        defer_extraction: Queue each extraction (no model call in
            :meth:`add_turn`); run ``extractor.process_pending()`` later.

    Raises:
        EntryValidationError: A graph with an unbound manager, or an extractor of
            another graph.

    Example::

        memory = UnifiedMemory(manager.for_user("ann"), graph, extractor)
        memory.add_turn("c1", "I moved to Munich", "Noted!")
        for hit in memory.recall("where do I live?"):
            print(hit.tier, hit.text)      # fact: user lives in Munich; conversation: ...
        memory.assemble_context("where do I live?", max_tokens=300)
        memory.reset()                     # conversations and episodes gone, facts kept
    """

    def __init__(
        self,
        manager: MemoryManager,
        graph: KnowledgeGraph | None = None,
        extractor: KnowledgeExtractor | None = None,
        *,
        defer_extraction: bool = False,
    ) -> None:
        super().__init__(manager.conversation.store)
        if graph is None and extractor is not None:
            graph = extractor.graph
        if graph is not None and manager.user_id is None:
            raise EntryValidationError("manager", "bind it to a user (manager.for_user(user_id))")
        if extractor is not None and extractor.graph is not graph:
            raise EntryValidationError("extractor", "must extract into this graph")
        self._manager = manager
        self._graph = graph
        self._extractor = extractor
        self._defer = bool(defer_extraction)

    @property
    def manager(self) -> MemoryManager:
        """The manager of the conversation, working and long-term tiers."""
        return self._manager

    @property
    def graph(self) -> KnowledgeGraph | None:
        """The entity/fact tier (``None``: none)."""
        return self._graph

    def _add_turn(
        self,
        conversation_id: str,
        user_prompt: str,
        assistant_response: str,
        raw_messages: Sequence[Any] | None = None,
        *,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        state_delta: Mapping[str, Any] | None = None,
    ) -> Operation[ConversationTurn]:
        """Store a turn (``manager.add_turn``), then extract its entities and facts.

        The turn is committed first; the extractor's model is then called with
        no transaction open, and its facts cite ``"<conversation_id>:<turn_id>"``
        as evidence.  A failed extraction leaves the turn stored and is queued
        (see :meth:`KnowledgeExtractor.extract_from_turn
        <firefly_orm.knowledge.KnowledgeExtractor.extract_from_turn>`); with
        ``defer_extraction`` it is always queued.

        ``idempotency_key`` and ``state_delta`` are
        :meth:`ConversationMemory.add_turn
        <firefly_orm.conversation.ConversationMemory.add_turn>`'s: the state
        change (``app:``, ``user:`` and the conversation's own keys;
        ``temp:`` keys dropped) is written in the turn's unit of work, so the
        two commit together or not at all, before the extraction runs.
        """
        turn = yield from self._manager._add_turn(
            conversation_id,
            user_prompt,
            assistant_response,
            raw_messages,
            metadata=metadata,
            idempotency_key=idempotency_key,
            state_delta=state_delta,
        )
        user_id = self._manager.user_id
        if self._extractor is not None and user_id is not None:
            yield from self._extractor._extract_from_turn(
                user_id,
                user_prompt,
                turn_ref=f"{conversation_id}:{turn.turn_id}",
                observed_at=turn.timestamp,
                defer=self._defer,
                conversation_id=conversation_id,
            )
        return turn

    def _recall(
        self,
        query: str,
        *,
        limit: int = 5,
        mode: RecallMode | None = None,
        exclude_conversations: Sequence[str] | None = None,
        tiers: Sequence[Tier] | None = None,
    ) -> Operation[builtins.list[UnifiedHit]]:
        """Federated recall: the ``limit`` best hits of every tier, merged by rank.

        Long-term items and past-conversation turns come from
        ``manager.search_memory`` (``mode`` and ``exclude_conversations`` as
        there); the graph's hits are the entities whose name or alias the query
        contains as words ("I", "my", "me" name the ``user`` entity) and their
        current facts.  The two rankings are fused by reciprocal rank.

        Args:
            query: What to look for.
            limit: At most this many hits.
            mode: ``"text"``, ``"semantic"`` or ``"hybrid"`` for items and turns.
            exclude_conversations: Never search these conversations' turns.
            tiers: Keep only hits of these tiers (default: all).

        Raises:
            EntryValidationError: A bad argument (nothing is read).
        """
        wanted = set(tiers) if tiers is not None else None
        if wanted is not None and not wanted <= {"conversation", "long_term", "entity", "fact"}:
            raise EntryValidationError("tiers", f"unknown tiers {sorted(wanted)}")
        found = yield from self._manager._search_memory(
            query, limit=limit, mode=mode, exclude_conversations=exclude_conversations
        )
        memory = [_memory_hit(h) for h in found]
        graph: list[UnifiedHit] = []
        user_id = self._manager.user_id
        if self._graph is not None and user_id is not None and limit and query.strip():
            graph = yield from Transaction.read(self._graph.access, _graph_hits, user_id, query)
        rankings = [
            [h for h in ranking if wanted is None or h.tier in wanted]
            for ranking in (memory, graph)
        ]
        fused = fuse_by(rankings, key=id)
        return [UnifiedHit(hit.tier, hit.text, score, hit.source) for hit, score in fused[:limit]]

    def _assemble_context(
        self,
        query: str,
        *,
        max_tokens: int,
        include_conversation: bool = False,
        limit: int = 10,
        exclude_conversations: Sequence[str] | None = None,
    ) -> Operation[str]:
        """What the memory knows about ``query``, as one text block of at most ``max_tokens``.

        The :meth:`recall` hits, best first, one line each under their tier's
        heading (``Known facts``, ``Entities``, ``Long-term memory``, and with
        ``include_conversation`` ``Past conversations``); a line that would pass
        the budget (counted with the conversation's token estimator) is left
        out.  ``""`` when nothing fits.  For the current conversation's
        messages, use ``manager.assemble_context``.
        """
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
            raise EntryValidationError(
                "max_tokens", f"give a whole number >= 0, not {max_tokens!r}"
            )
        tiers: list[Tier] = ["fact", "entity", "long_term"]
        if include_conversation:
            tiers.append("conversation")
        hits = yield from self._recall(
            query, limit=limit, tiers=tiers, exclude_conversations=exclude_conversations
        )
        estimate = self._manager.conversation.estimator.estimate
        headings = {
            "fact": "Known facts:",
            "entity": "Entities:",
            "long_term": "Long-term memory:",
            "conversation": "Past conversations:",
        }
        kept: dict[str, list[str]] = {}
        used = 0
        for hit in hits:
            line = "- " + " ".join(hit.text.split())
            cost = estimate(line) + (0 if hit.tier in kept else estimate(headings[hit.tier]))
            if used + cost > max_tokens:
                continue
            used += cost
            kept.setdefault(hit.tier, []).append(line)
        blocks = [[headings[t], *kept[t]] for t in tiers if t in kept]
        return "\n".join(line for block in blocks for line in block)

    def _reset(self) -> Operation[None]:
        """Forget the short-term and episodic tiers; keep long-term knowledge.

        ``manager.reset()``: its conversations, working-memory facts and
        episodic items go in one unit of work; semantic long-term items and the
        knowledge graph (entities, facts, history) are kept.
        """
        yield from self._manager._reset()

    add_turn = sync_method(_add_turn)
    recall = sync_method(_recall)
    assemble_context = sync_method(_assemble_context)
    reset = sync_method(_reset)
    async_add_turn = async_method(_add_turn)
    async_recall = async_method(_recall)
    async_assemble_context = async_method(_assemble_context)
    async_reset = async_method(_reset)
