"""Entity memory and a temporal knowledge graph, in the entries' own database.

A user's conversations mention entities (people, places, products) and state
facts about them (``user --lives_in--> Munich``).  :class:`KnowledgeGraph`
keeps both per user beside the entries: five tables on SQLite and PostgreSQL
(migrations ``0008_knowledge_graph`` and ``0011_knowledge_scopes``, the
store's schema), five collections on MongoDB (``<entries>.kg_entities`` ...):

* **updates, not piles**: each new fact is compared with the current facts of
  its subject (matched by name and alias) and predicate (normalised, and by
  meaning with ``KnowledgeGraph(embedder=...)``: "resides in" is the slot
  "lives in" holds), and the outcome is one of add / confirm / update /
  supersede / ignore (:meth:`KnowledgeGraph.add_fact`).  A superseded fact is not deleted: it
  gets ``valid_to`` and the new one ``valid_from``, both keep their evidence,
  so :meth:`KnowledgeGraph.facts_about` answers now or ``as_of`` any time;
* **history**: every change is a row (who, what, when):
  :meth:`KnowledgeGraph.history`;
* **traversal**: :meth:`KnowledgeGraph.neighbors` and
  :meth:`KnowledgeGraph.paths`, now or ``as_of`` a time: recursive CTEs over
  indexed facts on SQL, one ``$graphLookup`` on MongoDB;
* :class:`EntityMemory`: get, list, search, merge and forget entities;
* **per conversation**: writes with ``conversation_id=`` record which
  conversation mentioned an entity or taught a fact, and reads with
  ``conversation_id=`` keep only those (a filter over the user's one graph,
  not a partition);
* **extraction by a model** (:meth:`KnowledgeExtractor.extract_from_turn`,
  pydantic-ai structured output :class:`Extraction`), called by the app after
  it stores a turn: the model is called outside any transaction; a failed or
  malformed answer leaves the turn stored and is queued for
  :meth:`KnowledgeExtractor.process_pending` to retry, a bounded number of
  times (:meth:`KnowledgeExtractor.stats`), from a cron job
  (``firefly-orm knowledge process-pending``) or a task of the app's event
  loop (:meth:`KnowledgeExtractor.start_background`, :class:`PendingWorker`);
* **agent tools**: :func:`knowledge_toolset` (pydantic-ai ``facts_about`` and
  ``related``, bound to one user); the MCP server has the same tools
  (``build_server(..., graph=...)``).

On SQL each write is one unit of work (one transaction); on MongoDB a short
sequence of single-document writes.  An entity is unique per user and
normalised name (a unique index), so concurrent extractions never create a
duplicate.  ``erase_user`` (the store's, and so :meth:`MemoryManager.erase_user
<firefly_orm.manager.MemoryManager.erase_user>`) deletes a user's entities,
facts, history and pending extractions.  Every method has an ``async_`` twin.

Example (the app stores the turn, then extracts from it)::

    graph = KnowledgeGraph(store)                      # a SQLite, PostgreSQL or MongoDB store
    extractor = KnowledgeExtractor(graph, "openai:gpt-4o-mini")
    turn = manager.add_turn("c1", "user", "I moved to Berlin", user_id="ann")
    extractor.extract_from_turn("ann", "I moved to Berlin", turn_ref=f"c1:{turn.turn_id}")
    # ... weeks later: "actually I live in Munich now" -> the Berlin fact is superseded
    graph.facts_about("ann", "user")                   # [user lives_in Munich]
    graph.facts_about("ann", "user", as_of=last_month) # [user lives_in Berlin]
    extractor.process_pending()                        # retry failed extractions
"""

from __future__ import annotations

from firefly_orm.knowledge._extract import (
    DEFAULT_INSTRUCTIONS,
    ExtractionResult,
    KnowledgeExtractor,
    PendingReport,
)
from firefly_orm.knowledge._graph import EntityMemory, KnowledgeGraph
from firefly_orm.knowledge._model import (
    Entity,
    ExtractedEntity,
    Extraction,
    Fact,
    FactChange,
    Outcome,
    Triple,
)
from firefly_orm.knowledge._tools import (
    KnownFact,
    RelatedEntity,
    fact_view,
    knowledge_toolset,
    related_view,
)
from firefly_orm.knowledge._worker import PendingWorker

__all__ = [
    "DEFAULT_INSTRUCTIONS",
    "Entity",
    "EntityMemory",
    "ExtractedEntity",
    "Extraction",
    "ExtractionResult",
    "Fact",
    "FactChange",
    "KnowledgeExtractor",
    "KnowledgeGraph",
    "KnownFact",
    "Outcome",
    "PendingReport",
    "PendingWorker",
    "RelatedEntity",
    "Triple",
    "fact_view",
    "knowledge_toolset",
    "related_view",
]
