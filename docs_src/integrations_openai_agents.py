import asyncio
from typing import Any

from agents import Agent, Runner, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from firefly_orm import ConversationMemory, SQLiteStore
from firefly_orm.integrations.openai_agents import FireflySession


class Offline(Model):
    """Stands in for a real model (use model="gpt-4.1" and your API key instead)."""

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        said = [i["content"] for i in kwargs["input"] if i.get("role") == "user"]
        text = ResponseOutputText(type="output_text", text=f"You said: {said}", annotations=[])
        answer = ResponseOutputMessage(
            id="msg", type="message", role="assistant", status="completed", content=[text]
        )
        return ModelResponse(output=[answer], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


set_tracing_disabled(True)
agent = Agent(name="support", instructions="Be brief.", model=Offline())


async def turn(prompt: str) -> str:
    store = SQLiteStore("agents.sqlite3")  # any store: PostgreSQL, MongoDB, Redis...
    try:  # a new store and memory each time: what a restarted process has
        memory = ConversationMemory(store=store, max_tokens=8000, user_id="ada")
        session = FireflySession("support-42", memory)  # one session id, one conversation
        result = await Runner.run(agent, prompt, session=session)
        return str(result.final_output)
    finally:
        await store.async_close()


print(asyncio.run(turn("My order is late.")))  # You said: ['My order is late.']
print(asyncio.run(turn("It is order 7.")))  # You said: ['My order is late.', 'It is order 7.']
