"""``firefly_orm.pydantic_ai``: a pydantic-ai agent run on a MemoryManager in one call.

The agents run on a :class:`~pydantic_ai.models.function.FunctionModel` whose
function (:class:`ScriptedModel`) records every message list it is sent, so
the tests check what the model actually received (history, summary, recalled
items, facts) and what was stored (the run's new messages only).

Every test runs on each memory-layer backend (process memory, files, SQLite,
PostgreSQL, MongoDB; conftest's ``layer_backend``): a failed, cancelled or
abandoned run leaves the conversation exactly as it was (its export is
equal), async runs perform no blocking memory operation, users and delegated
agents are isolated, and a new store object over the same data (a restarted
worker) resumes the conversation.
"""

from __future__ import annotations

import asyncio
import doctest
import itertools
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from store_backends import OpenedBackend

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import (
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

import firefly_orm.pydantic_ai as integration
from firefly_orm.assemble import LONG_TERM_CONTEXT_PREFIX
from firefly_orm.bridges import _steps as steps
from firefly_orm.conversation import ConversationTurn
from firefly_orm.conversation._context import SUMMARY_CONTEXT_PREFIX
from firefly_orm.errors import ConversationNotFoundError, EntryValidationError
from firefly_orm.manager import MemoryManager
from firefly_orm.pydantic_ai import (
    DELEGATION_SCOPE_PREFIX,
    MemoryAgent,
    MemoryDeps,
    delegate,
    prompt_text,
    response_text,
    usage_metadata,
)
from firefly_orm.store import InMemoryStore

INSTRUCTIONS = "You are a terse support agent."
#: A prompt ``remember <key>=<value>`` makes the model call the ``set_fact`` tool.
REMEMBER = "remember "
#: A prompt starting with this makes the model call a tool that raises.
EXPLODE = "explode"


# --------------------------------------------------------------------------- the model


def user_prompts(messages: Sequence[ModelMessage]) -> list[str]:
    """The text user prompts in ``messages``, in order."""
    return [
        str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart)
    ]


def system_texts(messages: Sequence[ModelMessage]) -> list[str]:
    """The system prompt texts in ``messages``, in order."""
    return [
        part.content
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, SystemPromptPart)
    ]


def seen_text(messages: Sequence[ModelMessage]) -> str:
    """Everything ``messages`` say, one part per line (prompts, answers, tool traffic)."""
    lines: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, SystemPromptPart | UserPromptPart | TextPart):
                lines.append(str(part.content))
            elif isinstance(part, ToolCallPart):
                lines.append(f"{part.tool_name}({part.args_as_json_str()})")
            elif isinstance(part, ToolReturnPart):
                lines.append(str(part.content))
    return "\n".join(lines)


def dump(messages: Sequence[Any]) -> Any:
    return ModelMessagesTypeAdapter.dump_python(list(messages), mode="json")


class ScriptedModel:
    """A FunctionModel function that records what it is sent and answers by script.

    * ``remember <key>=<value>``: calls the ``set_fact`` tool, then answers
      with the tool's return;
    * ``explode...``: calls the ``explode`` tool (which raises);
    * anything else: ``answer <n>`` (``n`` counts the model calls).

    ``fail_with`` makes the next call raise; ``hang`` makes it wait forever
    (after setting ``entered``), so a test can cancel the run there.
    """

    def __init__(self) -> None:
        self.calls: list[list[ModelMessage]] = []
        self.fail_with: Exception | None = None
        self.hang = False
        self.entered = asyncio.Event()
        self._ids = itertools.count()

    async def _gate(self, messages: list[ModelMessage]) -> None:
        self.calls.append(list(messages))
        if self.fail_with is not None:
            error, self.fail_with = self.fail_with, None
            raise error
        if self.hang:
            self.entered.set()
            await asyncio.Event().wait()

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await self._gate(messages)
        last = messages[-1]
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(content=f"done: {returns[0].content}")])
        prompt = user_prompts(messages)[-1]
        if prompt.startswith(REMEMBER):
            key, value = prompt.removeprefix(REMEMBER).split("=", 1)
            return self._call("set_fact", {"key": key, "value": value})
        if prompt.startswith(EXPLODE):
            return self._call("explode", {})
        return ModelResponse(parts=[TextPart(content=f"answer {len(self.calls)}")])

    async def stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        await self._gate(messages)
        for word in ("streamed ", "answer ", str(len(self.calls))):
            yield word
            if self.hang:  # set by a test while the stream runs
                self.entered.set()
                await asyncio.Event().wait()

    def _call(self, tool: str, args: dict[str, Any]) -> ModelResponse:
        call = ToolCallPart(tool_name=tool, args=args, tool_call_id=f"call-{next(self._ids)}")
        return ModelResponse(parts=[call])


