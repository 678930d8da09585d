"""The MCP server (``firefly-orm mcp``) answering the official SDK's client.

Over stdio the server is spawned as ``python -m firefly_orm.cli mcp`` by the
SDK's ``stdio_client``, on SQLite and PostgreSQL; over streamable HTTP with two
bearer tokens mapped to two users.  Each user sees only their own memory:
another user's conversation reads as not found, their items never recalled.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from cli_runner import run_cli
from dbutil import drop_schema
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextResourceContents

from firefly_orm.conversation import ConversationMemory
from firefly_orm.sql import SQLAlchemyStore

pytestmark = pytest.mark.timeout(120)

TOOLS = {
    "remember",
    "recall",
    "forget",
    "list_conversations",
    "conversation_history",
    "add_turn",
    "set_fact",
    "get_fact",
    "list_facts",
    "delete_fact",
}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[str]]:
    """``--url`` (and ``--schema``) of a migrated database."""
    if request.param == "sqlite":
        args = ["--url", f"sqlite:///{tmp_path / 'memory.db'}"]
        assert run_cli("migrate", *args).returncode == 0
        yield args
        return
    url = request.getfixturevalue("postgres_url")
    schema = "mcp_" + uuid.uuid4().hex[:10]
    args = ["--url", url, "--schema", schema]
    assert run_cli("migrate", *args).returncode == 0
    yield args
    drop_schema(url, schema)


@asynccontextmanager
async def served(database: list[str], user: str) -> AsyncIterator[ClientSession]:
    """A client session with ``firefly-orm mcp`` for ``user`` over stdio."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "firefly_orm.cli", "mcp", *database, "--user-id", user],
        env=dict(os.environ),
    )
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> Any:
    """A successful tool call's structured result (``result`` unwrapped)."""
    result = await session.call_tool(tool, arguments)
    assert isinstance(result, CallToolResult)
    assert not result.is_error, result.content
    found = result.structured_content
    return found["result"] if isinstance(found, dict) and set(found) == {"result"} else found


async def refused(session: ClientSession, tool: str, **arguments: Any) -> str:
    """The error text of a tool call that must fail."""
    result = await session.call_tool(tool, arguments)
    assert isinstance(result, CallToolResult)
    assert result.is_error
    return " ".join(getattr(part, "text", "") for part in result.content)


def _set_listing(database: list[str], conversation_id: str, **change: Any) -> None:
    """Set a conversation's title/tags in the database a server serves (from outside it)."""
    options = dict(zip(database[::2], database[1::2], strict=True))
    store = SQLAlchemyStore(url=options["--url"], schema_name=options.get("--schema"))
    try:
        ConversationMemory(store=store).update_conversation(conversation_id, **change)
    finally:
        store.close()


async def test_a_user_s_memory_over_stdio_and_nobody_else_s(database: list[str]) -> None:
    async with served(database, "alice") as alice:
        tools = {tool.name for tool in (await alice.list_tools()).tools}
        assert tools == TOOLS
        kept = await call(alice, "remember", content="Alice drinks green tea", tags=["drink"])
        await call(alice, "remember", content="Alice lives in Lisbon", key="city")
        hits = await call(alice, "recall", query="tea")
        assert [hit["id"] for hit in hits] == [kept["id"]]
        assert hits[0]["text"] == "Alice drinks green tea" and hits[0]["tags"] == ["drink"]
        turn = await call(
            alice, "add_turn", conversation_id="trip", user_prompt="Hi", assistant_response="Hello"
        )
        await call(
            alice, "add_turn", conversation_id="trip", user_prompt="Book", assistant_response="Done"
        )
        history = await call(alice, "conversation_history", conversation_id="trip")
        assert [(t["user"], t["assistant"]) for t in history] == [("Hi", "Hello"), ("Book", "Done")]
        assert turn["turn_id"] == history[0]["turn_id"]
        assert await call(alice, "list_conversations") == ["trip"]
        (plain,) = await call(alice, "list_conversations", details=True)
        assert (
            set(plain) == {"conversation_id", "updated_at"} and plain["conversation_id"] == "trip"
        )
        _set_listing(database, "trip", title="Booking", tags=["travel"])
        (listed,) = await call(alice, "list_conversations", details=True)
        assert (listed["title"], listed["tags"], "archived" in listed) == (
            "Booking",
            ["travel"],
            False,
        )
        assert listed["updated_at"] > plain["updated_at"]
        await call(alice, "set_fact", key="mood", value={"level": 3})
        assert await call(alice, "get_fact", key="mood") == {
            "key": "mood",
            "value": {"level": 3},
            "found": True,
        }
        assert await call(alice, "list_facts") == {"mood": {"level": 3}}
        listed = [str(r.uri) for r in (await alice.list_resources()).resources]
        assert listed == ["conversation://trip"]
        read = await alice.read_resource("conversation://trip")
        content = read.contents[0]
        assert isinstance(content, TextResourceContents)
        assert [t["user"] for t in json.loads(content.text)["turns"]] == ["Hi", "Book"]
        assert await call(alice, "forget", id_or_key="city") == {"forgotten": True}
        assert await call(alice, "recall", query="Lisbon") == []
        async with served(database, "bob") as bob:
            assert "not found" in await refused(bob, "conversation_history", conversation_id="trip")
            assert await call(bob, "recall", query="tea") == []
            assert await call(bob, "list_conversations") == []
            assert await call(bob, "get_fact", key="mood") == {
                "key": "mood",
                "value": None,
                "found": False,
            }
            assert (await bob.list_resources()).resources == []
            with pytest.raises(MCPError, match="not found"):
                await bob.read_resource("conversation://trip")
            assert await call(bob, "forget", id_or_key=kept["id"]) == {"forgotten": False}
            # Bob writing to Alice's conversation id is refused too (it is hers).
            assert "not found" in await refused(
                bob, "add_turn", conversation_id="trip", user_prompt="x", assistant_response="y"
            )

            # Bob's calls changed nothing of Alice's.
            assert [hit["id"] for hit in await call(alice, "recall", query="tea")] == [kept["id"]]
            assert len(await call(alice, "conversation_history", conversation_id="trip")) == 2


