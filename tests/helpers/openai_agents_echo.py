"""A scripted model for the OpenAI Agents SDK (no network), and a one-turn agent run.

:class:`EchoModel` implements the SDK's ``Model`` interface: it answers with
every user text it was sent, so an answer shows what history the runner loaded.
Run as a script (``python openai_agents_echo.py STORE LOCATION SCHEMA SESSION PROMPT``)
it opens the store, runs one turn of an agent on a
:class:`~firefly_orm.integrations.openai_agents.FireflySession` and prints the
answer: what a second process resuming the conversation sees.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent, Runner, set_tracing_disabled
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.models.interface import Model
from agents.usage import Usage
from helpers.adapter_processes import open_store
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from firefly_orm import ConversationMemory
from firefly_orm.integrations.openai_agents import FireflySession

set_tracing_disabled(True)  # no trace export (it would need an API key and the network)


def user_texts(items: str | list[TResponseInputItem]) -> list[str]:
    """The text of each user message of a model input, in order."""
    if isinstance(items, str):
        return [items]
    found: list[str] = []
    for item in items:
        data: Any = item
        if data.get("role") == "user" and isinstance(data.get("content"), str):
            found.append(data["content"])
    return found


class EchoModel(Model):
    """Answers ``"heard: <user text> | <user text> ..."``; keeps every input it got."""

    def __init__(self) -> None:
        self.inputs: list[str | list[TResponseInputItem]] = []

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        """One assistant message naming every user text of the input."""
        given = kwargs["input"] if "input" in kwargs else args[1]
        self.inputs.append(given)
        text = "heard: " + " | ".join(user_texts(given))
        message = ResponseOutputMessage(
            id=f"msg_{len(self.inputs)}",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        """Not used by these tests (``Runner.run`` does not stream)."""
        raise NotImplementedError("EchoModel does not stream")


async def run_turn(session: FireflySession, prompt: str) -> str:
    """One agent turn on ``session``; the final answer."""
    agent = Agent(name="echo", instructions="Repeat.", model=EchoModel())
    result = await Runner.run(agent, prompt, session=session)
    return str(result.final_output)


async def main(kind: str, location: str, schema: str, session_id: str, prompt: str) -> None:
    """Resume ``session_id`` in this process, run one turn, print the answer."""
    store = open_store(kind, location, schema)
    try:
        memory = ConversationMemory(store=store, max_tokens=None)
        print(await run_turn(FireflySession(session_id, memory), prompt))
    finally:
        await store.async_close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
