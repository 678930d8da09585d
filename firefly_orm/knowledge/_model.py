"""The knowledge graph's values: entities, facts, changes, and a model's extraction."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

__all__ = [
    "Entity",
    "ExtractedEntity",
    "Extraction",
    "Fact",
    "FactChange",
    "Outcome",
    "Triple",
]

#: What the update rule did with a new fact (see :class:`~firefly_orm.knowledge.KnowledgeGraph`).
Outcome = Literal["add", "confirm", "update", "supersede", "ignore"]


@dataclass(frozen=True)
class Entity:
    """One entity of a user's graph.

    Attributes:
        entity_id: Its id.
        user_id: Whose graph it is in.
        name: Its name as first seen (unique per user, compared case-folded).
        entity_type: What it is (``"person"``, ``"city"``...; ``"unknown"``).
        attributes: Free JSON attributes (later mentions update them).
        aliases: Other names it is known by (matched like the name).
        mentions: How many times it was mentioned.
        created_at: When it was first recorded.
        updated_at: When it last changed.
    """

    entity_id: str
    user_id: str
    name: str
    entity_type: str
    attributes: dict[str, Any]
    aliases: list[str]
    mentions: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class Fact:
    """``subject --predicate--> object``, true from ``valid_from`` until ``valid_to``.

    Attributes:
        fact_id: Its id.
        subject: The subject entity's name.
        predicate: The relation (normalised: lower case, words joined by ``_``).
        object: The object entity's name, or the literal value.
        object_is_entity: Whether ``object`` names an entity.
        valid_from: When it became true (the evidence's time).
        valid_to: When it stopped being true (``None``: it still is).
        evidence: The turns that taught or confirmed it.
        confidence: 0.0-1.0.
        subject_id: The subject entity's id.
        object_id: The object entity's id (``None`` for a literal).
    """

    fact_id: str
    subject: str
    predicate: str
    object: str
    object_is_entity: bool
    valid_from: datetime
    valid_to: datetime | None
    evidence: list[str]
    confidence: float
    subject_id: str
    object_id: str | None

    @property
    def current(self) -> bool:
        """Whether the fact still holds (no ``valid_to``)."""
        return self.valid_to is None


@dataclass(frozen=True)
class FactChange:
    """What recording one fact did.

    Attributes:
        outcome: ``add``, ``confirm``, ``update``, ``supersede`` or ``ignore``.
        fact: The fact as it now stands (for ``ignore``: the current fact that
            was kept, or ``None`` when the new one was below the confidence floor).
        superseded: The facts this one closed (``supersede`` only).
    """

    outcome: Outcome
    fact: Fact | None
    superseded: list[Fact] = field(default_factory=list)


class ExtractedEntity(BaseModel):
    """An entity a model found in a turn."""

    name: str = Field(min_length=1, description="The entity's name as written")
    type: str = Field(default="unknown", description="person, place, organization, product...")
    attributes: dict[str, Any] = Field(default_factory=dict)
    aliases: list[str] = Field(default_factory=list, description="Other names for it")


class Triple(BaseModel):
    """A relation a model found: ``subject --predicate--> object``."""

    subject: str = Field(min_length=1, description="An entity name ('user' for the speaker)")
    predicate: str = Field(min_length=1, description="A short relation, e.g. lives_in")
    object: str = Field(min_length=1, description="An entity name or a literal value")
    object_is_entity: bool = Field(default=True, description="False for a literal value")
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)


class Extraction(BaseModel):
    """What a model extracted from a turn: the structured output it must return."""

    entities: list[ExtractedEntity] = Field(default_factory=list)
    triples: list[Triple] = Field(default_factory=list)
