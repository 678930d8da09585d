"""The support agent: a pydantic-ai agent with tools, run on memory by a ``MemoryAgent``.

:func:`build_support` is the whole wiring a real app needs::

    memory = MemoryManager(store=store, max_conversation_tokens=..., summarizer=...)
    support = MemoryAgent(agent, memory=memory, name="support")
    result = await support.run(text, conversation_id=cid, user_id=customer)

The agent's tools write facts through :class:`~firefly_orm.pydantic_ai.MemoryDeps`
(``ctx.deps.memory``: the customer's own facts), so the next run, in this
process or another, gets them in its context.

The models are offline: :func:`support_model` and :func:`summary_model` are
``FunctionModel`` functions that play the LLM by a few rules, reading only what
they are sent (the facts, the summary and the history that memory put in the
context), so the demo shows what memory gives a model.  ``build_agent(model=
"openai:gpt-4o")`` and ``build_summarizer(model="openai:gpt-4o-mini")`` use real
ones instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pydantic_ai import Agent, ModelRetry, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel

from firefly_orm.conversation._context import SUMMARY_CONTEXT_PREFIX
from firefly_orm.manager import MemoryManager
from firefly_orm.pydantic_ai import MemoryAgent, MemoryDeps
from firefly_orm.store import MemoryStore
from firefly_orm.summarization import LLMSummarizer, create_llm_summarizer

__all__ = [
    "CONTEXT_TOKENS",
    "INSTRUCTIONS",
    "MAX_CONVERSATION_TOKENS",
    "ORDERS",
    "SUMMARY_TOKENS",
    "Order",
    "build_agent",
    "build_memory",
    "build_summarizer",
    "build_support",
    "summary_model",
    "support_model",
]

INSTRUCTIONS = (
    "You are the support agent of a small web shop. Look orders up with lookup_order, "
    "save the customer's name with save_customer_name, and answer in one or two sentences."
)
#: The conversation's token budget: small, so the demo's older turns are evicted
#: (and summarized) within a few turns.
MAX_CONVERSATION_TOKENS = 160
#: The longest summary of the evicted turns, in tokens.
SUMMARY_TOKENS = 70
#: The budget of what a model call gets: summary, facts and every turn kept.
CONTEXT_TOKENS = 400


@dataclass(frozen=True)
class Order:
    """An order of the shop's (fake) order system."""

    status: str
    carrier: str


#: The shop's orders, by id.
ORDERS: Mapping[str, Order] = {
    "A-1042": Order(status="out for delivery today", carrier="Parcelforce"),
    "B-2077": Order(status="waiting at the Leeds depot", carrier="DPD"),
}

_ORDER_ID = re.compile(r"\b[A-Z]-\d{4}\b")
_NAME = re.compile(r"\b(?i:my name is) ([A-Z][a-z]+)")
_FACT_LINE = re.compile(r"^- ([^:]+): (.*)$")
_WORKING_HEADER = "Working Memory:"


# --------------------------------------------------------------------------- tools


async def lookup_order(ctx: RunContext[MemoryDeps], order_id: str) -> str:
    """Look up an order: its status and carrier.

    Args:
        order_id: The order's id, like A-1042.
    """
    key = order_id.strip().upper()
    order = ORDERS.get(key)
    if order is None:
        raise ModelRetry(f"There is no order {order_id!r}; ask the customer to check the id.")
    await ctx.deps.memory.async_set_fact("order_id", key, importance=0.8)
    await ctx.deps.memory.async_set_fact("order_status", order.status, importance=0.6)
    return f"Order {key} is {order.status} ({order.carrier})."


async def save_customer_name(ctx: RunContext[MemoryDeps], name: str) -> str:
    """Remember the customer's name for later conversations.

    Args:
        name: The name the customer gave.
    """
    await ctx.deps.memory.async_set_fact("customer_name", name, importance=0.9)
    return f"Saved the name {name}."


def build_agent(model: Model | str | None = None) -> Agent[MemoryDeps, str]:
    """The support agent (on :func:`support_model` unless ``model`` is given)."""
    agent: Agent[MemoryDeps, str] = Agent(
        model if model is not None else FunctionModel(support_model),
        deps_type=MemoryDeps,
        instructions=INSTRUCTIONS,
        name="support",
    )
    agent.tool(lookup_order)
    agent.tool(save_customer_name)
    return agent


def build_summarizer(model: Model | str | None = None) -> LLMSummarizer:
    """The LLM summarizer of evicted turns (on :func:`summary_model` unless ``model`` is given)."""
    return create_llm_summarizer(
        model=model if model is not None else FunctionModel(summary_model),
        max_summary_tokens=SUMMARY_TOKENS,
    )


def build_memory(store: MemoryStore) -> MemoryManager:
    """The memory of the support desk: a small budget, evicted turns summarized."""
    return MemoryManager(
        store=store,
        max_conversation_tokens=MAX_CONVERSATION_TOKENS,
        summarize_threshold=MAX_CONVERSATION_TOKENS,
        summarizer=build_summarizer(),
    )


def build_support(store: MemoryStore) -> MemoryAgent[MemoryDeps, str]:
    """The support agent on the store's memory: one call per customer message."""
    return MemoryAgent(
        build_agent(), memory=build_memory(store), name="support", max_tokens=CONTEXT_TOKENS
    )


