"""One budgeted context for the next model call: :func:`assemble_context`.

:meth:`MemoryManager.assemble_context <firefly_orm.MemoryManager.assemble_context>`
runs it as one read transaction (one consistent snapshot on SQL).  The context
is, in order:

1. the conversation's rolling summary (one system message), when it fits;
2. the long-term items recalled for the latest prompt (one system message,
   :data:`LONG_TERM_CONTEXT_PREFIX` then one ``- <text>`` line per item, best
   first), at most :attr:`ContextShares.long_term` of the budget;
3. with ``past_turns``, the turns of the user's earlier conversations that
   best match the query (one system message, :data:`PAST_TURNS_CONTEXT_PREFIX`
   then one ``- <prompt> / <answer>`` line per turn, best first;
   :mod:`firefly_orm.conversation._search`, hybrid when the conversation memory
   has an embedder, else by text), at most :attr:`ContextShares.past_turns`;
   they need a user (the manager's, else the conversation's owner): a
   conversation of nobody gets none;
4. the working-memory facts (one system message, as
   :meth:`WorkingMemory.to_context_string <firefly_orm.WorkingMemory.to_context_string>`),
   at most :attr:`ContextShares.working` of the budget;
5. the pinned turns, then the newest messages of the conversation (as
   :meth:`ConversationMemory.get_context <firefly_orm.ConversationMemory.get_context>`
   picks them: never opening on a tool result whose call was cut), in what
   is left: the budget minus what parts 2 to 4 used (their unused shares go
   to the conversation), the summary included.

Each part is cut whole: recalled items and facts are added in order while the
part stays within its share, turns as the conversation's window allows.  The
total, counted as the conversation counts (stored estimates for turns, the
estimator over each added message's text), never exceeds ``max_tokens``, and
with ``max_messages`` the number of messages never exceeds it.  Messages come
as pydantic-ai ``ModelMessage`` objects when the conversation holds pydantic-ai
messages (or ``style="pydantic-ai"``), else as ``{"role", "content"}`` dicts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from firefly_orm.bridges._steps import Operation
from firefly_orm.conversation._codec import pydantic_ai_messages
from firefly_orm.conversation._messages import Estimator
from firefly_orm.conversation._model import check_conversation_id, check_int
from firefly_orm.conversation._owner import owner_row
from firefly_orm.conversation._plan import Limits
from firefly_orm.conversation._reads import read_context_parts, read_recent
from firefly_orm.conversation._search import TurnSearch, search_turns
from firefly_orm.entry._rules import check_unit_interval
from firefly_orm.errors import EntryValidationError
from firefly_orm.long_term._memory import LongTermMemory
from firefly_orm.long_term._model import Recalled
from firefly_orm.long_term._ops import ItemFilter, recall_items
from firefly_orm.protocols import UnitOfWork
from firefly_orm.working import format_context, read_facts

if TYPE_CHECKING:
    from firefly_orm.conversation._memory import ConversationMemory
    from firefly_orm.working import WorkingMemory

__all__ = [
    "LONG_TERM_CONTEXT_PREFIX",
    "PAST_TURNS_CONTEXT_PREFIX",
    "STYLES",
    "AssembleRequest",
    "ContextShares",
    "LongTermSource",
    "assemble_context",
    "assemble_request",
    "with_query_vector",
    "system_message",
]

#: What opens the message carrying recalled long-term items.
LONG_TERM_CONTEXT_PREFIX = "Relevant long-term memories:"
#: What opens the message carrying turns of earlier conversations.
PAST_TURNS_CONTEXT_PREFIX = "Relevant turns of earlier conversations:"
#: The message styles: pydantic-ai ``ModelMessage`` objects or role/content dicts.
STYLES = ("pydantic-ai", "dict")


@dataclass(frozen=True)
class ContextShares:
    """The most each optional part of an assembled context may take of the budget.

    Attributes:
        long_term: Recalled long-term items (default a quarter).
        working: Working-memory facts (default 15%).
        past_turns: Turns of earlier conversations (default 15%; only with
            ``past_turns=`` of ``assemble_context``).

    The conversation (summary, pinned and recent turns) gets the rest, including
    whatever these two leave unused.
    """

    long_term: float = 0.25
    working: float = 0.15
    past_turns: float = 0.15

    def __post_init__(self) -> None:
        for name in ("long_term", "working", "past_turns"):
            check_unit_interval(getattr(self, name), f"shares.{name}")
        if self.long_term + self.working + self.past_turns > 1.0:
            raise EntryValidationError(
                "shares", "long_term + working + past_turns must be at most 1.0"
            )


@dataclass(frozen=True)
class LongTermSource:
    """Where recalled items come from: a long-term memory's namespace, owner and language."""

    namespace: str
    user_id: str | None
    language: str | None
    limit: int = 5
    min_importance: float | None = None


