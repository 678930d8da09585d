"""The Google ADK adapters: ADK's own session-service cases, races and memory, on real stores.

ADK ships its session-service tests parametrised over its services
(google/adk-python, ``tests/unittests/sessions/test_session_service.py``: the
in-memory and the database service).  The ``test_adk_*`` tests below run each
of those cases against :class:`FireflySessionService`, written here (not
copied), each naming the upstream case; the rest check what ADK's
``DatabaseSessionService`` guarantees beyond them (duplicate ids, stale
sessions, racing appends) and the memory service.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events import Event, EventActions
from google.adk.memory.base_memory_service import BaseMemoryService
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig
from google.adk.sessions.session import Session
from google.genai import types
from helpers.adapter_processes import run_second_process
from helpers.adk_echo import APP as ECHO_APP
from helpers.adk_echo import USER as ECHO_USER
from helpers.adk_echo import run_turn
from store_backends import OpenedBackend, backend_params

from firefly_orm import LongTermMemory, SQLiteStore
from firefly_orm.errors import EntryValidationError
from firefly_orm.integrations.adk import FireflyMemoryService, FireflySessionService
from firefly_orm.testing.embeddings import ConceptEmbeddingModel

THREE = backend_params(["memory", "sqlite", "postgres"])
on_three = pytest.mark.parametrize("layer_backend", THREE, indirect=True)
on_databases = pytest.mark.parametrize(
    "layer_backend", backend_params(["sqlite", "postgres"]), indirect=True
)

APP, USER = "my_app", "test_user"


@pytest.fixture
def service(store: Any) -> FireflySessionService:
    return FireflySessionService(store)


def said(text: str, *, author: str = "user", **delta: Any) -> Event:
    """A text event with this state delta (``delta`` keys: ``app__k`` is ``app:k``)."""
    return Event(
        invocation_id="invocation",
        author=author,
        content=types.Content(role=author, parts=[types.Part(text=text)]),
        actions=EventActions(state_delta={k.replace("__", ":"): v for k, v in delta.items()}),
    )


# --------------------------------------------------------------------------- ADK's own cases


@on_three
async def test_adk_get_empty_session(service: FireflySessionService) -> None:
    """ADK: test_get_empty_session."""
    assert isinstance(service, BaseSessionService)
    assert await service.get_session(app_name=APP, user_id=USER, session_id="123") is None


@on_three
async def test_adk_create_get_session(service: FireflySessionService) -> None:
    """ADK: test_create_get_session (create, read back equal, delete)."""
    session = await service.create_session(app_name=APP, user_id=USER, state={"key": "value"})
    assert (session.app_name, session.user_id, session.state) == (APP, USER, {"key": "value"})
    assert session.id
    assert await service.get_session(app_name=APP, user_id=USER, session_id=session.id) == session
    await service.delete_session(app_name=APP, user_id=USER, session_id=session.id)
    assert await service.get_session(app_name=APP, user_id=USER, session_id=session.id) is None
    await service.delete_session(app_name=APP, user_id=USER, session_id=session.id)  # no error


@on_three
async def test_adk_create_and_list_sessions(service: FireflySessionService) -> None:
    """ADK: test_create_and_list_sessions (listed least recently updated first)."""
    ids = [f"session{i}" for i in range(5)]
    for session_id in ids:
        await service.create_session(app_name=APP, user_id=USER, session_id=session_id)
    await service.create_session(app_name=APP, user_id="other", session_id="x")
    listed = (await service.list_sessions(app_name=APP, user_id=USER)).sessions
    assert [s.id for s in listed] == ids
    assert all(s.events == [] for s in listed)
    everyone = (await service.list_sessions(app_name=APP)).sessions
    assert sorted(s.id for s in everyone) == sorted([*ids, "x"])
    assert (await service.list_sessions(app_name="another_app")).sessions == []


@on_three
async def test_adk_session_state(service: FireflySessionService) -> None:
    """ADK: test_session_state (app, user, session and temp scopes)."""
    s11 = await service.create_session(
        app_name=APP, user_id="user1", state={"key11": "value11"}, session_id="session11"
    )
    await service.create_session(
        app_name=APP, user_id="user1", state={"key12": "value12"}, session_id="session12"
    )
    await service.create_session(app_name=APP, user_id="user2", session_id="session2")
    event = said("text", app__key="value", user__key1="value1", temp__key="temp", key11="new")
    await service.append_event(session=s11, event=event)
    assert s11.state["app:key"] == "value" and s11.state["key11"] == "new"
    assert s11.state["user:key1"] == "value1"
    assert s11.state["temp:key"] == "temp"  # the object keeps it for the invocation ...
    assert "temp:key" not in event.actions.state_delta  # ... the stored delta does not

    s12 = await service.get_session(app_name=APP, user_id="user1", session_id="session12")
    assert s12 is not None and s12.state == {
        "key12": "value12",
        "app:key": "value",
        "user:key1": "value1",
    }
    s2 = await service.get_session(app_name=APP, user_id="user2", session_id="session2")
    assert s2 is not None and s2.state == {"app:key": "value"}
    again = await service.get_session(app_name=APP, user_id="user1", session_id="session11")
    assert again is not None
    assert again.state == {"key11": "new", "app:key": "value", "user:key1": "value1"}
    assert await service.get_user_state(app_name=APP, user_id="user1") == {"key1": "value1"}
    assert await service.get_user_state(app_name=APP, user_id="user2") == {}


@on_three
async def test_adk_create_new_session_will_merge_states(service: FireflySessionService) -> None:
    """ADK: test_create_new_session_will_merge_states."""
    s1 = await service.create_session(
        app_name=APP, user_id=USER, state={"key1": "value1"}, session_id="session1"
    )
    await service.append_event(s1, said("text", app__key="value", user__key1="v1", temp__k="t"))
    s2 = await service.create_session(app_name=APP, user_id=USER, state={}, session_id="session2")
    assert s2.state == {"app:key": "value", "user:key1": "v1"}


@on_three
async def test_adk_append_event_bytes(service: FireflySessionService) -> None:
    """ADK: test_append_event_bytes (inline bytes and grounding metadata survive)."""
    session = await service.create_session(app_name=APP, user_id=USER)
    content = types.Content(
        role="user", parts=[types.Part.from_bytes(data=b"\x00\xffimage", mime_type="image/png")]
    )
    grounding = types.GroundingMetadata(
        search_entry_point=types.SearchEntryPoint(sdk_blob=b"test_sdk_blob")
    )
    event = Event(invocation_id="inv", author="user", content=content, grounding_metadata=grounding)
    await service.append_event(session=session, event=event)
    read = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert read is not None and len(read.events) == 1
    assert read.events[0].content == content
    assert read.events[0].grounding_metadata == grounding


@on_three
async def test_adk_append_event_complete(service: FireflySessionService) -> None:
    """ADK: test_append_event_complete (every field of an event, read back equal)."""
    session = await service.create_session(app_name=APP, user_id=USER)
    event = Event(
        invocation_id="invocation",
        author="user",
        content=types.Content(role="user", parts=[types.Part(text="test_text")]),
        turn_complete=True,
        partial=False,
        actions=EventActions(artifact_delta={"file": 0}, transfer_to_agent="agent", escalate=True),
        long_running_tool_ids={"tool1"},
        error_code="error_code",
        error_message="error_message",
        interrupted=True,
    )
    await service.append_event(session=session, event=event)
    assert await service.get_session(app_name=APP, user_id=USER, session_id=session.id) == session


@on_three
async def test_adk_get_session_with_config(service: FireflySessionService) -> None:
    """ADK: test_get_session_with_config (num_recent_events, after_timestamp, both)."""
    session = await service.create_session(app_name=APP, user_id=USER)
    for i in range(1, 6):
        await service.append_event(session, Event(author="user", timestamp=i))

    async def stamps(**config: Any) -> list[float]:
        got = await service.get_session(
            app_name=APP, user_id=USER, session_id=session.id, config=GetSessionConfig(**config)
        )
        assert got is not None
        return [e.timestamp for e in got.events]

    assert await stamps() == [1, 2, 3, 4, 5]
    assert await stamps(num_recent_events=3) == [3, 4, 5]
    assert await stamps(num_recent_events=0) == []
    assert await stamps(after_timestamp=4.0) == [4, 5]
    assert await stamps(after_timestamp=50) == []
    assert await stamps(after_timestamp=4.0, num_recent_events=3) == [4, 5]
    assert await stamps(after_timestamp=2.0, num_recent_events=2) == [4, 5]


# ----------------------------------------------------------------- ADK's database guarantees


@on_three
async def test_duplicate_ids_partial_events_and_missing_sessions(
    service: FireflySessionService,
) -> None:
    """A used id is refused; a partial event is not stored; appending to a deleted session
    raises SessionNotFoundError and writes nothing."""
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s", state={})
    with pytest.raises(AlreadyExistsError):
        await service.create_session(app_name=APP, user_id=USER, session_id="s", state={"x": 1})
    partial = said("typing...", key="never")
    partial.partial = True
    assert await service.append_event(session, partial) is partial
    read = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert read is not None and read.events == [] and read.state == {}
    await service.delete_session(app_name=APP, user_id=USER, session_id="s")
    with pytest.raises(SessionNotFoundError):
        await service.append_event(session, said("late", user__k="v"))
    assert await service.get_user_state(app_name=APP, user_id=USER) == {}


@on_three
async def test_bad_input_writes_nothing(service: FireflySessionService) -> None:
    """A state value without a JSON form, an empty user id or app name: refused before
    anything is written (ours)."""
    with pytest.raises(TypeError):
        await service.create_session(
            app_name=APP, user_id=USER, session_id="s", state={"app:k": 1, "f": object()}
        )
    for app_name, user_id in (("", USER), (APP, ""), (APP, "x" * 256)):
        with pytest.raises(EntryValidationError):
            await service.create_session(app_name=app_name, user_id=user_id, session_id="s")
    assert (await service.list_sessions(app_name=APP)).sessions == []
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    with pytest.raises(TypeError):
        await service.append_event(session, said("x", app__k=1, bad=object()))
    read = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert read is not None and read.events == [] and read.state == {}


@on_three
async def test_stale_session_is_refused(service: FireflySessionService) -> None:
    """A session object read before another writer's append is stale: refused, nothing
    written; reloaded, it appends.  A session object built by hand (no marker) is checked
    by its newest event, as ADK's fallback does."""
    mine = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    theirs = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert theirs is not None
    await service.append_event(theirs, said("first", key="theirs"))
    with pytest.raises(StaleSessionError):
        await service.append_event(mine, said("second", key="mine", user__k="v"))
    read = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert read is not None and [e.content.parts[0].text for e in read.events] == ["first"]  # type: ignore[index, union-attr]
    assert read.state == {"key": "theirs"}
    await service.append_event(read, said("second", key="mine"))

    older = list(read.events)[:-1]  # without "second", the newest stored event
    by_hand = Session(id="s", app_name=APP, user_id=USER, events=older)
    with pytest.raises(StaleSessionError):  # no marker, older time, and not the newest event
        await service.append_event(by_hand, said("third"))
    by_hand.events = list(read.events)
    await service.append_event(by_hand, said("third"))  # its newest event is the stored one