async def test_bad_input_is_a_tool_error_and_writes_nothing(tmp_path: Path) -> None:
    database = ["--url", f"sqlite:///{tmp_path / 'memory.db'}"]
    assert run_cli("migrate", *database).returncode == 0
    async with served(database, "alice") as alice:
        assert "importance" in await refused(alice, "remember", content="x", importance=7.0)
        assert "content" in await refused(alice, "remember", content="")
        assert "limit" in await refused(alice, "recall", query="x", limit=-1)
        assert "key" in await refused(alice, "set_fact", key="a\x00b", value=1)
        assert await refused(
            alice, "add_turn", conversation_id="", user_prompt="a", assistant_response="b"
        )
        assert "not found" in await refused(alice, "conversation_history", conversation_id="nope")
        assert await call(alice, "list_conversations") == []
        assert await call(alice, "list_facts") == {}
        assert await call(alice, "recall", query="x") == []


def test_the_cli_refuses_a_server_without_a_user(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    assert run_cli("migrate", "--url", url).returncode == 0
    done = run_cli("mcp", "--url", url)
    assert done.returncode == 2 and "--user-id" in done.stderr
    tokens = tmp_path / "tokens.json"
    tokens.write_text('{"t": "alice"}')
    done = run_cli("mcp", "--url", url, "--tokens-file", str(tokens))
    assert done.returncode == 2 and "http only" in done.stderr
    tokens.write_text("[1]")
    done = run_cli("mcp", "--url", url, "--transport", "http", "--tokens-file", str(tokens))
    assert done.returncode == 2 and "JSON object" in done.stderr


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[str]:
    """``firefly-orm mcp --transport http`` with tokens ``alice-token`` and ``bob-token``."""
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    assert run_cli("migrate", "--url", url).returncode == 0
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"alice-token": "alice", "bob-token": "bob"}))
    port = _free_port()
    command = [sys.executable, "-m", "firefly_orm.cli", "mcp", "--url", url, "--transport", "http"]
    command += ["--tokens-file", str(tokens), "--port", str(port)]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert process.poll() is None, process.stderr.read() if process.stderr else ""
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=10)


@asynccontextmanager
async def over_http(url: str, token: str) -> AsyncIterator[ClientSession]:
    client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
    async with (
        client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def test_http_serves_each_token_s_user_only(http_server: str) -> None:
    async with over_http(http_server, "alice-token") as alice:
        await call(
            alice, "add_turn", conversation_id="c1", user_prompt="Hi", assistant_response="Yo"
        )
        await call(alice, "remember", content="Alice plays chess")
        assert await call(alice, "list_conversations") == ["c1"]
    async with over_http(http_server, "bob-token") as bob:
        assert "not found" in await refused(bob, "conversation_history", conversation_id="c1")
        assert await call(bob, "recall", query="chess") == []
        assert await call(bob, "list_conversations") == []
    async with httpx2.AsyncClient() as anonymous:
        answer = await anonymous.post(
            http_server, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        )
        assert answer.status_code == 401
        answer = await anonymous.post(
            http_server,
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Authorization": "Bearer guessed"},
        )
        assert answer.status_code == 401
