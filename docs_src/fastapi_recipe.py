"""The FastAPI recipe, tried: the app of ``docs_src/fastapi_app.py`` on a SQLite file.

Run it (``python docs_src/fastapi_recipe.py``): it starts the app in this process
behind FastAPI's ``TestClient`` (no server, no network; the model is offline),
in a temporary directory, and checks what each route stored.  ``user_for_a_test``
is the teardown a test suite needs: whatever a test leaves in memory for its user
is erased, whether the test passed or failed.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlmodel import Session, col

from docs_src.fastapi_app import Chat, User, create_app
from firefly_orm import MemoryManager


# --8<-- [start:teardown]
@contextmanager
def user_for_a_test(app: FastAPI, client: TestClient, user_id: str) -> Iterator[dict[str, str]]:
    """A user for one test (the request headers that sign in as them).

    At teardown the user's memory is erased (``erase_user``: every row tagged
    with them), then the app's rows, even when the test failed half-way.  In
    pytest, the same body is a fixture: ``yield`` the headers, erase after it.
    """
    assert client.post("/users", json={"id": user_id, "name": user_id}).status_code == 201
    try:
        yield {"X-User": user_id}
    finally:
        MemoryManager(store=app.state.store).erase_user(user_id)
        with Session(app.state.engine) as session:
            session.exec(sa.delete(Chat).where(col(Chat.user_id) == user_id))
            session.exec(sa.delete(User).where(col(User.id) == user_id))
            session.commit()
    # --8<-- [end:teardown]


# --8<-- [start:walk-through]
def walk_through(url: str, async_url: str) -> None:
    """Sign up two users, chat through every route, delete both: check each step."""
    app = create_app(url, async_url)
    with (
        TestClient(app) as client,
        user_for_a_test(app, client, "ada") as ada,
        user_for_a_test(app, client, "bob") as bob,
    ):
        memory = MemoryManager(store=app.state.store)  # to look at what the routes stored

        # A chat: the app's row and Ada's conversation, committed together.
        chat = client.post("/chats", headers=ada).json()
        assert memory.user_conversations("ada") == [chat["conversation_id"]]

        # A sync route, then an async one, on the same chat: each stores one turn.
        first = client.post(f"/chats/{chat['id']}/messages", json={"text": "Hi!"}, headers=ada)
        assert first.json()["turn_id"] == 0, first.text
        assert first.json()["reply"] == "noted (0 earlier messages)"
        second = client.post(
            f"/async/chats/{chat['id']}/messages", json={"text": "Still there?"}, headers=ada
        )
        assert second.json()["turn_id"] == 1, second.text
        assert second.json()["reply"] == "noted (2 earlier messages)"  # the first turn's two
        turns = memory.conversation.get_turns(chat["conversation_id"])
        assert [t.user_prompt for t in turns] == ["Hi!", "Still there?"]
        assert client.get("/chats", headers=ada).json()[0]["messages"] == 2  # the app's counter

        # Bob cannot read or write Ada's chat.
        theirs = client.post(f"/chats/{chat['id']}/messages", json={"text": "?"}, headers=bob)
        assert theirs.status_code == 404

        # MemoryAgent: a new conversation, then the next turn of it; the result names the turn.
        asked = client.post("/assistant", json={"text": "Remind me later."}, headers=ada).json()
        again = client.post(
            "/assistant",
            json={"text": "And now?", "conversation_id": asked["conversation_id"]},
            headers=ada,
        ).json()
        assert (asked["turn_id"], again["turn_id"]) == (0, 1)
        assert again["reply"] == "noted (2 earlier messages)"
        stolen = client.post(
            "/assistant",
            json={"text": "Hi", "conversation_id": asked["conversation_id"]},
            headers=bob,
        )
        assert stolen.status_code == 404
        assert len(memory.user_conversations("ada")) == 2

        # Deleting Ada: her rows and her memory in one transaction; Bob keeps his.
        bobs = client.post("/chats", headers=bob).json()
        assert client.delete("/me", headers=ada).status_code == 204
        assert memory.user_conversations("ada") == []
        assert memory.conversation.get_turns(chat["conversation_id"]) == []
        assert client.get("/chats", headers=ada).json() == []
        assert memory.user_conversations("bob") == [bobs["conversation_id"]]
        assert client.delete("/async/me", headers=bob).status_code == 204
        assert memory.user_conversations("bob") == []
    # --8<-- [end:walk-through]


with tempfile.TemporaryDirectory() as tmp:
    db = Path(tmp) / "app.sqlite3"
    walk_through(f"sqlite:///{db}", f"sqlite+aiosqlite:///{db}")
print("fastapi recipe: ok")
