"""A scripted browser agent over a small offline web site, with its memory in a store.

Nothing here goes to the network: the "web" is :data:`SITE` (a dict), and the
model is a pydantic-ai :class:`~pydantic_ai.models.function.FunctionModel`
whose function (:class:`ScriptedModel`) plays one :class:`Task`: it calls the
tools in the task's plan, resolves an obstacle when a page reports one, reads
the facts it needs from the browser state in its prompt, then answers.

Each :func:`run_next_task` is one agent run of a :class:`BrowserMemoryManager`
session, as FlyBrowser runs a task: the prompt is the task followed by
``Browser state:`` and :meth:`~BrowserMemoryManager.format_for_prompt`, the
message history is the session's conversation, and the run's messages are
stored there as one turn.  The tools record every page, move, obstacle and fact
in the session, so the next process (the next task) starts from it: a known
obstacle is passed without asking the model, and a fact remembered by an
earlier task is in the prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from firefly_orm.compat.flybrowser import BrowserMemoryManager

__all__ = [
    "HOME",
    "LAPTOPS",
    "CHEAPEST",
    "CART",
    "SITE",
    "TASKS",
    "Recall",
    "ScriptedModel",
    "Task",
    "TaskRun",
    "WebPage",
    "build_agent",
    "prompt_for",
    "run_next_task",
]

HOME = "https://shop.example/"
LAPTOPS = "https://shop.example/laptops"
CHEAPEST = "https://shop.example/laptops/aero-13"
CART = "https://shop.example/cart"


@dataclass(frozen=True)
class WebPage:
    """A page of the offline site; ``obstacle`` is ``(type, how to get past it)``."""

    title: str
    elements: str
    obstacle: tuple[str, str] | None = None


SITE: dict[str, WebPage] = {
    HOME: WebPage(
        "Example Shop",
        "search box, 3 category links, cookie banner",
        ("cookie_banner", "click 'Accept all'"),
    ),
    LAPTOPS: WebPage("Laptops", "12 product cards sorted by price, price filter"),
    CHEAPEST: WebPage("Aero 13 - 499 EUR", "price 499 EUR, add-to-cart button, 41 reviews"),
    CART: WebPage(
        "Your cart",
        "1 item (Aero 13), checkout button",
        ("login_wall", "sign in with the demo account"),
    ),
}

INSTRUCTIONS = (
    "You drive a web browser. Use open_page to visit pages, resolve_obstacle when a "
    "page is blocked, remember to keep facts for later tasks."
)


@dataclass(frozen=True)
class Recall:
    """A tool argument the model reads from a fact in its prompt (``- key: value``)."""

    key: str


@dataclass(frozen=True)
class Task:
    """What the user asks, the tool calls the scripted model plans, and its answer."""

    text: str
    plan: tuple[tuple[str, dict[str, Any]], ...]
    answer: str


TASKS: tuple[Task, ...] = (
    Task(
        "Find the cheapest laptop on shop.example and remember it.",
        (
            ("open_page", {"url": HOME}),
            ("open_page", {"url": LAPTOPS, "method": "click"}),
            ("open_page", {"url": CHEAPEST, "method": "click"}),
            ("remember", {"key": "cheapest_laptop", "value": "Aero 13, 499 EUR"}),
            ("remember", {"key": "cheapest_laptop_url", "value": CHEAPEST}),
        ),
        "The cheapest laptop is the Aero 13 at 499 EUR.",
    ),
    Task(
        "Put the cheapest laptop in the cart.",
        (
            ("open_page", {"url": HOME}),
            ("open_page", {"url": Recall("cheapest_laptop_url"), "method": "link"}),
            ("open_page", {"url": CART, "method": "click"}),
            ("remember", {"key": "cart", "value": "Aero 13"}),
        ),
        "The Aero 13 is in the cart.",
    ),
    Task(
        "Check that the cart still holds the laptop.",
        (("open_page", {"url": CART}),),
        "The cart still holds the Aero 13.",
    ),
)


def prompt_for(task: Task, browser: BrowserMemoryManager) -> str:
    """The user prompt of a task: the task, then the browser state (as FlyBrowser builds it)."""
    return f"{task.text}\n\nBrowser state:\n{browser.format_for_prompt()}"


def _fact_in(prompt: str, key: str) -> str | None:
    """The value of ``- key: value`` in the prompt's facts, or ``None``."""
    marker = f"- {key}: "
    for line in prompt.splitlines():
        if line.startswith(marker):
            return line.removeprefix(marker)
    return None