@on_databases
async def test_racing_appends_lose_nothing(
    layer_backend: OpenedBackend, service: FireflySessionService
) -> None:
    """Appends racing on one session object both land with their deltas; appends of two
    sessions racing on the user's and the app's state keep both keys (the rows are
    compare-and-set); through a second service, a stale session object is refused, never
    half-written."""
    one = await service.create_session(app_name=APP, user_id=USER, session_id="one")
    two = await service.create_session(app_name=APP, user_id=USER, session_id="two")
    for round_ in range(3):  # the first round creates the user's state row: an insert race
        await asyncio.gather(
            service.append_event(one, said(f"a{round_}", user__a=round_, app__a=round_, k1=round_)),
            service.append_event(one, said(f"b{round_}", user__b=round_, k2=round_)),
            service.append_event(two, said(f"c{round_}", user__c=round_, app__c=round_)),
        )
    read = await service.get_session(app_name=APP, user_id=USER, session_id="one")
    assert read is not None and len(read.events) == 6
    users = {"user:a": 2, "user:b": 2, "user:c": 2}
    assert read.state == {"k1": 2, "k2": 2, **users, "app:a": 2, "app:c": 2}
    # stored in timestamp order (ADK's), which the lock may have taken in another order
    assert sorted(e.id for e in read.events) == sorted(e.id for e in one.events)

    other = FireflySessionService(layer_backend.reopen())
    mine = await service.get_session(app_name=APP, user_id=USER, session_id="two")
    theirs = await other.get_session(app_name=APP, user_id=USER, session_id="two")
    assert mine is not None and theirs is not None
    outcomes = await asyncio.gather(
        service.append_event(mine, said("x", who="mine", user__x=1)),
        other.append_event(theirs, said("y", who="theirs", user__y=1)),
        return_exceptions=True,
    )
    assert sorted(type(o).__name__ for o in outcomes) == ["Event", "StaleSessionError"]
    winner = "mine" if isinstance(outcomes[0], Event) else "theirs"
    read = await other.get_session(app_name=APP, user_id=USER, session_id="two")
    assert read is not None and len(read.events) == 4 and read.state["who"] == winner
    assert ("user:x" in read.state) == (winner == "mine") != ("user:y" in read.state)


