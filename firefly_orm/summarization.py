"""LLM summaries of evicted conversation turns: :func:`create_llm_summarizer`.

The summarizer asks a pydantic-ai model (the ``pydantic-ai`` extra) for one
concise paragraph.  It is usable from both worlds::

    summarize = create_llm_summarizer(model="openai:gpt-4o-mini", max_summary_tokens=200)
    text = summarize(turns)                          # sync code
    text = await summarize.async_summarize(turns)    # async code: never blocks the loop

What it does better than the module it is modelled on:

* the prompt template is validated when the summarizer is created (it must
  contain ``{turns_text}`` and no other field);
* ``max_summary_tokens`` is used: the prompt states the limit and the answer is
  cut to that many tokens (the word heuristic of
  :class:`~firefly_orm.tokens.TokenEstimator`);
* any model failure (missing model name, unknown provider, network, auth) is
  logged as a warning and a plain extractive summary is returned instead, so a
  failing LLM never breaks ``add_turn``;
* the sync call runs the model on the process-wide event-loop thread
  (:func:`~firefly_orm.bridges._loop_thread.shared_loop`), so it works with no
  running loop, inside a thread while a loop runs elsewhere, and even
  (blocking) from a coroutine; async code should await
  :meth:`LLMSummarizer.async_summarize` instead.

A conversation passes its previous summary as a first turn with ``turn_id=-1``;
it is shown to the model as ``Earlier summary: ...`` so the new summary covers it.

**Which model** a summarizer made with ``model=None`` asks, at each call:

1. inside an agent's run (:class:`firefly_orm.pydantic_ai.MemoryAgent`, and so
   :func:`~firefly_orm.pydantic_ai.delegate` and the router), the model of the
   agent whose turn is being stored: the run's ``model=`` if it was given one,
   else the agent's own model (:func:`using_agent_model` marks that stretch);
2. elsewhere, the model named by ``FIREFLY_AGENTIC_MEMORY_SUMMARY_MODEL``; with
   that unset, a warning is logged and the extractive fallback summary is used.

A summarizer made with a model always uses that model.
"""

from __future__ import annotations

import logging
import os
import re
import string
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from firefly_orm._layout import SUMMARY_TURN_ID as SUMMARY_TURN_ID
from firefly_orm.bridges._loop_thread import loop_running, shared_loop
from firefly_orm.envnames import ENV_SUMMARY_MODEL
from firefly_orm.errors import MissingExtraError
from firefly_orm.tokens import DEFAULT_TOKENS_PER_WORD

if TYPE_CHECKING:
    from pydantic_ai.models import Model

__all__ = [
    "DEFAULT_PROMPT_TEMPLATE",
    "FALLBACK_SUMMARY",
    "SUMMARY_MODEL_ENV",
    "LLMSummarizer",
    "create_llm_summarizer",
    "current_agent_model",
    "fallback_summary",
    "format_turns",
    "truncate_to_tokens",
    "using_agent_model",
]

logger = logging.getLogger("firefly_orm")

#: Environment variable naming the model when ``model=None``.
SUMMARY_MODEL_ENV = ENV_SUMMARY_MODEL

#: What the fallback returns when no turn has a usable response.
FALLBACK_SUMMARY = "Previous conversation context."

# The synthetic turn that carries a conversation's previous summary: when turns
# are evicted, a conversation hands its summarizer the previous summary as a
# first, synthetic turn marked by these values.  Defined here, in a module that
# loads no ORM, so that recognising that turn does not load the conversation
# package; :mod:`firefly_orm.conversation` imports and re-exports them.

# ``turn_id`` of the synthetic turn that carries the previous summary:
# SUMMARY_TURN_ID, a row-layout fact from firefly_orm._layout (imported above).
#: ``user_prompt`` of the synthetic turn that carries the previous summary.
SUMMARY_TURN_PROMPT = "Summary of the earlier conversation"
#: Turn id of the synthetic turn that carries the previous summary (an alias of
#: :data:`SUMMARY_TURN_ID`).
PREVIOUS_SUMMARY_TURN_ID = SUMMARY_TURN_ID

#: Characters of each prompt/response shown to the model.
_MAX_TURN_CHARS = 500

DEFAULT_PROMPT_TEMPLATE = (
    "Summarize the following conversation turns in one concise paragraph. Keep the facts, "
    "decisions, names and user preferences that later turns may need; leave out greetings "
    "and filler.\n\n{turns_text}"
)


class TurnLike(Protocol):
    """What the summarizer reads from a turn (``ConversationTurn`` satisfies it)."""

    @property
    def turn_id(self) -> int: ...

    @property
    def user_prompt(self) -> str: ...

    @property
    def assistant_response(self) -> str: ...


# --------------------------------------------------------------------------- pure helpers


