"""Predicates compared by meaning: "resides in" is the slot "lives in" holds (internal).

With an embedder (:class:`~firefly_orm.knowledge.KnowledgeGraph`'s
``embedder=``), a new fact whose predicate is not held by its subject yet is
compared with the predicates its subject does hold: the closest one at or
above ``threshold`` (cosine) is the same slot, so the update rule confirms,
updates or supersedes the fact there instead of adding a second one beside it.

The order keeps transactions short and the answer right:

1. one read-only unit of work finds the subjects' current predicates;
2. the embedder is called with no unit of work open (the predicates' vectors
   are kept in memory, so a predicate is embedded once per graph object);
3. the write's unit of work re-checks: a predicate matched by meaning is used
   only if its subject still holds a current fact of it
   (:func:`~firefly_orm.knowledge._apply.apply_fact`), else the fact is added
   under its own predicate.

Only predicates are compared by meaning.  Objects are compared by name and
alias: two cities are close in meaning, yet "lives in Munich" must supersede
"lives in Berlin", not confirm it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from firefly_orm.bridges._steps import Operation, Transaction
from firefly_orm.entry._rules import check_unit_interval
from firefly_orm.errors import EntryValidationError
from firefly_orm.knowledge._apply import NewFact, normalize_predicate
from firefly_orm.knowledge._backend import GraphRows
from firefly_orm.long_term._embedding import EmbedderLike, Embedding, as_embedder

__all__ = ["DEFAULT_MEANING_THRESHOLD", "Meaning"]

#: Cosine at or above which two predicates are one slot (tune it for your embedding model).
DEFAULT_MEANING_THRESHOLD = 0.8
#: Predicate vectors kept per graph object (the cache is emptied when it is full).
_CACHE_SIZE = 4096


def predicate_text(predicate: str) -> str:
    """What is embedded for a normalised predicate: ``lives_in`` -> ``lives in``."""
    return predicate.replace("_", " ")


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """The cosine of two vectors of one model (0.0 when either is all zeros)."""
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norms = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norms if norms else 0.0


def _held_predicates(rows: GraphRows, user_id: str, subjects: list[str]) -> dict[str, list[str]]:
    """Per subject name: the predicates of its current facts (sorted)."""
    held: dict[str, list[str]] = {}
    for name in subjects:
        entity = rows.find_entity(user_id, name)
        if entity is None:
            continue
        facts = rows.facts_touching(user_id, entity.entity_id, None)
        mine = {f.predicate for f in facts if f.subject_id == entity.entity_id}
        if mine:
            held[name] = sorted(mine)
    return held


class Meaning:
    """An embedder and the threshold two predicates must reach to be one slot.

    Args:
        embedder: A pydantic-ai ``Embedder``, ``EmbeddingModel`` or model name.
        threshold: The cosine (0.0-1.0) at or above which they are one slot.
    """

    def __init__(self, embedder: EmbedderLike, threshold: float) -> None:
        check_unit_interval(threshold, "meaning_threshold")
        if isinstance(threshold, bool) or threshold <= 0:
            raise EntryValidationError("meaning_threshold", "give a cosine above 0.0")
        self._embedding = Embedding(as_embedder(embedder))
        self._threshold = float(threshold)
        self._vectors: dict[str, tuple[float, ...]] = {}

    @property
    def threshold(self) -> float:
        """The cosine two predicates must reach."""
        return self._threshold

    def matched(
        self, on: Callable[..., Any], user_id: str, facts: list[NewFact]
    ) -> Operation[list[NewFact]]:
        """``facts``, each with ``alike``: the predicates its subject holds that mean the
        same as its own, closest first (read, then the embedder outside any unit of work)."""
        if not facts:
            return facts
        subjects = sorted({f.subject for f in facts})
        held = yield from Transaction.read(on, _held_predicates, user_id, subjects)
        pairs: list[tuple[str, list[str]]] = []
        for fact in facts:
            own = normalize_predicate(fact.predicate)
            others = [p for p in held.get(fact.subject, []) if p != own]
            pairs.append((own, others))
        wanted = sorted({p for own, others in pairs if others for p in (own, *others)})
        if len(self._vectors) + len(wanted) > _CACHE_SIZE:
            self._vectors.clear()
        missing = [p for p in wanted if p not in self._vectors]
        if missing:
            _spec, vectors = yield from self._embedding.documents(
                [predicate_text(p) for p in missing]
            )
            self._vectors.update(zip(missing, vectors, strict=True))
        matched = []
        for fact, (own, others) in zip(facts, pairs, strict=True):
            if not others:
                matched.append(fact)
                continue
            scored = [(cosine(self._vectors[own], self._vectors[p]), p) for p in others]
            alike = [p for score, p in sorted(scored, reverse=True) if score >= self._threshold]
            matched.append(replace(fact, alike=tuple(alike)))
        return matched
