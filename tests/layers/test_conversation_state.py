"""Scoped conversation state (issue 32): ADK's app:, user:, temp: and own keys.

On the memory store, files, SQLite, PostgreSQL and MongoDB (input checks and
verify/repair, which no store takes part in, on fewer): the scopes are
shared as ADK shares them and ``temp:`` keys are never stored; a state delta
given with a turn commits with it, all or nothing (a turn write that fails
leaves the state as it was, a state write that fails adds no turn); writers of
different keys of one scope, racing, lose nothing; ``erase_user``, ``clear``,
export/import and verify/repair cover the state.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from cli_runner import run_cli
from modes import call
from races import race
from store_backends import BACKENDS, OpenedBackend, backend_params

from firefly_orm._layout import APP_STATE_NAMESPACE, STATE_KEY_PREFIX, user_state_namespace
from firefly_orm.conversation import ConversationMemory, ConversationTurn
from firefly_orm.entry import MemoryEntry, MemoryScope, derived_entry_id
from firefly_orm.errors import ConversationNotFoundError, EntryValidationError
from firefly_orm.sql import SQLiteStore
from firefly_orm.testing import MODES

STATE_BACKENDS = ("memory", "file", "sqlite", "postgres", "mongo")


def _params(async_on: tuple[str, ...] = ()) -> list[Any]:
    return [
        pytest.param(name, mode, marks=BACKENDS[name].marks, id=f"{name}-{mode}")
        for name in STATE_BACKENDS
        for mode in MODES
        if mode == "sync" or name in async_on
    ]


@pytest.mark.parametrize(("layer_backend", "mode"), _params(async_on=("memory",)), indirect=True)
async def test_scopes_are_shared_as_adk_shares_them(
    layer_backend: OpenedBackend, mode: str
) -> None:
    mem = ConversationMemory(store=layer_backend.store, max_tokens=None)
    view = await call(
        mode,
        mem,
        "update_state",
        "c1",
        {"step": 1, "user:lang": "fr", "app:version": 2, "temp:scratch": [1, 2]},
        user_id="u1",
    )
    # This call's view has the temp: key; nothing stores it.
    assert view == {"step": 1, "user:lang": "fr", "app:version": 2, "temp:scratch": [1, 2]}
    assert await call(mode, mem, "get_state", "c1") == {
        "step": 1,
        "user:lang": "fr",
        "app:version": 2,
    }
    assert await call(mode, mem, "owner_of", "c1") == "u1"  # update_state created it
    # Another conversation of the same user: the user's and the app's keys, not c1's.
    await call(mode, mem, "add_turn", "c2", "q", "a", user_id="u1", state_delta={"mood": "ok"})
    assert await call(mode, mem, "get_state", "c2") == {
        "mood": "ok",
        "user:lang": "fr",
        "app:version": 2,
    }
    # Another user's conversation: the app's keys only.
    await call(mode, mem, "add_turn", "c3", "q", "a", user_id="u2")
    assert await call(mode, mem, "get_state", "c3") == {"app:version": 2}
    # A state delta with a turn, and removal.
    await call(
        mode,
        mem,
        "add_turns",
        "c1",
        [mem_turn("q1"), mem_turn("q2")],
        state_delta={"step": 2, "app:version": 3, "temp:x": 1},
    )
    after = await call(mode, mem, "update_state", "c1", {}, remove=["user:lang", "nope"])
    assert after == {"step": 2, "app:version": 3}
    assert await call(mode, mem, "get_state", "c3") == {"app:version": 3}
    # A bound memory serves its user's conversations only.
    bound = mem.for_user("u2")
    with pytest.raises(ConversationNotFoundError):
        await call(mode, bound, "get_state", "c1")
    with pytest.raises(ConversationNotFoundError):
        await call(mode, bound, "update_state", "c1", {"x": 1})
    assert await call(mode, mem, "get_state", "c1") == {"step": 2, "app:version": 3}


def mem_turn(prompt: str) -> ConversationTurn:
    return ConversationTurn(user_prompt=prompt, assistant_response="a")


@pytest.mark.parametrize("layer_backend", backend_params(["memory", "sqlite"]), indirect=True)
def test_bad_state_writes_nothing(layer_backend: OpenedBackend) -> None:
    mem = ConversationMemory(store=layer_backend.store, max_tokens=None)
    mem.update_state("c1", {"k": 1}, user_id="u1")
    bad: list[Any] = [
        {"k": 2, "x": object()},  # not JSON
        {"k": 2, "x": float("nan")},
        {"k": 2, 3: "int key"},
        {"k": 2, "app:": 1},  # no key after the prefix
        {"k": 2, "x" * 300: 1},  # too long
        {"k": 2, "bad\x00key": 1},
        ["k"],  # not a mapping
    ]
    for delta in bad:
        with pytest.raises(EntryValidationError):
            mem.update_state("c1", delta)
        with pytest.raises(EntryValidationError):
            mem.add_turn("c1", "q", "a", state_delta=delta)
    with pytest.raises(EntryValidationError):
        mem.update_state("c1", {"k": 2}, remove=["k"])  # both set and removed
    # user: keys need an owner: the turn is not added either.
    mem.add_turn("nobody", "q", "a")
    with pytest.raises(EntryValidationError, match="user: state keys need a user"):
        mem.add_turn("nobody", "q2", "a2", state_delta={"user:x": 1, "app:y": 1})
    assert [t.user_prompt for t in mem.get_turns("nobody")] == ["q"]
    assert mem.get_state("c1") == {"k": 1}
    assert mem.get_turns("c1") == []


@pytest.mark.parametrize("layer_backend", backend_params(STATE_BACKENDS), indirect=True)
def test_failing_turn_write_leaves_state_unchanged(layer_backend: OpenedBackend) -> None:
    mem = ConversationMemory(store=layer_backend.store, max_tokens=None)
    mem.add_turn("c1", "q", "a", user_id="u1", idempotency_key="k1", state_delta={"n": 1})
    before = mem.get_state("c1")
    # Same idempotency key, other answer: the append fails inside the unit of work
    # the state delta is written in; neither is committed.
    with pytest.raises(EntryValidationError, match="idempotency"):
        mem.add_turn(
            "c1",
            "q",
            "another answer",
            idempotency_key="k1",
            state_delta={"n": 2, "user:u": 1, "app:a": 1},
        )
    assert mem.get_state("c1") == before == {"n": 1}
    assert len(mem.get_turns("c1")) == 1

    # A summarizer that fails: no turn, no state.
    def failing(turns: Any) -> str:
        raise RuntimeError("model down")

    tight = ConversationMemory(store=layer_backend.store, max_tokens=20, summarizer=failing)
    long_text = "many words here " * 20
    tight.add_turn("c2", long_text, long_text, user_id="u1")
    with pytest.raises(RuntimeError, match="model down"):
        tight.add_turn("c2", long_text, long_text, state_delta={"n": 5, "app:a": 5})
    assert tight.get_state("c2") == {}
    assert len(tight.get_turns("c2")) == 1


def _retry_keeps_later_state(mem: ConversationMemory) -> None:
    delta = {"n": 1, "user:count": 1, "app:count": 1}
    first = mem.add_turn("c1", "q", "a", user_id="u1", idempotency_key="k1", state_delta=delta)
    later = {"n": 2, "user:count": 2, "app:count": 2}
    mem.add_turn("c1", "q2", "a2", idempotency_key="k2", state_delta=later)
    # The first call's reply was lost; its retry finds the turn stored: no state
    # write, so the later call's values stay.
    again = mem.add_turn("c1", "q", "a", idempotency_key="k1", state_delta=delta)
    assert again.turn_id == first.turn_id
    assert mem.get_state("c1") == later
    assert len(mem.get_turns("c1")) == 2
    # The state is written after the keyed turn, in its unit of work: a state write
    # that fails there leaves no turn and no marker (the key is still free).
    mem.add_turn("nobody", "q", "a")
    with pytest.raises(EntryValidationError, match="user: state keys need a user"):
        mem.add_turn("nobody", "q2", "a2", idempotency_key="k3", state_delta={"user:x": 1})
    assert len(mem.get_turns("nobody")) == 1
    mem.add_turn("nobody", "q2", "a2", idempotency_key="k3", state_delta={"x": 1})
    assert len(mem.get_turns("nobody")) == 2
    assert mem.get_state("nobody") == {"x": 1, "app:count": 2}


@pytest.mark.parametrize("layer_backend", backend_params(STATE_BACKENDS), indirect=True)
def test_idempotent_retry_does_not_apply_its_state_again(layer_backend: OpenedBackend) -> None:
    _retry_keeps_later_state(ConversationMemory(store=layer_backend.store, max_tokens=None))


@pytest.mark.mongo
def test_idempotent_retry_does_not_apply_its_state_again_journaled(mongo_url: str) -> None:
    """MongoDB without transactions: the unit of work commits through its journal."""
    from dbutil import drop_mongo_database

    from firefly_orm.mongo import MongoDBStore

    name = "t_" + uuid.uuid4().hex[:10]
    try:
        with MongoDBStore(mongo_url, database=name, transactions=False) as store:
            assert not store.uses_transactions
            _retry_keeps_later_state(ConversationMemory(store=store, max_tokens=None))
    finally:
        drop_mongo_database(mongo_url, name)


async def test_the_manager_forwards_state() -> None:
    from firefly_orm import MemoryManager
    from firefly_orm.store import InMemoryStore

    store = InMemoryStore()
    ann = MemoryManager(store=store, user_id="ann")
    cid = ann.new_conversation()
    assert ann.update_state(cid, {"user:lang": "fr", "temp:t": 1}) == {
        "user:lang": "fr",
        "temp:t": 1,
    }
    ann.add_turn(cid, "q", "a", idempotency_key="k", state_delta={"step": 1})
    assert await ann.async_update_state(cid, {}, remove=["step"]) == {"user:lang": "fr"}
    assert await ann.async_get_state(cid) == ann.get_state(cid) == {"user:lang": "fr"}
    bob = MemoryManager(store=store, user_id="bob")
    with pytest.raises(ConversationNotFoundError):
        bob.get_state(cid)


@pytest.mark.parametrize("layer_backend", backend_params(STATE_BACKENDS), indirect=True)
def test_racing_writers_of_different_keys_lose_nothing(layer_backend: OpenedBackend) -> None:
    first = ConversationMemory(store=layer_backend.store, max_tokens=None)
    second = ConversationMemory(store=layer_backend.reopen(), max_tokens=None)  # another "process"
    first.update_state("c1", {"start": 0}, user_id="u1")
    writers = 4

    def writer(i: int) -> Any:
        mem = first if i % 2 else second

        def write() -> None:
            for round_ in range(2):
                delta = {f"k{i}": round_, f"user:k{i}": round_, f"app:k{i}": round_}
                if round_:
                    mem.add_turn("c1", f"q{i}", "a", state_delta=delta)
                else:
                    mem.update_state("c1", delta)

        return write

    race([writer(i) for i in range(writers)])
    state = first.get_state("c1")
    for i in range(writers):
        assert (state[f"k{i}"], state[f"user:k{i}"], state[f"app:k{i}"]) == (1, 1, 1)
    assert len(first.get_turns("c1")) == writers


@pytest.mark.parametrize(
    "layer_backend", backend_params(["memory", "sqlite", "postgres", "mongo"]), indirect=True
)
def test_erase_clear_export_import_cover_state(layer_backend: OpenedBackend) -> None:
    mem = ConversationMemory(store=layer_backend.store, max_tokens=None)
    mem.add_turn("c1", "q", "a", user_id="u1", state_delta={"own": {"a": [1]}, "user:u": 1})
    mem.update_state("c2", {"own2": True, "app:shared": "x"}, user_id="u1")
    mem.update_state("c3", {"mine": 1, "user:v": 2}, user_id="u2")

    exported = json.loads(json.dumps(mem.export_conversation("c1")))
    assert exported["state"] == {"own": {"a": [1]}}  # its own keys only
    assert "state" not in mem.export_conversation("empty-one")
    mem.for_user("u1").import_conversation(exported, conversation_id="imported")
    assert mem.get_state("imported") == {"own": {"a": [1]}, "user:u": 1, "app:shared": "x"}
    mem.copy_conversation("c1", new_conversation_id="copied")
    assert mem.get_state("copied")["own"] == {"a": [1]}
    # An import carrying a state replaces the conversation's own; one without keeps it.
    mem.import_conversation(exported | {"state": {"other": 1}}, conversation_id="imported")
    assert mem.get_state("imported") == {"other": 1, "user:u": 1, "app:shared": "x"}
    older = {k: v for k, v in exported.items() if k != "state"}
    mem.import_conversation(older, conversation_id="imported")
    assert mem.get_state("imported")["other"] == 1
    with pytest.raises(EntryValidationError):  # only own keys in an export
        mem.import_conversation(exported | {"state": {"app:x": 1}}, conversation_id="bad")
    assert not mem.exists("bad")

    mem.clear("c2")  # its own state goes, the app's stays
    assert mem.get_state("c2", user_id="u1") == {"user:u": 1, "app:shared": "x"}

    mem.erase_user("u1")  # user: and conversation state of u1; app and u2 stay
    assert mem.get_state("c1") == {"app:shared": "x"}
    assert mem.get_state("imported") == {"app:shared": "x"}
    assert mem.get_state("c3") == {"mine": 1, "user:v": 2, "app:shared": "x"}


@pytest.mark.parametrize("layer_backend", backend_params(["memory", "sqlite"]), indirect=True)
def test_verify_and_repair_know_state_rows(layer_backend: OpenedBackend) -> None:
    store = layer_backend.store
    mem = ConversationMemory(store=store, max_tokens=None)
    mem.update_state("c1", {"ok": 1}, user_id="u1")
    assert mem.verify("c1") == []
    namespace = "conversation:c1"

    def row(key: str, content: Any, user_id: str | None) -> MemoryEntry:
        return MemoryEntry(
            entry_id=derived_entry_id(namespace, f"{STATE_KEY_PREFIX}{key}"),
            namespace=namespace,
            key=f"{STATE_KEY_PREFIX}{key}",
            content=content,
            user_id=user_id,
            scope=MemoryScope.CONVERSATION,
        )

    store.save(namespace, row("untagged", {"value": 2}, None))  # erase_user would miss it
    store.save(namespace, row("broken", {"no value": 3}, "u1"))
    issues = {(i.field, i.found, i.expected) for i in mem.verify("c1")}
    assert issues == {("state", "state:untagged", "u1"), ("state", "state:broken", None)}
    assert len(mem.repair("c1")) == 2
    assert mem.verify("c1") == []
    assert mem.get_state("c1") == {"ok": 1, "untagged": 2}
    mem.erase_user("u1")
    assert mem.get_state("c1") == {}

    # State rows left without any conversation: reported, then deleted.
    store.save(
        "conversation:gone",
        MemoryEntry(
            entry_id=derived_entry_id("conversation:gone", "state:x"),
            namespace="conversation:gone",
            key="state:x",
            content={"value": 1},
            scope=MemoryScope.CONVERSATION,
        ),
    )
    assert [(i.field, i.found) for i in mem.verify("gone")] == [("state", "state:x")]
    mem.repair("gone")
    assert mem.get_state("gone") == {}
    assert user_state_namespace("u") == "conversation-user-state:u"
    assert APP_STATE_NAMESPACE == "conversation-app-state"


def test_cli_export_import_carries_every_scope(tmp_path: Path) -> None:
    """``export --all`` writes the app's and the users' keys (format version 4) beside each
    conversation's own; ``import`` sets them again, in the file's one transaction."""
    dbs = {name: tmp_path / f"{name}.db" for name in ("source", "target")}
    for path in dbs.values():
        assert run_cli("migrate", "--url", f"sqlite:///{path}").returncode == 0
    source = SQLiteStore(dbs["source"])
    try:
        mem = ConversationMemory(store=source, max_tokens=None)
        mem.add_turn("c", "q", "a", user_id="ada", state_delta={"own": 1, "user:lang": "it"})
        mem.update_state("c", {"app:model": "v2"})
    finally:
        source.close()
    out = tmp_path / "export.json"
    exported = run_cli("export", "--all", "-o", str(out), "--url", f"sqlite:///{dbs['source']}")
    assert exported.returncode == 0, exported.stderr
    document = json.loads(out.read_text(encoding="utf-8"))
    assert document["format_version"] == 4
    assert document["state"] == {"app": {"model": "v2"}, "users": {"ada": {"lang": "it"}}}
    assert document["conversations"][0]["state"] == {"own": 1}

    imported = run_cli("import", str(out), "--url", f"sqlite:///{dbs['target']}")
    assert imported.returncode == 0, imported.stderr
    target = SQLiteStore(dbs["target"])
    try:
        mem = ConversationMemory(store=target, max_tokens=None)
        # (an export names no owner: the imported conversation has none)
        assert mem.get_state("c") == {"own": 1, "app:model": "v2"}
        assert mem.get_state("other", user_id="ada") == {"user:lang": "it", "app:model": "v2"}
    finally:
        target.close()
