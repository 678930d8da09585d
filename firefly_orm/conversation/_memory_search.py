"""Searching past conversations, and embedding turns: a base of ``ConversationMemory``.

:class:`ConversationSearch` holds the operation method
``_search_conversations`` (the public ``search_conversations`` and
``async_search_conversations`` are derived from it by
:class:`~firefly_orm.conversation.ConversationMemory`) and
``_embed_turns``, which the appends (``add_turn``, ``add_turns``) run before
their unit of work opens.  The transaction and the rules are in
:mod:`firefly_orm.conversation._search`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from firefly_orm.bridges._steps import Operation, Transaction
from firefly_orm.conversation._model import ConversationTurn, check_conversation_id, check_int
from firefly_orm.conversation._owner import OwnedLayer
from firefly_orm.conversation._rows import turn_search_text
from firefly_orm.conversation._search import (
    SearchMode,
    TurnMatch,
    TurnSearch,
    check_mode,
    read_turn_text,
    search_turns,
)
from firefly_orm.entry import validate_search_language
from firefly_orm.errors import EntryValidationError
from firefly_orm.vector._spec import ModelVector

if TYPE_CHECKING:
    from firefly_orm.long_term._embedding import EmbedderLike, Embedding

__all__ = ["DEFAULT_SEARCH_LIMIT", "ConversationSearch", "make_embedding"]

#: How many turns ``search_conversations`` returns unless told otherwise.
DEFAULT_SEARCH_LIMIT = 5


def make_embedding(embedder: EmbedderLike | None) -> Embedding | None:
    """How a memory calls ``embedder`` (``None``: it embeds nothing).

    Raises:
        EntryValidationError: Not an embedder.
        MissingExtraError: pydantic-ai is not installed.
    """
    if embedder is None:
        return None
    from firefly_orm.long_term._embedding import Embedding, as_embedder

    return Embedding(as_embedder(embedder))


def _ids(name: str, value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise EntryValidationError(name, "must be a list of conversation ids")
    return tuple(check_conversation_id(item) for item in value)


class ConversationSearch(OwnedLayer):
    """Search over past conversations and turn embedding (a base of ``ConversationMemory``)."""

    _embedding: Embedding | None = None

    @property
    def embedder(self) -> Any:
        """The pydantic-ai ``Embedder`` turns are embedded with (``None``: text search only)."""
        return None if self._embedding is None else self._embedding.embedder

    def _embed_turns(
        self, turns: Sequence[ConversationTurn]
    ) -> Operation[list[ModelVector | None]]:
        """One vector per turn of ``turns`` (``None``: no embedder, or a turn without text).

        A step before the unit of work: the embedder is called in batches, never
        inside a transaction.
        """
        made: list[ModelVector | None] = [None] * len(turns)
        if self._embedding is None:
            return made
        texts = [turn_search_text(t.user_prompt, t.assistant_response) for t in turns]
        places = [i for i, text in enumerate(texts) if text is not None]
        if not places:
            return made
        spec, vectors = yield from self._embedding.documents([texts[i] or "" for i in places])
        for place, vector in zip(places, vectors, strict=True):
            made[place] = ModelVector(spec, vector)
        return made

    def _edited_vector(
        self, conversation_id: str, turn_id: int, prompt: str | None, answer: str | None
    ) -> Operation[tuple[str, ModelVector] | None]:
        """The text and vector a turn will have after an edit of its prompt or answer
        (``None``: no embedder, no text edited, or no such live turn).

        A step before the edit's unit of work: when one of the two is edited, the
        other is read first (in its own read transaction, checked like the edit
        when the memory is bound), then the text is embedded.
        """
        if self._embedding is None or (prompt is None and answer is None):
            return None
        if prompt is None or answer is None:
            read = Transaction.read(read_turn_text, conversation_id, turn_id)
            stored = yield from self._as_owner(conversation_id, read)
            if stored is None:
                return None
            prompt = stored[0] if prompt is None else prompt
            answer = stored[1] if answer is None else answer
        text = turn_search_text(prompt, answer)
        (vector,) = yield from self._embed_turns(
            [ConversationTurn(user_prompt=prompt, assistant_response=answer)]
        )
        return None if text is None or vector is None else (text, vector)

    def _search_conversations(
        self,
        query: str,
        *,
        mode: SearchMode | None = None,
        limit: int = DEFAULT_SEARCH_LIMIT,
        conversation_ids: Iterable[str] | None = None,
        exclude: Iterable[str] | None = None,
        user_id: str | None = None,
        language: str | None = None,
    ) -> Operation[list[TurnMatch]]:
        """The turns of past conversations that best match ``query``, best first.

        Searches the live turns (not archived ones) of the user's conversations:
        the bound user's, or ``user_id``'s (an unbound memory; a bound one
        refuses another user).  An unbound memory without ``user_id`` searches
        every conversation (an admin view).  Another user's turns are never
        read: the user filter is in every store query.

        Args:
            query: What to look for (plain text, never query syntax).
            mode: ``"text"`` (the store's full-text search), ``"semantic"`` (by
                meaning: needs an ``embedder``), ``"hybrid"`` (both, fused by
                reciprocal rank).  Default: ``"hybrid"`` with an embedder,
                else ``"text"``.  The query is embedded before the read
                transaction opens.
            limit: At most this many turns (0: none).
            conversation_ids: Search only these conversations (ids that are
                missing or another user's are left out, as if they were empty).
            exclude: Never these conversations (the current one, say).
            user_id: The user whose conversations are searched (default: the
                bound user).
            language: The PostgreSQL text-search configuration of the query
                (default ``"simple"``).

        Returns:
            :class:`~firefly_orm.conversation.TurnMatch` items: the turn, its
            ``conversation_id``, its ``turn_id`` (position) and the ``score``.
            Cost: one index scan per searched conversation and ranking
            (:mod:`firefly_orm.conversation._search`).

        Raises:
            EntryValidationError: A bad argument, or a vector mode without an
                embedder (nothing is read).
            VectorUnavailableError: A vector mode on a store that keeps no vectors.
        """
        if not isinstance(query, str):
            raise EntryValidationError("query", f"must be a str, got {type(query).__name__}")
        request = TurnSearch(
            query=query,
            mode=self._search_mode(mode),
            limit=check_int("limit", limit, 0),
            user_id=self._acting_user(user_id),
            conversation_ids=_ids("conversation_ids", conversation_ids),
            exclude=_ids("exclude", exclude) or (),
            language=None if language is None else validate_search_language(language),
        )
        if request.limit == 0 or not query.strip():
            return []
        if request.mode != "text" and self._embedding is not None:
            request = replace(request, meaning=(yield from self._embedding.query(query)))
        return (yield from Transaction.read(search_turns, request))

    def _search_mode(self, mode: Any) -> SearchMode:
        """``mode`` checked (``None``: hybrid with an embedder, else text)."""
        return check_mode(
            mode,
            embedder=self._embedding is not None,
            what="search",
            where="ConversationMemory(..., embedder=...) or MemoryManager(..., embedder=...)",
        )
