import uuid
from dataclasses import dataclass
from typing import TypedDict

from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime

from firefly_orm import SQLiteStore
from firefly_orm.integrations.langgraph import FireflyStore


class State(TypedDict, total=False):
    question: str
    known: list[str]


@dataclass
class Context:
    user: str


def remember(state: State, runtime: Runtime[Context]) -> State:
    assert runtime.store is not None
    memories = ("memories", runtime.context.user)  # a LangGraph namespace
    found = runtime.store.search(memories, query=state["question"], limit=3)  # full-text
    runtime.store.put(memories, uuid.uuid4().hex, {"text": state["question"]})
    return {"known": [item.value["text"] for item in found]}


def run(question: str) -> list[str]:
    store = SQLiteStore("langgraph.sqlite3")  # any store: PostgreSQL, MongoDB, Redis...
    try:  # a new store and graph each time: what a restarted process has
        builder = StateGraph(State, context_schema=Context)
        builder.add_node("remember", remember)
        builder.add_edge(START, "remember")
        graph = builder.compile(store=FireflyStore(store, ttl={"default_ttl": 60 * 24 * 30}))
        result = graph.invoke({"question": question}, context=Context(user="ada"))
        return list(result["known"])
    finally:
        store.close()


print(run("I like spicy ramen"))  # []
print(run("Where can I get ramen?"))  # ['I like spicy ramen']