@on_databases
async def test_sessions_survive_a_restart_and_erase_user(layer_backend: OpenedBackend) -> None:
    """A service over a reopened store reads the session equal; erase_user forgets it."""
    first = FireflySessionService(layer_backend.store)
    session = await first.create_session(app_name="a:b", user_id="u:1", session_id="s/1")
    await first.append_event(session, said("hello", user__lang="en", step=1))
    await first.append_event(session, said("hi", author="model", step=2))
    store = layer_backend.reopen()
    second = FireflySessionService(store)
    assert await second.get_session(app_name="a:b", user_id="u:1", session_id="s/1") == session
    assert await second.get_session(app_name="a", user_id="b:u:1", session_id="s/1") is None
    with store.unit_of_work() as uow:
        uow.entries.erase_user("u:1")
        uow.commit()
    assert await second.get_session(app_name="a:b", user_id="u:1", session_id="s/1") is None
    assert await second.get_user_state(app_name="a:b", user_id="u:1") == {}


# --------------------------------------------------------------------------- memory


@on_three
async def test_memory_service(store: Any, service: FireflySessionService) -> None:
    """add_session_to_memory (again: no duplicates), search_memory scoped to the app and
    the user, the stored content returned, delete_memory; ports InMemoryMemoryService's
    behaviours (events without text are skipped)."""
    memory = FireflyMemoryService(LongTermMemory(store=store))
    assert isinstance(memory, BaseMemoryService)
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    await service.append_event(session, said("My favourite colour is teal"))
    await service.append_event(session, Event(author="model"))  # no content: skipped
    await memory.add_session_to_memory(session)
    await service.append_event(session, said("Teal it is, noted.", author="model"))
    await memory.add_session_to_memory(session)  # ADK adds a session again as it grows
    other = await service.create_session(app_name=APP, user_id="other", session_id="s")
    await service.append_event(other, said("teal everywhere"))
    await memory.add_session_to_memory(other)
    await memory.add_events_to_memory(
        app_name="another_app", user_id=USER, events=[said("teal too")], session_id="z"
    )

    found = (await memory.search_memory(app_name=APP, user_id=USER, query="teal")).memories
    assert sorted(str(m.content.parts[0].text) for m in found) == [  # type: ignore[index]
        "My favourite colour is teal",
        "Teal it is, noted.",
    ]
    assert {m.author for m in found} == {"user", "model"}
    assert all(m.id and m.timestamp for m in found)
    assert (await memory.search_memory(app_name=APP, user_id=USER, query="purple")).memories == []

    await memory.delete_memory(app_name=APP, user_id=USER, memory_id=found[0].id)
    left = (await memory.search_memory(app_name=APP, user_id=USER, query="teal")).memories
    assert [m.id for m in left] == [found[1].id]