def make_agent(model: ScriptedModel) -> Agent[MemoryDeps, str]:
    """An agent on ``model`` whose tools reach the run's memory through ``MemoryDeps``."""
    agent = Agent(
        FunctionModel(model, stream_function=model.stream),
        deps_type=MemoryDeps,
        instructions=INSTRUCTIONS,
    )

    @agent.tool
    async def set_fact(ctx: RunContext[MemoryDeps], key: str, value: str) -> str:
        await ctx.deps.memory.async_set_fact(key, value)
        return f"saved {key} in {ctx.deps.conversation_id}"

    @agent.tool_plain
    def explode() -> str:
        raise RuntimeError("the tool broke")

    return agent


#: The memory agent of these tests.
Support = MemoryAgent[MemoryDeps, str]


def memory_agent(store: Any, model: ScriptedModel, **manager_options: Any) -> Support:
    return MemoryAgent(make_agent(model), memory=MemoryManager(store=store, **manager_options))


# --------------------------------------------------------------------------- one call


def test_run_sync_stores_the_new_messages_as_one_turn(layer_backend: OpenedBackend) -> None:
    model = ScriptedModel()
    support = memory_agent(layer_backend.store, model)
    first = support.run_sync("Hello, my order is late.", user_id="ada")
    cid = first.conversation_id
    second = support.run_sync("Any news?", conversation_id=cid, user_id="ada")

    # the model got the earlier turn as history, then the new prompt
    assert user_prompts(model.calls[-1]) == ["Hello, my order is late.", "Any news?"]
    assert model.calls[-1][:2] == first.new_messages()
    turns = support.memory.conversation.get_turns(cid)
    assert [t.turn_id for t in turns] == [0, 1]
    for turn, result, prompt in zip(
        turns, (first, second), ("Hello, my order is late.", "Any news?"), strict=True
    ):
        assert (turn.user_prompt, turn.assistant_response) == (prompt, result.output)
        assert dump(turn.raw_messages) == dump(result.new_messages())
        assert turn.metadata["usage"] == usage_metadata(result.usage)
        assert turn.metadata["usage"]["total_tokens"] == result.usage.total_tokens > 0
        assert turn.metadata["run_id"] == result.run_id
    assert support.memory.user_conversations("ada") == [cid]

    # a restarted worker: a new store object, a new manager, the same conversation
    again = memory_agent(layer_backend.reopen(), model)
    third = again.run_sync("Thanks.", conversation_id=cid, user_id="ada")
    assert third.conversation_id == cid
    assert user_prompts(model.calls[-1]) == ["Hello, my order is late.", "Any news?", "Thanks."]
    assert [t.turn_id for t in again.memory.conversation.get_turns(cid)] == [0, 1, 2]


