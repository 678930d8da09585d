"""A scripted model for Google ADK (no network), and one turn of an ADK agent on our services.

:class:`EchoLlm` implements ADK's ``BaseLlm``: it answers with every user text
it was sent, so an answer shows what history the runner loaded.  Run as a
module (``python -m helpers.adk_echo STORE LOCATION SCHEMA SESSION PROMPT``) it
opens the store, runs one turn of an ``LlmAgent`` through a ``Runner`` on
:class:`~firefly_orm.integrations.adk.FireflySessionService` and
:class:`~firefly_orm.integrations.adk.FireflyMemoryService`, and prints the
answer: what a second process resuming the session sees.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncGenerator
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.genai import types
from helpers.adapter_processes import open_store

from firefly_orm import LongTermMemory
from firefly_orm.integrations.adk import FireflyMemoryService, FireflySessionService

APP, USER = "echo_app", "ada"


class EchoLlm(BaseLlm):
    """Answers ``"heard: <user text> | <user text> ..."``."""

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        texts = [
            part.text
            for content in llm_request.contents
            if content.role == "user"
            for part in content.parts or []
            if part.text
        ]
        answer = types.Content(role="model", parts=[types.Part(text="heard: " + " | ".join(texts))])
        yield LlmResponse(content=answer)


async def run_turn(store: Any, session_id: str, prompt: str) -> str:
    """One turn of the echo agent in ``session_id`` (created when missing); the answer.

    The agent keeps its answer in the session state (``output_key``), and the
    session goes to long-term memory after the turn.
    """
    sessions = FireflySessionService(store)
    runner = Runner(
        app_name=APP,
        agent=LlmAgent(name="echo", model=EchoLlm(model="echo"), output_key="last_answer"),
        session_service=sessions,
        memory_service=FireflyMemoryService(LongTermMemory(store=store)),
    )
    if await sessions.get_session(app_name=APP, user_id=USER, session_id=session_id) is None:
        await sessions.create_session(app_name=APP, user_id=USER, session_id=session_id)
    message = types.Content(role="user", parts=[types.Part(text=prompt)])
    answer = ""
    async for event in runner.run_async(user_id=USER, session_id=session_id, new_message=message):
        if event.content and event.content.parts and event.content.parts[0].text:
            answer = event.content.parts[0].text
    session = await sessions.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert session is not None and runner.memory_service is not None
    await runner.memory_service.add_session_to_memory(session)
    await runner.close()
    return answer


async def _main(kind: str, location: str, schema: str, session_id: str, prompt: str) -> None:
    store = open_store(kind, location, schema)
    try:
        print(await run_turn(store, session_id, prompt))
    finally:
        await store.async_close()


if __name__ == "__main__":
    asyncio.run(_main(*sys.argv[1:6]))
