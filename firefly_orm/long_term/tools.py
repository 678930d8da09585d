"""Agent tools: a pydantic-ai toolset that lets the model remember facts and recall them.

:func:`long_term_toolset` wraps a :class:`~firefly_orm.long_term.LongTermMemory`
(or anything with one under ``.long_term``, such as a ``MemoryManager``) in a
:class:`pydantic_ai.toolsets.FunctionToolset` with two tools:

* ``remember(content, importance=0.5, tags=[])``: stores one item and answers
  with a short confirmation naming its id;
* ``recall(query, limit=5)``: the best matching items, as JSON-ready dicts
  (``text``, ``importance``, ``tags``, ``score``), best first;
* with ``conversations=`` (a :class:`~firefly_orm.conversation.ConversationMemory`,
  e.g. ``manager.conversation``), ``search_conversations(query, limit=5)``:
  the turns of the user's past conversations that match best
  (:meth:`ConversationMemory.search_conversations
  <firefly_orm.conversation.ConversationMemory.search_conversations>`, hybrid
  when that memory has an embedder), as dicts (``conversation_id``,
  ``turn_id``, ``user_prompt``, ``assistant_response``, ``score``).

The toolset is bound to one owner when it is built (the memory's user, or the
``user_id`` given for a memory bound to nobody); the model never chooses whose
memory it reads or writes, and a memory bound to a user gives tools of that
user only.
Both tools run the memory's ``async_`` operations, so a run never blocks its
event loop on the database.  Arguments the memory refuses (an importance of 7,
a blank text, an empty tag...) come back to the model as a retry prompt
(:class:`pydantic_ai.ModelRetry`) naming the problem, and nothing is written;
store failures (:class:`~firefly_orm.errors.StoreError`) end the run as usual.

pydantic-ai is imported only when a toolset is built (extra ``pydantic-ai``),
so importing this module costs nothing without it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

# pydantic needs this TypedDict (not typing.TypedDict) before Python 3.12 to build
# the tool's return schema; typing_extensions is a dependency of pydantic.
from typing_extensions import TypedDict

from firefly_orm.conversation._memory import ConversationMemory
from firefly_orm.conversation._search import TurnMatch
from firefly_orm.entry._rules import check_bound_user
from firefly_orm.errors import EntryValidationError, MissingExtraError
from firefly_orm.long_term._memory import LongTermMemory
from firefly_orm.long_term._model import Recalled
from firefly_orm.long_term._toolset import function_toolset

if TYPE_CHECKING:  # pragma: no cover - for type checkers only
    from pydantic_ai.toolsets import FunctionToolset

__all__ = [
    "DEFAULT_MAX_RESULTS",
    "DEFAULT_RECALL_LIMIT",
    "HasLongTermMemory",
    "RecalledMemory",
    "RecalledTurn",
    "long_term_toolset",
    "recalled_memory",
    "recalled_turn",
]

logger = logging.getLogger(__name__)

#: The largest ``limit`` the ``recall`` tool accepts unless the toolset says otherwise.
DEFAULT_MAX_RESULTS = 20
#: How many results ``recall`` returns when the model gives no ``limit``.
DEFAULT_RECALL_LIMIT = 5


class HasLongTermMemory(Protocol):
    """An object that carries a long-term memory (e.g. a ``MemoryManager``).

    ``long_term`` is ``None`` when long-term memory is turned off.
    """

    @property
    def long_term(self) -> LongTermMemory | None:
        """The long-term memory, or ``None`` when it is disabled."""
        ...


class RecalledMemory(TypedDict):
    """One result of the ``recall`` tool, as the model receives it (JSON-ready).

    ``score`` is the text relevance (higher is better); compare it only within
    one result list.
    """

    text: str
    importance: float
    tags: list[str]
    score: float


class RecalledTurn(TypedDict):
    """One result of the ``search_conversations`` tool (JSON-ready); ``score`` as
    :attr:`~firefly_orm.conversation.TurnMatch.score`."""

    conversation_id: str
    turn_id: int
    user_prompt: str
    assistant_response: str
    score: float


def recalled_turn(found: TurnMatch) -> RecalledTurn:
    """The ``search_conversations`` tool's view of one
    :class:`~firefly_orm.conversation.TurnMatch`."""
    turn = found.turn
    return RecalledTurn(
        conversation_id=found.conversation_id,
        turn_id=turn.turn_id,
        user_prompt=turn.user_prompt,
        assistant_response=turn.assistant_response,
        score=found.score,
    )


def recalled_memory(found: Recalled) -> RecalledMemory:
    """The ``recall`` tool's view of one :class:`~firefly_orm.long_term.Recalled` result."""
    item = found.item
    return RecalledMemory(
        text=item.text, importance=item.importance, tags=list(item.tags), score=found.score
    )


