"""Agents whose scripted model calls the long-term memory tools; also the second process's script.

Shared by ``tests/integration/test_long_term_tools.py`` and the process it
starts to recall what it remembered.  :class:`ScriptedModel` is the function of
a :class:`~pydantic_ai.models.function.FunctionModel`: it makes the planned
tool calls, one per model request, records every message list it is sent (what
the model sees), and then answers with text.

As a script (``python -m helpers.long_term_agent SPEC`` with ``tests/`` on
``PYTHONPATH``), it opens a NEW store over the test's data through the backend
registry (:mod:`store_backends`), runs one recall agent per user of the spec,
and prints ``{user: <the recall tool return its model received>}`` as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset
from store_backends import BACKENDS, OpenedBackend, Place

from firefly_orm.long_term import LongTermMemory
from firefly_orm.long_term.tools import long_term_toolset

#: What the scripted model answers once its planned calls are made.
FINAL_ANSWER = "done"
#: The namespace the agents of these tests remember into.
NAMESPACE = "agent-memory"


@dataclass
class ScriptedModel:
    """A FunctionModel function that makes ``calls`` (tool name, args) in turn, then answers."""

    calls: list[tuple[str, dict[str, Any]]]
    #: Every message list the model was sent, in order.
    requests: list[list[ModelMessage]] = field(default_factory=list)
    #: The tool definitions the model was offered on its first request.
    tools: list[ToolDefinition] = field(default_factory=list)

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not self.requests:
            self.tools = list(info.function_tools)
        self.requests.append(list(messages))
        step = len(self.requests) - 1
        if step < len(self.calls):
            name, args = self.calls[step]
            return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"call-{step}")])
        return ModelResponse(parts=[TextPart(FINAL_ANSWER)])

    def returns_seen(self) -> list[ToolReturnPart]:
        """The tool returns (and retry prompts, ``outcome='retried'``) the model was sent."""
        return tool_returns(self.requests[-1]) if self.requests else []


def tool_returns(messages: Sequence[ModelMessage]) -> list[ToolReturnPart]:
    """The tool return parts in ``messages``, in order."""
    return [
        part
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]


async def run_calls(
    toolset: AbstractToolset[Any], *calls: tuple[str, dict[str, Any]]
) -> ScriptedModel:
    """Run an agent (async) whose model makes ``calls``; the model, with what it saw."""
    model = ScriptedModel(list(calls))
    agent = Agent(FunctionModel(model), toolsets=[toolset])
    result = await agent.run("Use your memory tools.")
    assert result.output == FINAL_ANSWER
    return model


async def call_tool(toolset: AbstractToolset[Any], name: str, **args: Any) -> ToolReturnPart:
    """The return of one call of tool ``name``, as the model received it."""
    model = await run_calls(toolset, (name, args))
    (part,) = model.returns_seen()
    assert (part.tool_name, part.tool_call_id) == (name, "call-0")
    return part


def results(part: ToolReturnPart) -> list[dict[str, Any]]:
    """The result list a successful ``recall`` call returned."""
    assert part.outcome == "success" and isinstance(part.content, list), part
    return part.content


async def recall_as(store: Any, user_id: str, query: str) -> list[dict[str, Any]]:
    """What a recall agent bound to ``user_id`` on ``store`` receives for ``query``."""
    ltm = LongTermMemory(store=store, namespace=NAMESPACE)
    part = await call_tool(long_term_toolset(ltm, user_id=user_id), "recall", query=query)
    return results(part)


# --------------------------------------------------------------------------- second process


def process_spec(opened: OpenedBackend, users: Sequence[str], query: str) -> str:
    """The JSON argument that makes the script reopen ``opened``'s data and recall as ``users``."""
    place = opened.place
    return json.dumps(
        {
            "backend": opened.name,
            "tmp_path": str(place.tmp_path),
            "name": place.name,
            "postgres_url": place.postgres_url,
            "mongo_url": place.mongo_url,
            "users": list(users),
            "query": query,
        }
    )


async def _recall_in_this_process(spec: dict[str, Any]) -> dict[str, Any]:
    backend = BACKENDS[spec["backend"]]
    place = Place(
        tmp_path=Path(spec["tmp_path"]),
        name=spec["name"],
        postgres_url=spec["postgres_url"],
        mongo_url=spec["mongo_url"],
    )
    store = backend.open(place)
    try:
        return {user: await recall_as(store, user, spec["query"]) for user in spec["users"]}
    finally:
        if backend.aclose is not None:
            await backend.aclose(store)
        elif backend.close is not None:
            backend.close(store)


def main(argv: Sequence[str]) -> None:
    """Print ``{user: recall tool return}`` for the spec in ``argv[0]``."""
    (raw,) = argv
    print(json.dumps(asyncio.run(_recall_in_this_process(json.loads(raw)))))


if __name__ == "__main__":
    main(sys.argv[1:])