@dataclass
class ScriptedModel:
    """The function of a FunctionModel that plays one task.

    It makes the planned tool calls one per model request; when ``open_page``
    reports a blocked page it first calls ``resolve_obstacle`` with the page's
    hint and opens the page again.  A :class:`Recall` argument is read from the
    facts in the user prompt; when the fact is missing the model gives up.
    Every message list it is sent is kept in :attr:`requests`.
    """

    task: Task
    requests: list[list[ModelMessage]] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    _queue: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._queue = list(self.task.plan)

    @property
    def prompt(self) -> str:
        """The user prompt of the run (its last user prompt)."""
        for message in reversed(self.requests[0] if self.requests else []):
            if isinstance(message, ModelRequest):
                for part in message.parts:
                    if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                        return part.content
        return ""

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests.append(list(messages))
        last = _last_tool_return(messages)
        if last is not None and isinstance(last.content, dict) and last.content.get("blocked"):
            url = last.content["url"]
            self._queue[:0] = [
                (
                    "resolve_obstacle",
                    {
                        "url": url,
                        "obstacle_type": last.content["obstacle"],
                        "resolution": last.content["hint"],
                    },
                ),
                ("open_page", {"url": url}),
            ]
        if not self._queue:
            return ModelResponse(parts=[TextPart(self.task.answer)])
        name, planned = self._queue.pop(0)
        args: dict[str, Any] = {}
        for arg, value in planned.items():
            if isinstance(value, Recall):
                found = _fact_in(self.prompt, value.key)
                if found is None:
                    self._queue.clear()
                    return ModelResponse(parts=[TextPart(f"I do not know {value.key}.")])
                value = found
            args[arg] = value
        self.calls.append((name, args))
        return ModelResponse(
            parts=[ToolCallPart(name, args, tool_call_id=f"call-{len(self.calls)}")]
        )


def _last_tool_return(messages: Sequence[ModelMessage]) -> ToolReturnPart | None:
    last = messages[-1] if messages else None
    if isinstance(last, ModelRequest):
        for part in reversed(last.parts):
            if isinstance(part, ToolReturnPart):
                return part
    return None


# --------------------------------------------------------------------------- the tools


async def open_page(
    ctx: RunContext[BrowserMemoryManager], url: str, method: str = "navigate"
) -> dict[str, Any]:
    """Open ``url`` (reached by ``method``: navigate, click, link); report what it shows."""
    browser = ctx.deps
    page = SITE.get(url)
    if page is None:
        return {"url": url, "error": "404 not found"}
    current = browser.get_current_page()
    came_from = current.url if current is not None and current.url != url else None
    await browser.async_record_visit(
        url, page.title, page.elements, from_url=came_from, method=method
    )
    report: dict[str, Any] = {"url": url, "title": page.title, "elements": page.elements}
    if page.obstacle is not None:
        obstacle, hint = page.obstacle
        known = browser.get_obstacle(url)
        if known is None:
            return {"url": url, "blocked": True, "obstacle": obstacle, "hint": hint}
        report["passed"] = f"{known.obstacle_type} ({known.resolution}, from memory)"
    return report


async def resolve_obstacle(
    ctx: RunContext[BrowserMemoryManager], url: str, obstacle_type: str, resolution: str
) -> str:
    """Get past the obstacle on ``url`` and remember how, for every later visit."""
    await ctx.deps.async_record_obstacle(url, obstacle_type, resolution)
    return f"Resolved {obstacle_type} on {url}: {resolution}"


async def remember(ctx: RunContext[BrowserMemoryManager], key: str, value: str) -> str:
    """Keep a fact for later tasks (it appears in every later prompt)."""
    await ctx.deps.async_set_fact(key, value)
    return f"Remembered {key}."


def build_agent(model: ScriptedModel) -> Agent[BrowserMemoryManager, str]:
    """An agent on ``model`` with the browser tools; its deps are the session's memory."""
    return Agent(
        FunctionModel(model),
        deps_type=BrowserMemoryManager,
        instructions=INSTRUCTIONS,
        tools=[open_page, resolve_obstacle, remember],
    )


# --------------------------------------------------------------------------- one run


@dataclass(frozen=True)
class TaskRun:
    """One task the agent ran: which, what its model saw and did, and its answer."""

    number: int
    task: Task
    model: ScriptedModel
    answer: str


async def run_next_task(browser: BrowserMemoryManager) -> TaskRun | None:
    """Run the session's next task (``None`` once every task of :data:`TASKS` is done).

    The number of turns in the session's conversation says how many tasks are
    done; the run is stored as the next turn.
    """
    memory = browser.memory
    conversation_id = browser.conversation_id
    done = len(await memory.conversation.async_get_turns(conversation_id))
    if done >= len(TASKS):
        return None
    task = TASKS[done]
    model = ScriptedModel(task)
    history = await memory.async_get_message_history(conversation_id)
    result = await build_agent(model).run(
        prompt_for(task, browser), deps=browser, message_history=history
    )
    await memory.async_add_turn(conversation_id, task.text, result.output, result.new_messages())
    return TaskRun(done + 1, task, model, result.output)