@dataclass(frozen=True)
class AssembleRequest:
    """Everything :func:`assemble_context` needs (checked by the caller).

    Attributes:
        conversation_id: The conversation.
        limits: The conversation's limits with ``max_tokens`` / ``max_messages``
            set to the context's budget.
        estimator: Counts the tokens of the added system messages.
        long_term: Where to recall from (``None``: no long-term part).
        working_namespace: The working-memory namespace (``None``: no facts).
        query: What to recall for; ``None``: the latest stored user prompt.
        shares: The budget shares of the optional parts.
        style: ``"pydantic-ai"``, ``"dict"`` or ``None`` (as the conversation's messages).
        past_turns: How to search earlier conversations (``None``: no such part;
            its ``query`` is replaced by the recall query, its ``user_id``
            ``None`` by the conversation's owner).
    """

    conversation_id: str
    limits: Limits
    estimator: Estimator
    long_term: LongTermSource | None
    working_namespace: str | None
    query: str | None = None
    shares: ContextShares = ContextShares()
    style: str | None = None
    past_turns: TurnSearch | None = None


def system_message(text: str, style: str) -> Any:
    """A system message holding ``text`` in ``style`` (see :data:`STYLES`)."""
    if style == "pydantic-ai":
        messages = pydantic_ai_messages()
        return messages.ModelRequest(parts=[messages.SystemPromptPart(content=text)])
    return {"role": "system", "content": text}


def _lines_within(
    header: str, lines: Sequence[str], budget: float, estimator: Estimator
) -> tuple[str, int]:
    """``header`` and as many of ``lines`` (in order) as fit ``budget`` tokens; text and cost."""
    kept: list[str] = []
    cost = 0
    for line in lines:
        text = "\n".join([header, *kept, line])
        estimate = int(estimator.estimate(text))
        if estimate > budget:
            break
        kept.append(line)
        cost = estimate
    return ("\n".join([header, *kept]), cost) if kept else ("", 0)


def _style_of(messages: Sequence[Any], asked: str | None) -> str:
    if asked is not None:
        return asked
    return "dict" if all(isinstance(m, dict) for m in messages) else "pydantic-ai"


def _query(uow: UnitOfWork, request: AssembleRequest) -> str:
    """What to recall and search for: the request's query, else the latest stored user prompt."""
    if request.query is not None:
        return request.query
    latest = read_recent(uow, request.conversation_id, 1)
    return latest[-1].user_prompt if latest else ""


def _recalled(uow: UnitOfWork, request: AssembleRequest) -> list[Recalled]:
    source = request.long_term
    if source is None or source.limit == 0:
        return []
    query = _query(uow, request)
    if not query.strip():
        return []
    return recall_items(
        uow,
        source.namespace,
        query,
        limit=source.limit,
        min_importance=source.min_importance,
        user_id=source.user_id,
        language=source.language,
        where=ItemFilter(),
    )


def _past_turns(uow: UnitOfWork, request: AssembleRequest) -> list[str]:
    """The lines of the turns of earlier conversations matching the query, best first."""
    search = request.past_turns
    if search is None or search.limit == 0:
        return []
    query = _query(uow, request)
    user_id = search.user_id
    if user_id is None:  # an unbound manager: the conversation's owner, never everyone's
        row = owner_row(uow, request.conversation_id)
        user_id = None if row is None else row.user_id
    if user_id is None or not query.strip():
        return []
    found = search_turns(uow, replace(search, query=query, user_id=user_id))
    return [
        "- " + " ".join(f"{m.turn.user_prompt} / {m.turn.assistant_response}".split())
        for m in found
    ]


def _share(budget: float, share: float) -> float:
    """The tokens ``share`` of ``budget`` (``inf``: no limit) gives."""
    return budget if budget == math.inf else math.floor(budget * share)


