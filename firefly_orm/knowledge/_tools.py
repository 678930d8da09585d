"""Agent tools over a user's knowledge graph: ``facts_about`` and ``related``.

:func:`knowledge_toolset` wraps a :class:`~firefly_orm.knowledge.KnowledgeGraph`
in a pydantic-ai ``FunctionToolset`` bound to ONE user (the model never chooses
whose graph it reads); :func:`fact_view` and :func:`related_view` are the
JSON-ready shapes the tools (and the MCP server's graph tools) answer with.
Both tools are reads and run the graph's ``async_`` operations; arguments the
graph refuses come back to the model as a retry prompt (``ModelRetry``).
pydantic-ai is imported only when a toolset is built.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

# pydantic needs this TypedDict (not typing.TypedDict) before Python 3.12.
from typing_extensions import TypedDict

from firefly_orm.entry import validate_user_id
from firefly_orm.errors import EntryValidationError, MissingExtraError
from firefly_orm.knowledge._graph import KnowledgeGraph
from firefly_orm.knowledge._model import Entity, Fact
from firefly_orm.long_term._toolset import function_toolset

if TYPE_CHECKING:  # pragma: no cover - for type checkers only
    from pydantic_ai.toolsets import FunctionToolset

__all__ = ["KnownFact", "RelatedEntity", "fact_view", "knowledge_toolset", "related_view"]

logger = logging.getLogger("firefly_orm")

#: The deepest ``related`` walk the tools allow unless told otherwise.
DEFAULT_MAX_DEPTH = 3


class KnownFact(TypedDict):
    """One fact as a tool answers it (times in ISO 8601; ``valid_to`` null: still true)."""

    subject: str
    predicate: str
    object: str
    valid_from: str
    valid_to: str | None
    evidence: list[str]
    confidence: float


class RelatedEntity(TypedDict):
    """One entity near another, as ``related`` answers it."""

    name: str
    type: str
    distance: int
    aliases: list[str]


def fact_view(fact: Fact) -> KnownFact:
    """The tools' view of a :class:`~firefly_orm.knowledge.Fact`."""
    return KnownFact(
        subject=fact.subject,
        predicate=fact.predicate,
        object=fact.object,
        valid_from=fact.valid_from.isoformat(),
        valid_to=None if fact.valid_to is None else fact.valid_to.isoformat(),
        evidence=list(fact.evidence),
        confidence=fact.confidence,
    )


def related_view(entity: Entity, distance: int) -> RelatedEntity:
    """The tools' view of an entity found ``distance`` hops away."""
    return RelatedEntity(
        name=entity.name,
        type=entity.entity_type,
        distance=distance,
        aliases=list(entity.aliases),
    )


_FACTS_ABOUT_DOC = """What is known about an entity: the facts it is the subject or object of.

Use it before answering anything that depends on a person, place, product or
plan the user mentioned before ("user" is the user themself). Facts that
changed keep their past: without ``as_of`` only the facts true now come back;
with ``as_of`` (an ISO 8601 time with a timezone) the facts true then.

Args:
    entity: The entity's name or one of its aliases, e.g. "user" or "Munich".
    as_of: Optional time to ask about, e.g. "2026-01-15T00:00:00+00:00".
"""

_RELATED_DOC = """Entities connected to an entity by known facts, nearest first.

Args:
    entity: The entity's name or one of its aliases.
    depth: How many hops to follow, from 1 to {max_depth}.
"""


def knowledge_toolset(
    graph: KnowledgeGraph, *, user_id: str, max_depth: int = DEFAULT_MAX_DEPTH
) -> FunctionToolset[Any]:
    """A pydantic-ai toolset with ``facts_about`` and ``related`` over ``user_id``'s graph.

    ``facts_about(entity, as_of=None)`` answers :class:`KnownFact` dicts (now,
    or as of a time); ``related(entity, depth=1)`` answers
    :class:`RelatedEntity` dicts (an unknown entity: an empty list).  Give it
    to an agent beside the long-term tools:
    ``Agent(model, toolsets=[long_term_toolset(mgr), knowledge_toolset(graph, user_id="ann")])``.

    Raises:
        MissingExtraError: pydantic-ai is not installed.
        EntryValidationError: A bad ``user_id``, or ``max_depth`` not from 1 to 10.
    """
    try:
        from pydantic_ai import ModelRetry
    except ImportError as exc:
        raise MissingExtraError("knowledge_toolset", "pydantic-ai", "pydantic_ai") from exc
    owner = validate_user_id(user_id)
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or not 1 <= max_depth <= 10:
        raise EntryValidationError("max_depth", f"give 1 to 10, not {max_depth!r}")

    async def facts_about(entity: str, as_of: datetime | None = None) -> list[KnownFact]:
        try:
            found = await graph.async_facts_about(owner, entity, as_of=as_of)
        except EntryValidationError as exc:
            raise ModelRetry(f"{exc}. Fix the argument and call again.") from exc
        logger.debug("facts_about tool: %d fact(s) for user %r", len(found), owner)
        return [fact_view(f) for f in found]

    async def related(entity: str, depth: int = 1) -> list[RelatedEntity]:
        if not 1 <= depth <= max_depth:
            raise ModelRetry(f"depth must be from 1 to {max_depth}, got {depth}.")
        try:
            found = await graph.async_neighbors(owner, entity, depth)
        except KeyError:
            return []
        except EntryValidationError as exc:
            raise ModelRetry(f"{exc}. Fix the argument and call again.") from exc
        return [related_view(e, d) for e, d in found]

    facts_about.__doc__ = _FACTS_ABOUT_DOC
    related.__doc__ = _RELATED_DOC.format(max_depth=max_depth)
    return function_toolset(facts_about, related)
