"""The knowledge graph's agent tools (pydantic-ai) and MCP tools (issue 30), SQLite and MongoDB."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from knowledge_stores import open_graph_store
from mcp.client import Client
from mcp_types import CallToolResult
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from firefly_orm.errors import EntryValidationError
from firefly_orm.knowledge import KnowledgeGraph, knowledge_toolset
from firefly_orm.manager import MemoryManager
from firefly_orm.mcp import build_server
from firefly_orm.protocols import MemoryStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)
BETWEEN = T0 + timedelta(days=10)


@pytest.fixture(params=["sqlite", pytest.param("mongo", marks=pytest.mark.mongo)])
def graph(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KnowledgeGraph]:
    """Ann moved to Berlin (T0), then to Munich (T0 + 30 days); Munich is in Bavaria."""
    for store in open_graph_store(request, tmp_path):
        graph = KnowledgeGraph(store)
        graph.add_fact("ann", "user", "lives_in", "Berlin", evidence="t1", observed_at=T0)
        moved = T0 + timedelta(days=30)
        graph.add_fact("ann", "user", "lives_in", "Munich", evidence="t2", observed_at=moved)
        graph.add_fact("ann", "Munich", "located_in", "Bavaria", observed_at=moved)
        yield graph


def _calls(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """First turn: call the tools (one call with a depth out of range); then answer."""
    if len(messages) == 1:
        return ModelResponse(
            parts=[
                ToolCallPart("facts_about", {"entity": "user"}, tool_call_id="now"),
                ToolCallPart(
                    "facts_about",
                    {"entity": "USER", "as_of": BETWEEN.isoformat()},
                    tool_call_id="then",
                ),
                ToolCallPart("related", {"entity": "user", "depth": 2}, tool_call_id="near"),
                ToolCallPart("related", {"entity": "nobody"}, tool_call_id="none"),
                ToolCallPart("related", {"entity": "user", "depth": 9}, tool_call_id="deep"),
            ]
        )
    return ModelResponse(parts=[TextPart("done")])


def test_agent_tools_answer_now_and_as_of(graph: KnowledgeGraph) -> None:
    agent = Agent(FunctionModel(_calls), toolsets=[knowledge_toolset(graph, user_id="ann")])
    result = agent.run_sync("where does the user live?")
    returned: dict[str, Any] = {}
    for message in result.all_messages():
        for part in message.parts:
            if isinstance(part, ToolReturnPart | RetryPromptPart):
                returned[str(part.tool_call_id)] = part.content
    now, then = returned["now"], returned["then"]
    assert [(f["predicate"], f["object"], f["valid_to"]) for f in now] == [
        ("lives_in", "Munich", None)
    ]
    assert [(f["object"], f["evidence"]) for f in then] == [("Berlin", ["t1"])]
    assert then[0]["valid_to"] == (T0 + timedelta(days=30)).isoformat()
    near = [(e["name"], e["distance"]) for e in returned["near"]]
    assert near == [("Munich", 1), ("Bavaria", 2)]
    assert returned["none"] == []
    assert "depth must be from 1 to 3, got 9" in str(returned["deep"])  # the model is told
    # Another user's toolset sees nothing of Ann's graph.
    bob = knowledge_toolset(graph, user_id="bob")
    other = Agent(FunctionModel(_calls), toolsets=[bob]).run_sync("where?")
    contents = [
        p.content for m in other.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)
    ]
    assert [c for c in contents if not isinstance(c, str)] == [[], [], [], []]
    with pytest.raises(EntryValidationError):
        knowledge_toolset(graph, user_id="")


async def _call(client: Client, tool: str, **arguments: Any) -> tuple[bool, Any]:
    result = await client.call_tool(tool, arguments)
    assert isinstance(result, CallToolResult)
    found = result.structured_content
    if isinstance(found, dict) and set(found) == {"result"}:
        found = found["result"]
    if found is None and not result.is_error:
        found = json.loads(result.content[0].text)  # type: ignore[union-attr]
    return bool(result.is_error), found


def test_mcp_graph_tools_serve_the_users_own_graph(graph: KnowledgeGraph) -> None:
    store: MemoryStore = graph.store
    manager = MemoryManager(store=store)
    ann_server = build_server(manager, user_id="ann", graph=graph)
    bob_server = build_server(manager, user_id="bob", graph=graph)
    plain = build_server(manager, user_id="ann")

    async def scenario() -> None:
        async with Client(ann_server) as ann, Client(bob_server) as bob, Client(plain) as bare:
            failed, now = await _call(ann, "facts_about", entity="user")
            assert not failed and [f["object"] for f in now] == ["Munich"]
            failed, then = await _call(ann, "facts_about", entity="user", as_of=BETWEEN.isoformat())
            assert not failed and [f["object"] for f in then] == ["Berlin"]
            failed, near = await _call(ann, "related", entity="munich")
            assert not failed and sorted(e["name"] for e in near) == ["Bavaria", "user"]
            assert await _call(bob, "facts_about", entity="user") == (False, [])
            assert await _call(bob, "related", entity="munich") == (False, [])
            failed, _ = await _call(ann, "facts_about", entity="user", as_of="2026-01-01")
            assert failed  # no timezone
            failed, _ = await _call(ann, "related", entity="user", depth=0)
            assert failed
            names = {tool.name for tool in (await bare.list_tools()).tools}
            assert "facts_about" not in names and "related" not in names

    anyio.run(scenario)
