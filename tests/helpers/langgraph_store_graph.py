"""A LangGraph graph with firefly_orm long-term memory (a fake chat model, no network).

:func:`ask` runs a one-node ``StateGraph`` compiled with a
:class:`~firefly_orm.integrations.langgraph.FireflyStore`: the node searches
the user's memories for the question (``runtime.store.search(..., query=)``),
sends them and the question to langchain-core's ``FakeListChatModel``, and
remembers the question (``runtime.store.put``).  Run as a script (``python -m
helpers.langgraph_store_graph STORE LOCATION SCHEMA USER QUESTION ANSWER``) it
opens the store, runs the graph once and prints, as JSON, the contents the
model was sent: what a second process resuming the user's memory sees.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass
from typing import Any, TypedDict

from helpers.adapter_processes import open_store
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from firefly_orm.integrations.langgraph import FireflyStore


class State(TypedDict, total=False):
    """The graph's state: the question in, what the model was sent and its answer out."""

    question: str
    sent: list[Any]
    answer: str


@dataclass
class Context:
    """The run's context: whose memories, and the fake model's answer."""

    user: str
    answer: str


async def chat(state: State, runtime: Runtime[Context]) -> State:
    """Recall the user's memories about the question, ask the model, remember the question."""
    assert runtime.store is not None
    namespace = ("memories", runtime.context.user)
    found = await runtime.store.asearch(namespace, query=state["question"], limit=5)
    prompt = [
        SystemMessage("Known: " + "; ".join(item.value["text"] for item in found)),
        HumanMessage(state["question"]),
    ]
    reply = await FakeListChatModel(responses=[runtime.context.answer]).ainvoke(prompt)
    await runtime.store.aput(namespace, f"q{len(found)}", {"text": state["question"]})
    return {"sent": [m.content for m in prompt], "answer": str(reply.content)}


async def ask(store: FireflyStore, user: str, question: str, answer: str) -> list[Any]:
    """Run the graph once; the contents the model was sent."""
    builder = StateGraph(State, context_schema=Context)
    builder.add_node("chat", chat)
    builder.add_edge(START, "chat")
    builder.add_edge("chat", END)
    graph = builder.compile(store=store)
    result = await graph.ainvoke({"question": question}, context=Context(user, answer))
    assert result["answer"] == answer
    return list(result["sent"])


async def main(
    kind: str, location: str, schema: str, user: str, question: str, answer: str
) -> None:
    """Run the graph once in this process over the test's store; print what the model got."""
    store = open_store(kind, location, schema)
    try:
        print(json.dumps(await ask(FireflyStore(store), user, question, answer)))
    finally:
        await store.async_close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:7]))
