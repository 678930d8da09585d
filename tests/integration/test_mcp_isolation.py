"""Any memory one user's MCP server writes stays invisible to another user's (hypothesis).

Both servers are ``firefly_orm.mcp.build_server`` over one SQLite store, the
SDK's ``Client`` connected in-process; whatever text, conversation id and fact
key Alice's client sends, Bob's client never recalls, lists or reads it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.client import Client
from mcp_types import CallToolResult

from firefly_orm.errors import EntryValidationError
from firefly_orm.manager import MemoryManager
from firefly_orm.mcp import StaticTokenVerifier, build_server
from firefly_orm.sql import SQLAlchemyStore

WORDS = st.text(st.characters(categories=("L", "N")), min_size=3, max_size=12)
IDS = st.text(st.characters(categories=("L", "N"), max_codepoint=0x7F), min_size=1, max_size=20)


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[MemoryManager]:
    store = SQLAlchemyStore(f"sqlite:///{tmp_path / 'memory.db'}")
    store.initialize(migrate=True)
    yield MemoryManager(store=store)
    store.close()


async def _call(client: Client, tool: str, **arguments: Any) -> tuple[bool, Any]:
    result = await client.call_tool(tool, arguments)
    assert isinstance(result, CallToolResult)
    found = result.structured_content
    if isinstance(found, dict) and set(found) == {"result"}:
        found = found["result"]
    return bool(result.is_error), found


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(words=st.lists(WORDS, min_size=1, max_size=4), conversation_id=IDS, key=IDS)
def test_nothing_alice_writes_reaches_bob(
    manager: MemoryManager, words: list[str], conversation_id: str, key: str
) -> None:
    alice_server = build_server(manager, user_id="alice")
    bob_server = build_server(manager, user_id="bob")
    text = " ".join(words)

    async def scenario() -> None:
        async with Client(alice_server) as alice, Client(bob_server) as bob:
            failed, _ = await _call(alice, "remember", content=text)
            assert not failed
            failed, _ = await _call(
                alice,
                "add_turn",
                conversation_id=conversation_id,
                user_prompt=text,
                assistant_response="ok",
            )
            assert not failed
            assert not (await _call(alice, "set_fact", key=key, value=text))[0]
            assert (await _call(alice, "recall", query=words[0]))[1]
            assert conversation_id in (await _call(alice, "list_conversations"))[1]

            assert await _call(bob, "recall", query=words[0]) == (False, [])
            assert await _call(bob, "list_conversations") == (False, [])
            failed, _ = await _call(bob, "conversation_history", conversation_id=conversation_id)
            assert failed
            assert (await _call(bob, "get_fact", key=key))[1]["found"] is False
            assert (await bob.list_resources()).resources == []

    anyio.run(scenario)


def test_a_server_needs_exactly_one_way_to_know_its_user(manager: MemoryManager) -> None:
    verifier = StaticTokenVerifier({"t": "alice"})
    with pytest.raises(EntryValidationError, match="either"):
        build_server(manager)
    with pytest.raises(EntryValidationError, match="either"):
        build_server(manager, user_id="alice", token_verifier=verifier)
    with pytest.raises(EntryValidationError, match="another user"):
        build_server(manager.for_user("bob"), user_id="alice")
    with pytest.raises(EntryValidationError, match="unbound"):
        build_server(manager.for_user("bob"), token_verifier=verifier)
    with pytest.raises(EntryValidationError):
        StaticTokenVerifier({"": "alice"})


async def test_the_token_verifier_maps_known_tokens_only() -> None:
    verifier = StaticTokenVerifier({"alice-token": "alice", "bob-token": "bob"})
    token = await verifier.verify_token("bob-token")
    assert token is not None and token.subject == "bob" and token.client_id == "bob"
    assert await verifier.verify_token("alice-token-") is None
    assert await verifier.verify_token("") is None
