"""One object over every memory tier: :class:`UnifiedMemory` (issue 30).

selectools' *UnifiedMemory* shape, built on firefly_orm's own layers rather
than beside them:

* short-term: the conversations of a :class:`~firefly_orm.manager.MemoryManager`;
* long-term and episodic: its :class:`~firefly_orm.long_term.LongTermMemory`
  (items of kind ``"semantic"`` and ``"episodic"``);
* entity / graph: a :class:`~firefly_orm.knowledge.KnowledgeGraph`, filled by a
  :class:`~firefly_orm.knowledge.KnowledgeExtractor` after each turn.

:meth:`UnifiedMemory.add_turn` is the one write path (the turn, then its
extraction, inline or deferred); :meth:`UnifiedMemory.recall` is federated
across the tiers and each :class:`UnifiedHit` names its tier;
:meth:`UnifiedMemory.assemble_context` is a budgeted text block of what is
known; :meth:`UnifiedMemory.reset` forgets the short-term and episodic tiers and
keeps long-term knowledge.  Every method has an ``async_`` twin.

Example::

    from firefly_orm.unified import UnifiedMemory

    memory = UnifiedMemory(manager.for_user("ann"), graph, extractor)
    memory.add_turn("c1", "I moved to Munich", "Noted!")
    [(h.tier, h.text) for h in memory.recall("where do I live?")]
    # [("fact", "user lives in Munich"), ("conversation", "I moved to Munich\\nNoted!"), ...]
"""

from __future__ import annotations

from firefly_orm.unified._memory import ENTITY_SCAN, Tier, UnifiedHit, UnifiedMemory

__all__ = ["ENTITY_SCAN", "Tier", "UnifiedHit", "UnifiedMemory"]