def assemble_context(uow: UnitOfWork, request: AssembleRequest) -> list[Any]:
    """The context of the module docstring, read in one unit of work."""
    # No token limit (max_tokens=None): every part is taken whole.
    budget: float = math.inf if request.limits.max_tokens is None else request.limits.max_tokens
    max_messages = request.limits.max_messages
    estimator = request.estimator
    parts: list[tuple[str, int]] = []
    recalled = _recalled(uow, request)
    if recalled:
        lines = ["- " + " ".join(r.item.text.split()) for r in recalled]
        share = _share(budget, request.shares.long_term)
        parts.append(_lines_within(LONG_TERM_CONTEXT_PREFIX, lines, share, estimator))
    past = _past_turns(uow, request)
    if past:
        share = _share(budget, request.shares.past_turns)
        parts.append(_lines_within(PAST_TURNS_CONTEXT_PREFIX, past, share, estimator))
    if request.working_namespace is not None:
        facts = read_facts(uow, request.working_namespace)
        if facts:
            header, *lines = format_context(facts).split("\n")
            share = _share(budget, request.shares.working)
            parts.append(_lines_within(header, lines, share, estimator))
    parts = [(text, cost) for text, cost in parts if text]
    if max_messages is not None:
        parts = parts[: max(0, max_messages - 1)]  # the conversation keeps room for one message
        max_messages -= len(parts)
    texts = [text for text, _ in parts]
    remaining = budget - sum(cost for _, cost in parts)
    summary, conversation = read_context_parts(
        uow,
        request.conversation_id,
        Limits(
            max_tokens=None if remaining == math.inf else max(int(remaining), 0),
            summarize_threshold=request.limits.summarize_threshold,
            max_messages=max_messages,
            pin_count=request.limits.pin_count,
            recent_count=request.limits.recent_count,
        ),
        estimator,
        request.style,
    )
    style = _style_of([m for m in (summary, *conversation) if m is not None], request.style)
    head = [] if summary is None else [summary]
    return [*head, *(system_message(text, style) for text in texts), *conversation]


def assemble_request(
    conversation: ConversationMemory,
    long_term: LongTermMemory,
    working: WorkingMemory,
    conversation_id: str,
    *,
    max_tokens: int | None = None,
    max_messages: int | None = None,
    query: str | None = None,
    recall_limit: int = 5,
    min_importance: float = 0.0,
    shares: ContextShares | None = None,
    style: str | None = None,
    past_turns: int = 0,
) -> AssembleRequest:
    """The checked :class:`AssembleRequest` of ``MemoryManager.assemble_context`` over
    these layers (also what ``MemoryAgent`` reads with).

    Raises:
        EntryValidationError: A bad argument.
    """
    limits = conversation.limits
    conversation_id = check_conversation_id(conversation_id)
    budget = limits.max_tokens if max_tokens is None else check_int("max_tokens", max_tokens, 1)
    messages = (
        limits.max_messages if max_messages is None else check_int("max_messages", max_messages, 1)
    )
    if query is not None and not isinstance(query, str):
        raise EntryValidationError("query", f"must be a str, got {type(query).__name__}")
    if style is not None and style not in STYLES:
        raise EntryValidationError("style", f"must be one of {', '.join(STYLES)}")
    if shares is not None and not isinstance(shares, ContextShares):
        raise EntryValidationError("shares", "must be a ContextShares")
    past = check_int("past_turns", past_turns, 0)
    return AssembleRequest(
        conversation_id=conversation_id,
        limits=Limits(
            max_tokens=budget,
            summarize_threshold=limits.summarize_threshold,
            max_messages=messages,
            pin_count=limits.pin_count,
            recent_count=limits.recent_count,
        ),
        estimator=conversation.estimator,
        long_term=LongTermSource(
            namespace=long_term.namespace,
            user_id=long_term.user_id,
            language=long_term.language,
            limit=check_int("recall_limit", recall_limit, 0),
            min_importance=LongTermMemory.recall_floor(min_importance),
        ),
        working_namespace=working.namespace,
        query=query,
        shares=shares if shares is not None else ContextShares(),
        style=style,
        past_turns=(
            TurnSearch(
                query="",
                mode="text",
                limit=past,
                user_id=conversation.user_id,
                exclude=(conversation_id,),
                language=long_term.language,
            )
            if past
            else None
        ),
    )


def with_query_vector(
    conversation: ConversationMemory, request: AssembleRequest
) -> Operation[AssembleRequest]:
    """``request`` with its past-turns search made hybrid: the query embedded now, before
    the read transaction (when the conversation memory has an embedder and the
    query is given; else the search stays by text)."""
    search, embedding = request.past_turns, conversation._embedding
    if search is None or embedding is None or not (request.query or "").strip():
        return request
    meaning = yield from embedding.query(request.query or "")
    return replace(request, past_turns=replace(search, mode="hybrid", meaning=meaning))