def _memory_of(source: LongTermMemory | HasLongTermMemory) -> LongTermMemory:
    """The :class:`LongTermMemory` of ``source`` (itself, or its ``long_term``)."""
    if isinstance(source, LongTermMemory):
        return source
    if not hasattr(source, "long_term"):
        raise TypeError(
            "long_term_toolset() needs a LongTermMemory or an object with a .long_term "
            f"LongTermMemory (such as a MemoryManager), got {type(source).__name__}"
        )
    memory = source.long_term
    if memory is None:
        raise ValueError(
            f"{type(source).__name__}.long_term is None: long-term memory is disabled, "
            "so there is nothing for the tools to remember into"
        )
    if not isinstance(memory, LongTermMemory):
        raise TypeError(
            f"{type(source).__name__}.long_term must be a LongTermMemory, "
            f"got {type(memory).__name__}"
        )
    return memory


def _check_max_results(max_results: Any) -> int:
    if isinstance(max_results, bool) or not isinstance(max_results, int) or max_results < 1:
        raise ValueError(f"max_results must be a positive integer, got {max_results!r}")
    return max_results


# The tools' docstrings are what the model reads (pydantic-ai turns the summary
# into the tool description and the ``Args:`` lines into parameter descriptions).

_REMEMBER_DOC = """Save a fact to long-term memory, so it can be recalled in later conversations.

Use it for information worth knowing next time: who the user is, their
preferences, decisions made, commitments, important events. Write the content
as one self-contained statement (for example "The user's name is Ada, she
prefers tea"), not as a fragment of the chat, so it makes sense when recalled
on its own. Do not save passing small talk.

Args:
    content: The fact to remember, as a self-contained statement in plain text.
    importance: How much the fact matters, from 0.0 (trivia) to 1.0 (essential,
        e.g. the user's name). More important memories come first among equally
        relevant results and are kept longest.
    tags: Optional short labels for the fact, such as "preference" or "project".
"""

_RECALL_DOC = """Search long-term memory for facts saved earlier, in this or past conversations.

Use it before answering anything that depends on what you may already know
about the user or earlier work. The query is matched word by word against the
saved facts (a fact matches if it has any of the words; more shared words rank
higher), so use the key words you expect in them, for example "user name" or
"favourite drink tea coffee". Results come best match first,
each with its text, importance, tags and relevance score; an empty list means
nothing relevant has been saved.

Args:
    query: Plain-text words to look for.
    limit: The most results to return, from 1 to {max_results}.
"""


_SEARCH_CONVERSATIONS_DOC = """Search the user's past conversations for what was said in them.

Use it when the answer may have been discussed before but was not saved as a
fact: earlier requests, details the user gave, what was agreed. The query is
matched against the turns of past conversations, by meaning when available
and by words. Results come best match first, each with the conversation id,
the turn's position, what the user said, what the assistant answered and a
relevance score; an empty list means nothing relevant was found.

Args:
    query: What to look for, in plain text.
    limit: The most turns to return, from 1 to {max_results}.
"""