def validate_template(template: str) -> str:
    """Return ``template`` if it is a usable prompt template, else raise ``ValueError``.

    It must contain the field ``{turns_text}`` and no other field; literal braces
    are written ``{{`` and ``}}``.
    """
    if not isinstance(template, str):
        raise ValueError(f"prompt_template must be a string, got {type(template).__name__}")
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(
            f"prompt_template has unbalanced braces ({exc}); write literal braces as '{{{{' "
            "and '}}}}'"
        ) from None
    fields = [(name, spec, conv) for _, name, spec, conv in parsed if name is not None]
    bad = [name for name, spec, conv in fields if name != "turns_text" or spec or conv]
    if bad:
        raise ValueError(
            "prompt_template may only contain the field {turns_text}; found "
            + ", ".join("{" + name + "}" for name in bad)
        )
    if not fields:
        raise ValueError("prompt_template must contain the field {turns_text}")
    return template


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))


def _is_previous_summary(turn: TurnLike) -> bool:
    return getattr(turn, "turn_id", None) == SUMMARY_TURN_ID


def _summary_text(turn: TurnLike) -> str:
    """The previous-summary text a synthetic turn carries (in either field)."""
    return _text(turn.assistant_response).strip() or _text(turn.user_prompt).strip()


def format_turns(turns: Sequence[TurnLike]) -> str:
    """Render turns for the prompt.

    A synthetic turn with ``turn_id=-1`` becomes ``Earlier summary: ...``; every
    other turn ``Turn i:`` / ``  User: ...`` / ``  Assistant: ...`` (each side cut
    to 500 characters).
    """
    lines: list[str] = []
    number = 0
    for turn in turns:
        if _is_previous_summary(turn):
            lines.append(f"Earlier summary: {_summary_text(turn)}")
            continue
        number += 1
        lines.append(f"Turn {number}:")
        lines.append(f"  User: {_text(turn.user_prompt)[:_MAX_TURN_CHARS]}")
        lines.append(f"  Assistant: {_text(turn.assistant_response)[:_MAX_TURN_CHARS]}")
    return "\n".join(lines)


def max_words_for(max_tokens: int, tokens_per_word: float = DEFAULT_TOKENS_PER_WORD) -> int:
    """The most words whose heuristic estimate ``int(words * tpw)`` fits ``max_tokens``."""
    words = int(max_tokens / tokens_per_word) + 1
    while words > 0 and int(words * tokens_per_word) > max_tokens:
        words -= 1
    return max(words, 1)


_WORD = re.compile(r"\S+")


def truncate_to_tokens(text: str, max_tokens: int) -> str:
    """Cut ``text`` to at most ``max_tokens`` tokens (word heuristic), keeping its layout.

    The result's :class:`~firefly_orm.tokens.TokenEstimator` estimate (default
    heuristic) is at most ``max_tokens``.
    """
    limit = max_words_for(max_tokens)
    for count, match in enumerate(_WORD.finditer(text), start=1):
        if count == limit:
            return text[: match.end()].strip()
    return text.strip()


def fallback_summary(turns: Sequence[TurnLike]) -> str:
    """The summary used when the model fails.

    The first sentence (text before the first ``.``, plus ``.``) of the response
    of each of the last five turns that have one, joined by spaces; a previous
    summary counts as a turn.  ``"Previous conversation context."`` when nothing
    is left.
    """
    parts: list[str] = []
    candidates = [
        _summary_text(t) if _is_previous_summary(t) else _text(t.assistant_response) for t in turns
    ]
    for text in [c for c in candidates if c.strip()][-5:]:
        sentence = text.split(".", 1)[0].strip()
        if sentence:
            parts.append(sentence + ".")
    return " ".join(parts) if parts else FALLBACK_SUMMARY


# --------------------------------------------------------------------------- the agent's model

#: The model of the agent whose run is storing a turn (``None``: no agent run).
_AGENT_MODEL: ContextVar[str | Model | None] = ContextVar("firefly_orm_agent_model", default=None)


@contextmanager
def using_agent_model(model: str | Model | None) -> Iterator[None]:
    """While inside, summarizers made with ``model=None`` ask ``model``.

    An agent integration wraps the storing of a run's turn in it, so the
    summary of the turns that write evicts is asked of the agent's own model.
    It is a context variable: it holds for the current thread or task (and
    the sync summarizer carries it to the loop thread it runs on), and nested
    uses restore the outer model on exit.  ``None`` changes nothing.
    """
    token = _AGENT_MODEL.set(model)
    try:
        yield
    finally:
        _AGENT_MODEL.reset(token)


def current_agent_model() -> str | Model | None:
    """The model set by the innermost :func:`using_agent_model` (``None``: none)."""
    return _AGENT_MODEL.get()


