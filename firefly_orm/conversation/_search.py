"""Search over past conversations: a user's turns found by their words and by their meaning.

:meth:`ConversationMemory.search_conversations
<firefly_orm.conversation.ConversationMemory.search_conversations>` runs
:func:`search_turns` in one read transaction.  What is searched: the live turns
(not the archived ones) of the conversations listed in the conversation index
for the user (a bound memory's user, or the ``user_id`` an unbound memory is
given; an unbound memory without one searches every conversation), narrowed
to ``conversation_ids`` when given.  Each store query also filters on the
user itself, so a turn of another user's conversation is never read.

Three modes (:data:`SEARCH_MODES`), as long-term recall's:

* ``"text"``: the store's full-text search over each turn's ``search_text``
  (the prompt, a newline, the answer:
  :func:`~firefly_orm.conversation._rows.turn_search_text`); the score is the
  text relevance.
* ``"semantic"``: the nearest turn vectors (cosine); the score is the cosine
  similarity.  Turns added without an embedder, or embedded by another model
  than the query's, have no comparable vector and are not found this way.
* ``"hybrid"``: both rankings, each read :data:`HYBRID_DEPTH` times deeper
  than the limit (at least :data:`HYBRID_MIN_DEPTH`), fused by reciprocal rank
  (:func:`~firefly_orm.vector.fuse_by`); a turn without a vector is still found
  by its words.

Cost: a conversation is a namespace of its own, so a search runs one index
scan per searched conversation and ranking (each cut to the limit inside the
store, the user filter inside the scan), then merges them by score: the
full-text scores of one store are comparable across namespaces (SQLite's
BM25 over one FTS5 table, PostgreSQL's ``ts_rank``, the tokenised share of the
in-process stores), and so are cosine similarities.  Narrow a search of a
user with many conversations with ``conversation_ids``.

Vectors: a memory with an embedder embeds each turn's ``search_text`` before
the unit of work that appends it opens (:class:`ModelVector`), and
:func:`save_turn_vector` stores it through the store's
:class:`~firefly_orm.protocols.VectorRepository` in that unit of work.  The
store deletes a turn's vector with the turn (eviction, ``delete_turn``,
``clear``, ``clear_all``, ``erase_user``).
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, cast, get_args

from firefly_orm.conversation._model import ConversationTurn
from firefly_orm.conversation._rows import (
    INDEX_NAMESPACE,
    TURN_KEY_PREFIX,
    conversation_namespace,
    turn_from_entry,
    turn_key,
)
from firefly_orm.entry import derived_entry_id
from firefly_orm.errors import EntryValidationError
from firefly_orm.protocols import UnitOfWork, VectorRepository, declares
from firefly_orm.vector._errors import VectorUnavailableError
from firefly_orm.vector._spec import ModelVector, fuse_by

__all__ = [
    "HYBRID_DEPTH",
    "HYBRID_MIN_DEPTH",
    "SEARCH_MODES",
    "SearchMode",
    "TurnMatch",
    "TurnSearch",
    "check_mode",
    "hybrid_depth",
    "read_turn_text",
    "save_turn_vector",
    "search_turns",
    "turn_vectors",
    "vector_entries",
]

#: A mode of ``search_conversations``.
SearchMode = Literal["text", "semantic", "hybrid"]
#: The modes of ``search_conversations``.
SEARCH_MODES: tuple[SearchMode, ...] = get_args(SearchMode)
#: Hybrid search reads each ranking this many times deeper than the limit...
HYBRID_DEPTH = 4
#: ...and at least this deep.
HYBRID_MIN_DEPTH = 20


def check_mode(mode: Any, *, embedder: bool, what: str, where: str) -> SearchMode:
    """``mode`` checked (``None``: hybrid with an embedder, else text): a conversation
    search's or a long-term recall's (``what``), whose embedder is given at ``where``."""
    if mode is None:
        return "hybrid" if embedder else "text"
    if mode not in SEARCH_MODES:
        raise EntryValidationError("mode", f"must be one of {SEARCH_MODES}, got {mode!r}")
    if mode != "text" and not embedder:
        raise EntryValidationError("mode", f"{mode!r} {what} needs an embedder: {where}")
    checked: SearchMode = mode
    return checked


def hybrid_depth(limit: int) -> int:
    """How deep a hybrid search or recall reads each ranking for ``limit`` results."""
    return max(limit * HYBRID_DEPTH, HYBRID_MIN_DEPTH)


@dataclass(frozen=True)
class TurnMatch:
    """A turn of a past conversation that a search found.

    Attributes:
        conversation_id: The conversation holding the turn.
        turn: The turn (its raw messages decoded).
        score: How well it matched (higher is better; compare scores within
            one result list only): the text relevance (``"text"``), the cosine
            similarity (``"semantic"``) or the fused rank score (``"hybrid"``).
    """

    conversation_id: str
    turn: ConversationTurn
    score: float

    @property
    def turn_id(self) -> int:
        """The turn's position in its conversation (its ``turn_id``)."""
        return self.turn.turn_id

    @property
    def text(self) -> str:
        """The turn as one text: ``"{user_prompt}\\n{assistant_response}"``."""
        return f"{self.turn.user_prompt}\n{self.turn.assistant_response}"


@dataclass(frozen=True)
class TurnSearch:
    """A checked search over past conversations.

    ``user_id``: only this user's conversations and turns (``None``: every
    one); ``conversation_ids``: only these (``None``: all the user's);
    ``exclude``: never these (the conversation being assembled, say).
    """

    query: str
    mode: SearchMode
    limit: int
    user_id: str | None = None
    conversation_ids: tuple[str, ...] | None = None
    exclude: tuple[str, ...] = ()
    language: str | None = None
    meaning: ModelVector | None = None