def long_term_toolset(
    memory: LongTermMemory | HasLongTermMemory,
    *,
    user_id: str | None = None,
    max_results: int = DEFAULT_MAX_RESULTS,
    conversations: ConversationMemory | None = None,
) -> FunctionToolset[Any]:
    """A pydantic-ai toolset with ``remember`` and ``recall`` tools over ``memory``.

    Pass it to an agent (``Agent(model, toolsets=[long_term_toolset(mgr)])``).
    ``remember`` writes one item owned by the bound user and answers
    ``"Remembered (id <id>)."``; ``recall`` answers a list of
    :class:`RecalledMemory` dicts (the user's items that match the query best,
    ranked as :meth:`LongTermMemory.recall` ranks them).  Both use the memory's
    ``async_`` methods.  Bad arguments from the model raise
    :class:`pydantic_ai.ModelRetry` (the model is told what to fix; nothing is
    written).

    Args:
        memory: A :class:`LongTermMemory`, or an object whose ``long_term`` is
            one (a ``MemoryManager``); the tools use its store, namespace,
            language and limits.
        user_id: The owner the tools read and write; default: the memory's
            ``user_id``.  A memory bound to a user serves that user only
            (another ``user_id`` is refused).  With neither, items are written
            without an owner and ``recall`` searches every owner's items in the
            namespace (an admin's tools): give the tools of a request handler a
            user.
        max_results: The largest ``limit`` the model may ask ``recall`` (and
            ``search_conversations``) for.
        conversations: Add a ``search_conversations`` tool over this memory's
            conversations of the same owner (``manager.conversation``; it must
            use the same store).

    Raises:
        MissingExtraError: pydantic-ai is not installed (extra ``pydantic-ai``).
        TypeError: ``memory`` is neither of the accepted kinds.
        ValueError: ``memory.long_term`` is ``None`` (disabled), or
            ``max_results`` is not a positive integer.
        EntryValidationError: ``user_id`` is not a valid user id, or another
            user than the one ``memory`` is bound to.

    Example:
        >>> from pydantic_ai import Agent
        >>> ltm = LongTermMemory(user_id="ada")
        >>> agent = Agent("test", toolsets=[long_term_toolset(ltm)])
    """
    try:
        from pydantic_ai import ModelRetry
    except ImportError as exc:
        raise MissingExtraError("long_term_toolset", "pydantic-ai", "pydantic_ai") from exc

    ltm = _memory_of(memory)
    owner = ltm.user_id if user_id is None else check_bound_user(user_id, ltm.user_id, "memory")
    most = _check_max_results(max_results)
    if conversations is not None:
        if not isinstance(conversations, ConversationMemory):
            raise TypeError(
                f"conversations must be a ConversationMemory, got {type(conversations).__name__}"
            )
        if owner is not None:
            check_bound_user(owner, conversations.user_id, "conversation memory")

    async def remember(content: str, importance: float = 0.5, tags: Sequence[str] = ()) -> str:
        try:
            item_id = await ltm.async_remember(
                content, importance=importance, tags=tags, user_id=owner
            )
        except EntryValidationError as exc:
            logger.debug("remember tool: asked to retry (%s)", exc)
            raise ModelRetry(f"Nothing was saved: {exc}. Fix the argument and call again.") from exc
        logger.debug("remember tool: stored %s for user %r", item_id, owner)
        return f"Remembered (id {item_id})."

    async def recall(query: str, limit: int = DEFAULT_RECALL_LIMIT) -> list[RecalledMemory]:
        if not 1 <= limit <= most:
            raise ModelRetry(f"limit must be from 1 to {most}, got {limit}.")
        try:
            found = await ltm.async_recall(query, limit=limit, user_id=owner)
        except EntryValidationError as exc:
            logger.debug("recall tool: asked to retry (%s)", exc)
            raise ModelRetry(f"{exc}. Fix the argument and call again.") from exc
        logger.debug("recall tool: %d result(s) for user %r", len(found), owner)
        return [recalled_memory(r) for r in found]

    remember.__doc__ = _REMEMBER_DOC
    recall.__doc__ = _RECALL_DOC.format(max_results=most)
    if conversations is None:
        return function_toolset(remember, recall)
    return function_toolset(remember, recall, _search_tool(conversations, owner, most))


def _search_tool(
    conversations: ConversationMemory, owner: str | None, most: int
) -> Callable[[str, int], Awaitable[list[RecalledTurn]]]:
    """The ``search_conversations`` tool over ``conversations`` for ``owner``."""
    from pydantic_ai import ModelRetry

    async def search_conversations(
        query: str, limit: int = DEFAULT_RECALL_LIMIT
    ) -> list[RecalledTurn]:
        if not 1 <= limit <= most:
            raise ModelRetry(f"limit must be from 1 to {most}, got {limit}.")
        try:
            found = await conversations.async_search_conversations(
                query, limit=limit, user_id=owner
            )
        except EntryValidationError as exc:
            logger.debug("search_conversations tool: asked to retry (%s)", exc)
            raise ModelRetry(f"{exc}. Fix the argument and call again.") from exc
        logger.debug("search_conversations tool: %d turn(s) for user %r", len(found), owner)
        return [recalled_turn(m) for m in found]

    search_conversations.__doc__ = _SEARCH_CONVERSATIONS_DOC.format(max_results=most)
    return search_conversations
