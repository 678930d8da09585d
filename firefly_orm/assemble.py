"""One budgeted context for the next model call: :func:`assemble_context`.

:meth:`MemoryManager.assemble_context <firefly_orm.MemoryManager.assemble_context>`
runs it as one read transaction (one consistent snapshot on SQL).  The context
is, in order:

1. the conversation's rolling summary (one system message), when it fits;
2. the long-term items recalled for the latest prompt (one system message,
   :data:`LONG_TERM_CONTEXT_PREFIX` then one ``- <text>`` line per item, best
   first), at most :attr:`ContextShares.long_term` of the budget;
3. the working-memory facts (one system message, as
   :meth:`WorkingMemory.to_context_string <firefly_orm.WorkingMemory.to_context_string>`),
   at most :attr:`ContextShares.working` of the budget;
4. the pinned turns, then the newest messages of the conversation (as
   :meth:`ConversationMemory.get_context <firefly_orm.ConversationMemory.get_context>`
   picks them: never opening on a tool result whose call was cut), in what
   is left: the budget minus what parts 2 and 3 used (their unused shares go
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
from dataclasses import dataclass
from typing import Any

from firefly_orm.conversation._codec import pydantic_ai_messages
from firefly_orm.conversation._messages import Estimator
from firefly_orm.conversation._plan import Limits
from firefly_orm.conversation._reads import read_context_parts, read_recent
from firefly_orm.entry._rules import check_unit_interval
from firefly_orm.errors import EntryValidationError
from firefly_orm.long_term._model import Recalled
from firefly_orm.long_term._ops import ItemFilter, recall_items
from firefly_orm.protocols import UnitOfWork
from firefly_orm.working import format_context, read_facts

__all__ = [
    "LONG_TERM_CONTEXT_PREFIX",
    "STYLES",
    "AssembleRequest",
    "ContextShares",
    "LongTermSource",
    "assemble_context",
    "system_message",
]

#: What opens the message carrying recalled long-term items.
LONG_TERM_CONTEXT_PREFIX = "Relevant long-term memories:"
#: The message styles: pydantic-ai ``ModelMessage`` objects or role/content dicts.
STYLES = ("pydantic-ai", "dict")


@dataclass(frozen=True)
class ContextShares:
    """The most each optional part of an assembled context may take of the budget.

    Attributes:
        long_term: Recalled long-term items (default a quarter).
        working: Working-memory facts (default 15%).

    The conversation (summary, pinned and recent turns) gets the rest, including
    whatever these two leave unused.
    """

    long_term: float = 0.25
    working: float = 0.15

    def __post_init__(self) -> None:
        for name in ("long_term", "working"):
            check_unit_interval(getattr(self, name), f"shares.{name}")
        if self.long_term + self.working > 1.0:
            raise EntryValidationError("shares", "long_term + working must be at most 1.0")


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
    """

    conversation_id: str
    limits: Limits
    estimator: Estimator
    long_term: LongTermSource | None
    working_namespace: str | None
    query: str | None = None
    shares: ContextShares = ContextShares()
    style: str | None = None


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


def _recalled(uow: UnitOfWork, request: AssembleRequest) -> list[Recalled]:
    source = request.long_term
    if source is None or source.limit == 0:
        return []
    query = request.query
    if query is None:
        latest = read_recent(uow, request.conversation_id, 1)
        query = latest[-1].user_prompt if latest else ""
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