def turn_vectors(uow: UnitOfWork) -> VectorRepository:
    """``uow.entries`` as a :class:`~firefly_orm.protocols.VectorRepository`.

    Raises:
        VectorUnavailableError: The store keeps no vectors.
    """
    return vector_entries(uow, "a ConversationMemory without an embedder")


def vector_entries(uow: UnitOfWork, instead: str) -> VectorRepository:
    """``uow.entries`` as a :class:`~firefly_orm.protocols.VectorRepository` (the
    conversation's and the long-term memory's vectors).

    Raises:
        VectorUnavailableError: The store keeps no vectors; the message ends with
            ``instead``, what the caller may do without them.
    """
    entries = uow.entries
    if not declares(entries, VectorRepository):
        raise VectorUnavailableError(
            f"this store's units of work keep no vectors ({type(entries).__name__} is no "
            "VectorRepository): use a store with vector search (SQLiteStore or "
            "PostgreSQLStore with vectors=True, InMemoryStore, FileStore, MongoDBStore), "
            f"or {instead}"
        )
    return cast(VectorRepository, entries)


def save_turn_vector(
    uow: UnitOfWork, conversation_id: str, turn_id: int, made: ModelVector
) -> None:
    """Store the vector of turn ``turn_id`` of ``conversation_id`` (saved in this unit of work).

    Raises:
        VectorUnavailableError: The store keeps no vectors.
        EmbeddingMismatchError: The conversation holds another model's vectors.
    """
    namespace = conversation_namespace(conversation_id)
    entry_id = derived_entry_id(namespace, turn_key(turn_id))
    turn_vectors(uow).save_vectors(namespace, made.spec, {entry_id: made.vector})


def read_turn_text(uow: UnitOfWork, conversation_id: str, turn_id: int) -> tuple[str, str] | None:
    """Transaction: the prompt and answer of a live turn (``None``: no such live turn)."""
    row = uow.entries.get_by_key(conversation_namespace(conversation_id), turn_key(turn_id))
    if row is None:
        return None
    turn = turn_from_entry(row, with_raw=False)
    return turn.user_prompt, turn.assistant_response


def searched_conversations(uow: UnitOfWork, request: TurnSearch) -> builtins.list[str]:
    """The ids of the conversations ``request`` searches, oldest first."""
    rows = uow.entries.list(INDEX_NAMESPACE, user_id=request.user_id)
    ids = [row.key for row in rows if row.key is not None]
    if request.conversation_ids is not None:
        wanted = set(request.conversation_ids)
        ids = [i for i in ids if i in wanted]
    if request.exclude:
        left_out = set(request.exclude)
        ids = [i for i in ids if i not in left_out]
    return ids


def search_turns(uow: UnitOfWork, request: TurnSearch) -> builtins.list[TurnMatch]:
    """The ``limit`` best turns for ``request`` in its mode (one unit of work).

    Raises:
        VectorUnavailableError: A vector mode on a store that keeps no vectors.
    """
    if request.limit == 0:
        return []
    ids = searched_conversations(uow, request)
    if not ids:
        return []
    if request.meaning is None or request.mode == "text":
        return _by_words(uow, request, ids, request.limit)
    if request.mode == "semantic":
        return _by_meaning(uow, request, request.meaning, ids, request.limit)
    depth = hybrid_depth(request.limit)
    rankings = [
        _by_words(uow, request, ids, depth),
        _by_meaning(uow, request, request.meaning, ids, depth),
    ]
    fused = fuse_by(rankings, key=lambda found: (found.conversation_id, found.turn_id))
    return [replace(found, score=score) for found, score in fused[: request.limit]]


def _best(matches: list[TurnMatch], limit: int) -> builtins.list[TurnMatch]:
    """Best first (score, then the newest turn), cut to ``limit``."""
    matches.sort(key=lambda m: (-m.score, -m.turn.timestamp.timestamp(), -m.turn_id))
    return matches[:limit]


def _by_words(
    uow: UnitOfWork, request: TurnSearch, ids: Sequence[str], limit: int
) -> builtins.list[TurnMatch]:
    """The ``limit`` turns of ``ids`` whose text best matches the query (per-conversation
    full-text scans, each cut to ``limit`` by the store, merged)."""
    found: list[TurnMatch] = []
    for conversation_id in ids:
        hits = uow.entries.search(
            conversation_namespace(conversation_id),
            request.query,
            limit=limit,
            user_id=request.user_id,
            key_prefix=TURN_KEY_PREFIX,
            language=request.language,
        )
        found.extend(
            TurnMatch(conversation_id, turn_from_entry(hit.entry), hit.score) for hit in hits
        )
    return _best(found, limit)


def _by_meaning(
    uow: UnitOfWork, request: TurnSearch, meaning: ModelVector, ids: Sequence[str], limit: int
) -> builtins.list[TurnMatch]:
    """The ``limit`` turns of ``ids`` nearest the query's vector (per-conversation scans)."""
    vectors = turn_vectors(uow)
    found: list[TurnMatch] = []
    for conversation_id in ids:
        hits = vectors.vector_search(
            conversation_namespace(conversation_id),
            meaning.vector,
            meaning.spec,
            limit=limit,
            user_id=request.user_id,
        )
        found.extend(
            TurnMatch(conversation_id, turn_from_entry(hit.entry), hit.score)
            for hit in hits
            if (hit.entry.key or "").startswith(TURN_KEY_PREFIX)
        )
    return _best(found, limit)