# --------------------------------------------------------------------------- an agent


@on_databases
async def test_an_agent_resumes_in_a_second_process(
    layer_backend: OpenedBackend, service: FireflySessionService
) -> None:
    """An ADK LlmAgent run by a Runner on our services (a scripted model, no network): its
    second turn, in another process on SQLite and PostgreSQL, sees the first; the state
    its output_key wrote and the memory of both turns are there afterwards."""
    store = layer_backend.store
    assert await run_turn(store, "s1", "Golden Gate Bridge?") == "heard: Golden Gate Bridge?"
    answer = run_second_process("adk_echo", layer_backend, "s1", "Which state?")
    assert answer == "heard: Golden Gate Bridge? | Which state?"
    session = await service.get_session(app_name=ECHO_APP, user_id=ECHO_USER, session_id="s1")
    assert session is not None and len(session.events) == 4  # two prompts, two answers
    assert session.state == {"last_answer": answer}
    memory = FireflyMemoryService(LongTermMemory(store=store))
    found = await memory.search_memory(app_name=ECHO_APP, user_id=ECHO_USER, query="state")
    assert sorted(str(m.content.parts[0].text) for m in found.memories) == [  # type: ignore[index]
        "Which state?",
        answer,
    ]


async def test_memory_search_by_meaning(tmp_path: Path) -> None:
    """With an embedder, search_memory finds an event that shares no word with the query
    (SQLite with sqlite-vec; ConceptEmbeddingModel, no network)."""
    store = SQLiteStore(tmp_path / "vectors.sqlite3", vectors=True)
    try:
        ltm = LongTermMemory(store=store, embedder=ConceptEmbeddingModel())
        memory = FireflyMemoryService(ltm, limit=1)
        await memory.add_events_to_memory(
            app_name=APP,
            user_id=USER,
            events=[said("the customer prefers email over phone calls"), said("order 7 is late")],
        )
        found = await memory.search_memory(app_name=APP, user_id=USER, query="how to contact her?")
        assert [str(m.content.parts[0].text) for m in found.memories] == [  # type: ignore[index]
            "the customer prefers email over phone calls"
        ]
    finally:
        await store.async_close()