async def test_async_run_gets_summary_recalled_items_and_facts(store: Any) -> None:
    model = ScriptedModel()
    summaries: list[list[ConversationTurn]] = []

    def summarize(turns: list[ConversationTurn]) -> str:
        summaries.append(turns)
        return "Earlier the customer said: " + " / ".join(
            t.user_prompt for t in turns if t.turn_id >= 0
        )

    budget = 45  # about two turns: older ones are evicted and summarized
    support = MemoryAgent(
        make_agent(model),
        memory=MemoryManager(
            store=store,
            max_conversation_tokens=budget,
            summarize_threshold=budget,
            summarizer=summarize,
        ),
        max_tokens=1_000,  # the context may hold more than the stored budget
    )
    memory = support.memory_for("ada")
    await memory.async_remember("Ada's parcel goes to the Leeds depot", importance=0.9)
    result = await support.run("remember order=A-1042", user_id="ada")
    cid = result.conversation_id
    prompts = [
        "My parcel has not arrived at my flat in Leeds yet, can you check it?",
        "It was supposed to come last Tuesday before noon, with the courier.",
        "I also want to change the delivery address to my office building please.",
    ]
    for prompt in prompts:
        await support.run(prompt, conversation_id=cid, user_id="ada")
    assert summaries, "expected the small budget to evict and summarize turns"
    summary = await memory.conversation.async_get_summary(cid)
    assert summary is not None and summary.startswith("Earlier the customer said:")

    await support.run("Where does my parcel go?", conversation_id=cid, user_id="ada")
    sent = model.calls[-1]
    systems = system_texts(sent)
    # summary first, then the recalled item, then the facts, then the newest turns
    assert systems[0] == f"{SUMMARY_CONTEXT_PREFIX}{summary}"
    assert systems[1] == f"{LONG_TERM_CONTEXT_PREFIX}\n- Ada's parcel goes to the Leeds depot"
    assert systems[2] == "Working Memory:\n- order: A-1042"
    assert user_prompts(sent)[-1] == "Where does my parcel go?"
    assert prompts[-1] in user_prompts(sent)

    # what was stored: the runs' own messages, never the context built from memory
    for turn in await memory.conversation.async_get_turns(cid):
        assert system_texts(turn.raw_messages) == []
        assert not any(
            p.content == INSTRUCTIONS
            for m in turn.raw_messages
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, SystemPromptPart)
        )
        assert user_prompts(turn.raw_messages) == [turn.user_prompt]


async def test_run_stream_stores_the_turn_once_streamed(store: Any) -> None:
    model = ScriptedModel()
    support = memory_agent(store, model)
    first = await support.run("Hello", user_id="ada")
    cid = first.conversation_id
    chunks: list[str] = []
    async with support.run_stream("Stream it", conversation_id=cid, user_id="ada") as stream:
        assert stream.conversation_id == cid
        async for text in stream.stream_text(delta=True, debounce_by=None):
            chunks.append(text)
        new_messages = stream.new_messages()
    assert "".join(chunks) == "streamed answer 2"
    assert user_prompts(model.calls[-1]) == ["Hello", "Stream it"]
    turns = await support.memory.conversation.async_get_turns(cid)
    assert [(t.user_prompt, t.assistant_response) for t in turns] == [
        ("Hello", "answer 1"),
        ("Stream it", "streamed answer 2"),
    ]
    assert dump(turns[-1].raw_messages) == dump(new_messages)
    assert turns[-1].metadata["usage"]["requests"] == 1


async def test_iter_stores_the_turn_once_finished(store: Any) -> None:
    model = ScriptedModel()
    support = memory_agent(store, model)
    nodes = []
    async with support.iter("remember plan=gold", user_id="ada") as agent_run:
        async for node in agent_run:
            nodes.append(type(node).__name__)
    result = agent_run.result
    assert result is not None and result.output.startswith("done: saved plan")
    assert "CallToolsNode" in nodes
    (turn,) = await support.memory.conversation.async_get_turns(result.conversation_id)
    assert dump(turn.raw_messages) == dump(result.new_messages())
    assert turn.metadata["usage"]["tool_calls"] == 1
    assert turn.metadata["usage"]["requests"] == 2


# --------------------------------------------------------------------------- failures store nothing


