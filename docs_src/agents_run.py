import asyncio

from pydantic_ai import Agent, RunContext
from pydantic_ai.models.test import TestModel

from firefly_orm import MemoryManager, SQLiteStore
from firefly_orm.pydantic_ai import MemoryAgent, MemoryDeps

# Any model ("openai:gpt-4o", ...); TestModel answers offline and calls each tool once.
agent = Agent(TestModel(), deps_type=MemoryDeps, instructions="You are a support agent.")


@agent.tool
async def note_order(ctx: RunContext[MemoryDeps], order_id: str) -> str:
    """Remember the customer's order id."""
    await ctx.deps.memory.async_set_fact("order_id", order_id)  # this user's facts
    return "noted"


store = SQLiteStore("data/agents.sqlite3")
support = MemoryAgent(agent, memory=MemoryManager(store=store, max_conversation_tokens=4_000))


async def main() -> None:
    # loads the context, runs, stores the new messages as one turn
    first = await support.run("My order A-1042 is late.", user_id="ada")
    cid = first.conversation_id  # a new conversation of ada's
    await support.run("Any news?", conversation_id=cid, user_id="ada")
    async with support.run_stream("Thanks!", conversation_id=cid, user_id="ada") as stream:
        async for _text in stream.stream_text():
            pass  # stored once fully streamed

    turns = await support.memory.conversation.async_get_turns(cid)
    assert [t.user_prompt for t in turns] == ["My order A-1042 is late.", "Any news?", "Thanks!"]
    print(turns[0].metadata["usage"]["total_tokens"])  # tokens the first run used
    assert await support.memory_for("ada").async_get_fact("order_id") is not None
    assert await support.memory_for("bob").async_get_fact("order_id") is None
    assert await support.memory.async_user_conversations("ada") == [cid]
    await store.async_close()


asyncio.run(main())