# --------------------------------------------------------------------------- the offline models


@dataclass
class _Seen:
    """What memory put in front of the model, and the new prompt."""

    facts: dict[str, str] = field(default_factory=dict)
    summary: str | None = None
    earlier_prompts: list[str] = field(default_factory=list)
    prompt: str = ""


def _read(messages: Sequence[ModelMessage]) -> _Seen:
    seen = _Seen()
    prompts: list[str] = []
    for message in messages:
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            if isinstance(part, SystemPromptPart):
                _read_system(part.content, seen)
            elif isinstance(part, UserPromptPart) and isinstance(part.content, str):
                prompts.append(part.content)
    if prompts:
        seen.prompt = prompts[-1]
        seen.earlier_prompts = prompts[:-1]
    return seen


def _read_system(text: str, seen: _Seen) -> None:
    if text.startswith(SUMMARY_CONTEXT_PREFIX):
        seen.summary = text.removeprefix(SUMMARY_CONTEXT_PREFIX).strip()
    elif text.startswith(_WORKING_HEADER):
        for line in text.splitlines()[1:]:
            match = _FACT_LINE.match(line)
            if match:
                seen.facts[match[1]] = match[2]


def _say(text: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(content=text)])


def _call(tool: str, **args: str) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(tool_name=tool, args=args)])


def _after_tool(messages: Sequence[ModelMessage], seen: _Seen) -> ModelResponse | None:
    """The answer once a tool has returned (``None`` when none just did)."""
    last = messages[-1]
    if not isinstance(last, ModelRequest):
        return None
    for part in last.parts:
        refused = isinstance(part, RetryPromptPart) or (
            isinstance(part, ToolReturnPart) and part.outcome != "success"
        )
        if refused:
            return _say("I could not find that order. Could you check its id?")
        if isinstance(part, ToolReturnPart):
            if part.tool_name == "save_customer_name":
                told = _NAME.search(seen.prompt)
                return _say(f"Nice to meet you, {told[1] if told else 'there'}. How can I help?")
            known = seen.facts.get("customer_name")
            return _say(f"{f'Thanks, {known}. ' if known else ''}{part.content}")
    return None


def support_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The offline support "LLM": a few rules over what it is sent.

    It calls ``save_customer_name`` when told a name and ``lookup_order`` for
    an order id (or, asked where the order is, for the ``order_id`` fact);
    answers "what is my name" from the facts and "what have we discussed" from
    the summary and the history; anything else gets a short reply that uses
    the facts.
    """
    seen = _read(messages)
    answered = _after_tool(messages, seen)
    if answered is not None:
        return answered
    prompt, facts = seen.prompt, seen.facts
    name, order_id = facts.get("customer_name"), facts.get("order_id")
    lowered = prompt.lower()
    if match := _NAME.search(prompt):
        return _call("save_customer_name", name=match[1])
    if match := _ORDER_ID.search(prompt):
        return _call("lookup_order", order_id=match[0])
    if "where is my order" in lowered:
        if order_id:
            return _call("lookup_order", order_id=order_id)
        return _say("Which order is it? Please give me its id (like A-1042).")
    if "my name" in lowered:
        return _say(f"Your name is {name}." if name else "I do not know your name yet.")
    if "discussed" in lowered:
        recent = "; ".join(seen.earlier_prompts[-2:]) or "nothing yet"
        return _say(
            f"Here is what I remember: {seen.summary or 'no older turns'} "
            f"Most recently you said: {recent}"
        )
    who = f", {name}" if name else ""
    order = f"order {order_id}" if order_id else "your order"
    if "neighbour" in lowered:
        return _say(f"Yes{who}: the courier can leave {order} with a neighbour; I added a note.")
    if "invoice" in lowered:
        return _say(f"Done{who}: the invoice for {order} is on its way to your email.")
    if "thank" in lowered:
        return _say(f"You are welcome{who}. Have a good day!")
    return _say(f"I have noted that{who}.")


_SUMMARY_LINE = re.compile(r"^Earlier summary: (.*)$")
_USER_LINE = re.compile(r"^\s+User: (.*)$")
_SUMMARY_OPENING = "The customer said: "
#: Words of each customer message the scripted summary keeps, and how many messages.
_WORDS_PER_MESSAGE = 8
_MESSAGES_KEPT = 6


def summary_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The offline summary "LLM": the newest customer messages, the earlier summary's included.

    It reads the turns :func:`~firefly_orm.summarization.format_turns` puts in
    the prompt (the earlier summary first) and answers ``The customer said: a;
    b; ...`` with the first words of each of the newest messages.
    """
    (prompt,) = [
        part.content
        for part in messages[-1].parts
        if isinstance(part, UserPromptPart) and isinstance(part.content, str)
    ]
    said: list[str] = []
    for line in prompt.splitlines():
        if match := _SUMMARY_LINE.match(line):
            earlier = match[1].strip().removeprefix(_SUMMARY_OPENING).rstrip(".")
            said.extend(item for item in earlier.split("; ") if item)
        elif match := _USER_LINE.match(line):
            said.append(" ".join(match[1].split()[:_WORDS_PER_MESSAGE]).rstrip(".?!"))
    return _say(f"{_SUMMARY_OPENING}{'; '.join(said[-_MESSAGES_KEPT:])}.")