async def model_raises(support: Support, model: ScriptedModel, cid: Any) -> None:
    model.fail_with = RuntimeError("the model is down")
    with pytest.raises(RuntimeError, match="the model is down"):
        await support.run("Will this be kept?", conversation_id=cid, user_id="ada")


async def tool_raises(support: Support, model: ScriptedModel, cid: Any) -> None:
    with pytest.raises(RuntimeError, match="the tool broke"):
        await support.run(EXPLODE, conversation_id=cid, user_id="ada")


async def cancelled(support: Support, model: ScriptedModel, cid: Any) -> None:
    await cancel_when_entered(
        model, support.run("Will this be kept?", conversation_id=cid, user_id="ada")
    )


async def cancelled_while_streaming(support: Support, model: ScriptedModel, cid: Any) -> None:
    async def consume() -> None:
        async with support.run_stream("Stream it", conversation_id=cid, user_id="ada") as stream:
            async for _ in stream.stream_text(delta=True, debounce_by=None):
                model.hang = True  # the stream stops after its first chunk

    await cancel_when_entered(model, consume(), hang=False)


async def stream_abandoned(support: Support, model: ScriptedModel, cid: Any) -> None:
    async with support.run_stream("Stream it", conversation_id=cid, user_id="ada") as stream:
        async for _ in stream.stream_text(delta=True, debounce_by=None):
            break  # the caller stops reading


async def stream_never_read(support: Support, model: ScriptedModel, cid: Any) -> None:
    async with support.run_stream("Stream it", conversation_id=cid, user_id="ada"):
        pass


async def stream_block_raises(support: Support, model: ScriptedModel, cid: Any) -> None:
    with pytest.raises(KeyError):
        async with support.run_stream("Stream it", conversation_id=cid, user_id="ada") as stream:
            await stream.get_output()
            raise KeyError("the caller failed after the stream")


async def iter_stopped_early(support: Support, model: ScriptedModel, cid: Any) -> None:
    async with support.iter("Will this be kept?", conversation_id=cid, user_id="ada") as run:
        async for node in run:
            if Agent.is_call_tools_node(node):  # the model has answered
                break


async def cancel_when_entered(
    model: ScriptedModel, work: Awaitable[Any], *, hang: bool = True
) -> None:
    """Run ``work`` until the model is entered and hangs, then cancel it."""
    model.entered.clear()
    model.hang = hang
    task = asyncio.ensure_future(work)
    try:
        await asyncio.wait_for(model.entered.wait(), timeout=60)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        model.hang = False


FAILURES: dict[
    str, Callable[[MemoryAgent[MemoryDeps, str], ScriptedModel, Any], Awaitable[None]]
] = {
    f.__name__: f
    for f in (
        model_raises,
        tool_raises,
        cancelled,
        cancelled_while_streaming,
        stream_abandoned,
        stream_never_read,
        stream_block_raises,
        iter_stopped_early,
    )
}


@pytest.mark.parametrize("how", sorted(FAILURES))
async def test_a_failed_or_cancelled_run_stores_nothing(store: Any, how: str) -> None:
    model = ScriptedModel()
    support = memory_agent(store, model)
    conversation = support.memory.conversation
    first = await support.run("remember order=A-1042", user_id="ada")
    cid = first.conversation_id
    before = await conversation.async_export_conversation(cid)
    conversations = await conversation.async_conversation_ids()
    calls = len(model.calls)

    await FAILURES[how](support, model, cid)
    assert len(model.calls) > calls, "the failing run reached the model"
    assert await conversation.async_export_conversation(cid) == before
    # a failing first run of a new conversation leaves no conversation behind
    await FAILURES[how](support, model, None)
    assert await conversation.async_conversation_ids() == conversations
    assert await support.memory.async_user_conversations("ada") == [cid]

    # the conversation goes on as if nothing had happened
    after = await support.run("Still there?", conversation_id=cid, user_id="ada")
    turns = await conversation.async_get_turns(cid)
    assert [t.turn_id for t in turns] == [0, 1]
    assert user_prompts(model.calls[-1]) == ["remember order=A-1042", "Still there?"]
    assert turns[-1].assistant_response == after.output


