"""An ADK agent whose sessions and memory live in SQLite, resumed by a second runner."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.genai import types

from firefly_orm import LongTermMemory, SQLiteStore
from firefly_orm.integrations.adk import FireflyMemoryService, FireflySessionService


class CountingModel(BaseLlm):
    """A stand-in model (no network): says how many user messages it was sent."""

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        said = sum(1 for c in llm_request.contents if c.role == "user")
        text = f"That makes {said} message(s) from you."
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


async def turn(prompt: str) -> str:
    """One turn on a new store and runner: nothing is kept in this process between turns."""
    store = SQLiteStore("data/adk.sqlite3")
    sessions = FireflySessionService(store)
    runner = Runner(
        app_name="support",
        agent=LlmAgent(name="helper", model=CountingModel(model="counting")),
        session_service=sessions,
        memory_service=FireflyMemoryService(LongTermMemory(store=store)),
    )
    if await sessions.get_session(app_name="support", user_id="ada", session_id="s1") is None:
        await sessions.create_session(app_name="support", user_id="ada", session_id="s1")
    message = types.Content(role="user", parts=[types.Part(text=prompt)])
    reply = ""
    async for event in runner.run_async(user_id="ada", session_id="s1", new_message=message):
        if event.content and event.content.parts and event.content.parts[0].text:
            reply = event.content.parts[0].text
    session = await sessions.get_session(app_name="support", user_id="ada", session_id="s1")
    assert session is not None
    await runner.memory_service.add_session_to_memory(session)  # type: ignore[union-attr]
    await runner.close()
    await store.async_close()
    return reply


async def main() -> None:
    print(await turn("Hello, I am Ada."))
    print(await turn("Do you remember me?"))  # a new runner: the session resumes
    store = SQLiteStore("data/adk.sqlite3")
    memory = FireflyMemoryService(LongTermMemory(store=store))
    found = await memory.search_memory(app_name="support", user_id="ada", query="Ada")
    texts = [m.content.parts[0].text for m in found.memories if m.content.parts]
    print(texts)  # ['Hello, I am Ada.']
    await store.async_close()


asyncio.run(main())