# --------------------------------------------------------------------------- summarizer


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class LLMSummarizer:
    """Summarises evicted turns with a pydantic-ai model; see the module docstring.

    Build it with :func:`create_llm_summarizer`.  Call it (sync) or await
    :meth:`async_summarize`; both return the summary text and never raise for a
    model failure (they fall back to :func:`fallback_summary`).

    Attributes:
        model: The model given at creation (``None``: per call, the model of
            the agent whose run stores the turn, else the one named by the
            environment; see the module docstring).
        prompt_template: The template the prompt is built from (validated at
            creation, see :func:`validate_template`).
        max_summary_tokens: Upper bound of a summary's length in tokens.
    """

    model: str | Model | None
    prompt_template: str
    max_summary_tokens: int

    def __post_init__(self) -> None:
        validate_template(self.prompt_template)

    def __repr__(self) -> str:
        model = self.model if isinstance(self.model, str | None) else type(self.model).__name__
        return f"LLMSummarizer(model={model!r}, max_summary_tokens={self.max_summary_tokens})"

    def build_prompt(self, turns: Sequence[TurnLike]) -> str:
        """The user prompt sent to the model for ``turns`` (includes the length limit)."""
        words = max_words_for(self.max_summary_tokens)
        return (
            self.prompt_template.format(turns_text=format_turns(turns))
            + f"\n\nWrite at most {self.max_summary_tokens} tokens (about {words} words)."
        )

    def _resolve_model(self, agent_model: str | Model | None) -> str | Model:
        if self.model is not None:
            return self.model
        if agent_model is not None:
            return agent_model
        name = os.environ.get(SUMMARY_MODEL_ENV, "").strip()
        if not name:
            raise ValueError(
                "no summary model: pass create_llm_summarizer(model=...) "
                f"or set {SUMMARY_MODEL_ENV}"
            )
        return name

    async def async_summarize(self, turns: Sequence[TurnLike]) -> str:
        """Summarise ``turns`` (oldest first) without blocking the event loop."""
        return await self._summarize(list(turns), current_agent_model())

    async def _summarize(self, turns: list[TurnLike], agent_model: str | Model | None) -> str:
        """The summary of ``turns``; ``agent_model``: the calling agent's model, if any."""
        try:
            from pydantic_ai import Agent

            agent: Agent[None, str] = Agent(self._resolve_model(agent_model), output_type=str)
            result = await agent.run(self.build_prompt(turns))
            text = str(result.output).strip()
            if not text:
                raise ValueError("the model returned an empty summary")
        except Exception as exc:
            logger.warning(
                "LLM summarization failed (%s: %s); using the extractive fallback summary",
                type(exc).__name__,
                exc,
            )
            text = fallback_summary(turns)
        return truncate_to_tokens(text, self.max_summary_tokens)

    def __call__(self, turns: Sequence[TurnLike]) -> str:
        """Summarise ``turns`` from sync code (see the module docstring)."""
        if loop_running():
            logger.debug(
                "sync summarizer call inside a running event loop blocks it; "
                "await async_summarize() instead"
            )
        # The agent's model is read here: the loop thread has a context of its own.
        return shared_loop().call(self._summarize(list(turns), current_agent_model()))


def create_llm_summarizer(
    *,
    model: str | Model | None = None,
    prompt_template: str | None = None,
    max_summary_tokens: int = 500,
) -> LLMSummarizer:
    """Create a summarizer for :class:`~firefly_orm.conversation.ConversationMemory`.

    Args:
        model: A pydantic-ai model or model name (``"openai:gpt-4o-mini"``).  When
            ``None``, chosen at each call: inside an agent's run (a
            :class:`~firefly_orm.pydantic_ai.MemoryAgent`), that agent's model;
            elsewhere the one named by ``FIREFLY_AGENTIC_MEMORY_SUMMARY_MODEL``
            (unset: warning and fallback summary).
        prompt_template: Template with exactly one field, ``{turns_text}``.
        max_summary_tokens: Upper bound of the summary (stated in the prompt and
            enforced by cutting the answer).

    Returns:
        A callable ``turns -> str`` that also offers ``await .async_summarize(turns)``.

    Raises:
        MissingExtraError: pydantic-ai is not installed (extra ``pydantic-ai``).
        ValueError: A bad template or ``max_summary_tokens``.
    """
    try:
        import pydantic_ai  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError("create_llm_summarizer", "pydantic-ai", "pydantic_ai") from exc
    if (
        isinstance(max_summary_tokens, bool)
        or not isinstance(max_summary_tokens, int)
        or max_summary_tokens < 1
    ):
        raise ValueError(
            f"max_summary_tokens must be a positive integer, got {max_summary_tokens!r}"
        )
    if model is not None and isinstance(model, str) and not model.strip():
        raise ValueError("model must be a non-empty name, a pydantic-ai Model, or None")
    return LLMSummarizer(
        model=model,
        prompt_template=DEFAULT_PROMPT_TEMPLATE if prompt_template is None else prompt_template,
        max_summary_tokens=max_summary_tokens,
    )