def test_a_failed_sync_run_stores_nothing(store: Any) -> None:
    model = ScriptedModel()
    support = memory_agent(store, model)
    cid = support.run_sync("Hello", user_id="ada").conversation_id
    before = support.memory.conversation.export_conversation(cid)
    model.fail_with = RuntimeError("the model is down")
    with pytest.raises(RuntimeError, match="the model is down"):
        support.run_sync("Will this be kept?", conversation_id=cid, user_id="ada")
    with pytest.raises(RuntimeError, match="the tool broke"):
        support.run_sync(EXPLODE, conversation_id=cid, user_id="ada")
    assert support.memory.conversation.export_conversation(cid) == before


# --------------------------------------------------------------------------- async paths


async def test_async_runs_perform_no_blocking_memory_operation(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every memory operation of an async run (tools included) goes through ``arun``."""

    def blocking(store: Any, op: Any) -> Any:
        op.close()
        raise AssertionError("a blocking memory operation inside an async run")

    monkeypatch.setattr(steps, "run", blocking)
    model = ScriptedModel()
    support = memory_agent(store, model)
    result = await support.run("remember order=A-1042", user_id="ada")
    cid = result.conversation_id
    async with support.run_stream("Stream it", conversation_id=cid, user_id="ada") as stream:
        await stream.get_output()
    async with support.iter("remember plan=gold", conversation_id=cid, user_id="ada") as run:
        async for _ in run:
            pass
    memory = support.memory_for("ada")
    assert await memory.async_get_fact("plan") == "gold"
    assert len(await memory.conversation.async_get_turns(cid)) == 3
    with pytest.raises(AssertionError, match="blocking"):
        memory.get_fact("plan")  # the patch is in force


# --------------------------------------------------------------------------- tools and users


async def test_a_tool_sets_a_fact_the_next_run_sees(store: Any) -> None:
    model = ScriptedModel()
    support = memory_agent(store, model)
    result = await support.run("remember order=A-1042", user_id="ada")
    cid = result.conversation_id
    assert result.output == f"done: saved order in {cid}"
    assert await support.memory_for("ada").async_get_fact("order") == "A-1042"
    await support.run("What is my order?", conversation_id=cid, user_id="ada")
    assert "Working Memory:\n- order: A-1042" in system_texts(model.calls[-1])


async def test_users_never_see_each_other(store: Any) -> None:
    model = ScriptedModel()
    support = memory_agent(store, model)
    ada = await support.run("remember drink=green tea", user_id="ada")
    await support.memory_for("ada").async_remember("Ada's manager is Grace", importance=0.9)
    ada_cid = ada.conversation_id

    bob = await support.run("Who is my manager? Which drink do I like?", user_id="bob")
    bob_cid = bob.conversation_id
    bob_saw = seen_text(model.calls[-1])
    for secret in ("green tea", "Grace", "remember drink"):
        assert secret not in bob_saw
    await support.run("Who is my manager?", conversation_id=ada_cid, user_id="ada")
    ada_saw = seen_text(model.calls[-1])
    assert "Grace" in ada_saw and "- drink: green tea" in ada_saw

    # bob cannot run on ada's conversation: refused before the model, nothing written
    calls = len(model.calls)
    before = await support.memory.conversation.async_export_conversation(ada_cid)
    with pytest.raises(ConversationNotFoundError, match="not found"):
        await support.run("Show me", conversation_id=ada_cid, user_id="bob")
    support_sync = memory_agent(store, model)
    with pytest.raises(ConversationNotFoundError, match="not found"):
        await asyncio.to_thread(
            support_sync.run_sync, "Show me", conversation_id=ada_cid, user_id="bob"
        )
    assert len(model.calls) == calls
    assert await support.memory.conversation.async_export_conversation(ada_cid) == before

    memory = support.memory
    assert await memory.async_user_conversations("ada") == [ada_cid]
    assert await memory.async_user_conversations("bob") == [bob_cid]
    assert await support.memory_for("bob").async_get_fact("drink") is None
    assert await memory.async_get_fact("drink") is None  # the shared scope has none either
    ada_view = support.memory_for("ada")
    assert (ada_view.user_id, ada_view.working.scope_id) == ("ada", "default")
    assert ada_view.working.namespace != memory.working.namespace

    # everything ada left goes with erase_user; bob keeps his
    await memory.async_erase_user("ada")
    assert await support.memory_for("ada").async_get_fact("drink") is None
    assert await support.memory_for("ada").async_recall("manager Grace") == []
    assert await memory.conversation.async_get_turns(ada_cid) == []
    assert len(await memory.conversation.async_get_turns(bob_cid)) == 1


async def test_a_manager_bound_to_a_user_serves_that_user_only(store: Any) -> None:
    model = ScriptedModel()
    support = MemoryAgent(make_agent(model), memory=MemoryManager(store=store, user_id="ada"))
    assert support.memory_for("ada") is support.memory
    assert support.memory_for(None) is support.memory
    result = await support.run("remember drink=tea")  # runs for ada
    assert await support.memory.async_user_conversations("ada") == [result.conversation_id]
    assert await support.memory.async_get_fact("drink") == "tea"
    with pytest.raises(EntryValidationError, match="belongs to user 'ada'"):
        await support.run("Hello", user_id="bob")


# --------------------------------------------------------------------------- delegation


async def test_delegated_agents_share_the_conversation_not_their_facts(store: Any) -> None:
    manager = MemoryManager(store=store)
    research_model, writer_model = ScriptedModel(), ScriptedModel()
    researcher = delegate(manager, make_agent(research_model), name="researcher")
    writer = delegate(manager, make_agent(writer_model), name="writer")
    assert researcher.memory.working.scope_id == f"{DELEGATION_SCOPE_PREFIX}researcher"
    assert researcher.memory.parent is manager and writer.memory.parent is manager

    found = await researcher.run("remember finding=refunds take five days")
    cid = found.conversation_id
    await writer.run("remember tone=friendly", conversation_id=cid)
    await writer.run("Draft the reply", conversation_id=cid)

    # the conversation is shared: the writer's model got the researcher's turn
    writer_saw = writer_model.calls[-1]
    assert user_prompts(writer_saw)[:1] == ["remember finding=refunds take five days"]
    # the facts are not: each agent sees its own working memory only
    assert "Working Memory:\n- tone: friendly" in system_texts(writer_saw)
    assert not any("finding" in text for text in system_texts(writer_saw))
    await researcher.run("What did we find?", conversation_id=cid)
    research_saw = system_texts(research_model.calls[-1])
    assert "Working Memory:\n- finding: refunds take five days" in research_saw
    assert not any("tone" in text for text in research_saw)
    assert await researcher.memory.async_get_fact("tone") is None
    assert await writer.memory.async_get_fact("finding") is None
    assert await manager.async_get_fact("finding") is None

    # one conversation, every agent's turns, each marked with its agent
    turns = await manager.conversation.async_get_turns(cid)
    assert [t.metadata["agent"] for t in turns] == ["researcher", "writer", "writer", "researcher"]
    # a delegated agent's per-user runs use the user's part of its scope
    ada_view = researcher.memory_for("ada")
    assert ada_view.working.scope_id == f"{DELEGATION_SCOPE_PREFIX}researcher"
    assert ada_view.working.user_id == "ada"
    with pytest.raises(EntryValidationError, match="name"):
        delegate(manager, make_agent(ScriptedModel()), name=" ")


# --------------------------------------------------------------------------- deps and arguments


@dataclass(frozen=True)
class AppDeps:
    """An app's own deps type that carries the run's memory."""

    memory: MemoryDeps
    tenant: str


async def test_deps_of_the_apps_own_type() -> None:
    model = ScriptedModel()
    agent: Agent[AppDeps, str] = Agent(FunctionModel(model), deps_type=AppDeps)

    @agent.tool
    async def set_fact(ctx: RunContext[AppDeps], key: str, value: str) -> str:
        await ctx.deps.memory.memory.async_set_fact(key, f"{value} ({ctx.deps.tenant})")
        return "saved"

    support = MemoryAgent(
        agent,
        memory=MemoryManager(),
        deps_factory=lambda memory: AppDeps(memory=memory, tenant="acme"),
    )
    result = await support.run("remember plan=gold", user_id="ada")
    assert await support.memory_for("ada").async_get_fact("plan") == "gold (acme)"
    # explicit deps win over the factory
    other = AppDeps(memory=MemoryDeps(support.memory, result.conversation_id), tenant="other")
    await support.run("remember plan=silver", deps=other)
    assert await support.memory.async_get_fact("plan") == "silver (other)"


def test_an_agent_without_memory_deps_gets_none() -> None:
    support = MemoryAgent(Agent(TestModel(custom_output_text="Hi!")), memory=MemoryManager())
    assert support.run_sync("Hello").output == "Hi!"


def test_bad_arguments_are_refused_and_write_nothing() -> None:
    model = ScriptedModel()
    support = memory_agent(InMemoryStore(), model)
    with pytest.raises(TypeError, match="message_history"):
        support.run_sync("Hello", message_history=[])
    with pytest.raises(TypeError, match="conversation"):
        support.run_sync("Hello", conversation=None)
    with pytest.raises(TypeError, match="user prompt"):
        support.run_sync(None)  # type: ignore[arg-type]
    with pytest.raises(EntryValidationError, match="new conversation"):
        support.run_sync("Hello", conversation_id="new")
    for bad_id in ("", "a\x00b"):
        with pytest.raises(EntryValidationError, match="conversation_id"):
            support.run_sync("Hello", conversation_id=bad_id)
    with pytest.raises(EntryValidationError, match="user_id"):
        support.run_sync("Hello", user_id="")
    assert model.calls == []
    assert support.memory.conversation.conversation_ids == []

    agent = make_agent(model)
    manager = MemoryManager()
    with pytest.raises(TypeError, match="pydantic-ai agent"):
        MemoryAgent("not an agent", memory=manager)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="MemoryManager"):
        MemoryAgent(agent, memory="not a manager")  # type: ignore[arg-type]
    bad_options: list[dict[str, Any]] = [
        {"max_tokens": 0},
        {"max_messages": 0},
        {"recall_limit": -1},
        {"min_importance": float("nan")},
        {"shares": {"long_term": 0.5}},
    ]
    for options in bad_options:
        with pytest.raises(EntryValidationError):
            MemoryAgent(agent, memory=manager, **options)


def test_turn_texts() -> None:
    assert prompt_text("hello") == "hello"
    image = ImageUrl(url="https://example.com/parcel.png")
    assert prompt_text(["look at this", image]) == "look at this\n[ImageUrl]"
    assert response_text("plain") == "plain"
    assert response_text({"order": "A-1042", "late": True}) == '{"order":"A-1042","late":true}'
    opaque = object()
    assert response_text(opaque) == str(opaque)


def test_without_the_extra_the_import_names_it() -> None:
    code = (
        "import sys; sys.modules['pydantic_ai'] = None\n"
        "from firefly_orm.errors import MissingExtraError\n"
        "try:\n"
        "    import firefly_orm.pydantic_ai\n"
        "except MissingExtraError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "pip install 'firefly-orm[pydantic-ai]'" in done.stdout


def test_the_docstring_example_runs() -> None:
    failures, tried = doctest.testmod(integration, verbose=False)
    assert (failures, tried > 0) == (0, True)
