"""Statements and round trips per operation on SQLite and PostgreSQL, sync and async.

Deterministic proxies of latency (issue 18): what one ``add_turn``, one
``WorkingMemory.set`` and one history read send to the database, counted with
SQLAlchemy events on the store's engines (see :class:`Wire`), never timed.

A *statement* is one SQL statement SQLAlchemy hands to the driver.  A *round
trip* is a statement, or a ``BEGIN`` / ``COMMIT`` / ``ROLLBACK`` the driver
sends on its own: psycopg sends ``BEGIN`` before the first statement of a
transaction and ``COMMIT`` / ``ROLLBACK`` only when one is open; our SQLite
engines send ``BEGIN [IMMEDIATE]`` when the transaction starts.  One-statement
operations (``WorkingMemory.set``: a store ``save``) run without a transaction
on both databases, and so do read-only units of work (history reads) on
PostgreSQL at ``READ COMMITTED``, where each statement takes its own snapshot
anyway, and ``add_turn``'s one-statement append there (its unit of work begins
a transaction only for a statement that needs one).  Both are read
off the driver connection when the transaction ends, so the counts are what
went over the wire (on SQLite: calls into the library).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import sqlalchemy as sa
from dbutil import statements_sent
from store_backends import OpenedBackend, backend_params, open_backend

from firefly_orm.conversation import ConversationMemory, ConversationTurn
from firefly_orm.working import WorkingMemory

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

# --------------------------------------------------------------------------- counting


def _in_transaction(driver_connection: Any) -> bool:
    """Whether the driver connection (psycopg or sqlite3/aiosqlite) has a transaction open."""
    info = getattr(driver_connection, "info", None)
    status = getattr(info, "transaction_status", None)
    if status is not None:
        return bool(status.name != "IDLE")
    return bool(driver_connection.in_transaction)


@dataclass
class Wire:
    """What the store's engines sent while :meth:`watch` was on."""

    statements: list[str] = field(default_factory=list)
    transactions: int = 0

    @property
    def round_trips(self) -> int:
        """Statements, plus a ``BEGIN`` and a ``COMMIT``/``ROLLBACK`` per transaction."""
        return len(self.statements) + 2 * self.transactions

    def counts(self) -> tuple[int, int]:
        """``(statements, round trips)``."""
        return len(self.statements), self.round_trips

    def reset(self) -> None:
        self.statements.clear()
        self.transactions = 0

    def _statement(self, conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        self.statements.append(statement)

    def _ended(self, conn: Any) -> None:
        fairy = conn.connection
        # A SQLite store's held connection is detached from its pool, which
        # leaves no driver_connection; its DB-API connection is sqlite3's own.
        driver = fairy.driver_connection
        if _in_transaction(driver if driver is not None else fairy.dbapi_connection):
            self.transactions += 1


@pytest.fixture
def wire_for() -> Iterator[Callable[[Any], Wire]]:
    """``wire_for(store)``: a :class:`Wire` counting on the store's sync and async engines."""
    hooks: list[tuple[Any, str, Any]] = []

    def attach(store: Any) -> Wire:
        wire = Wire()
        for engine in _engines(store):
            for name, fn in (
                ("before_cursor_execute", wire._statement),
                ("commit", wire._ended),
                ("rollback", wire._ended),
            ):
                sa.event.listen(engine, name, fn)
                hooks.append((engine, name, fn))
        return wire

    yield attach
    for engine, name, fn in hooks:
        sa.event.remove(engine, name, fn)


@pytest.fixture(params=backend_params(["sqlite", "postgres"]))
def sql_env(request: pytest.FixtureRequest) -> Iterator[OpenedBackend]:
    """SQLite, then PostgreSQL (a schema of its own)."""
    opened = open_backend(request, str(request.param))
    try:
        yield opened
    finally:
        opened.close()


def _run(mode: str, sync: Callable[[], Any], async_: Callable[[], Any]) -> Any:
    """Call ``sync()``, or run the coroutine ``async_()`` makes."""
    if mode == "sync":
        return sync()
    return asyncio.run(async_())


def _async_engine(store: Any) -> Any:
    """The store's AsyncEngine, or ``None`` when its async methods run on the sync engine."""
    from firefly_orm.errors import MissingEngineError

    try:
        return store.async_engine
    except MissingEngineError:
        return None


def _engines(store: Any) -> list[sa.Engine]:
    """Every engine the store sends statements through."""
    native = _async_engine(store)
    return [store.engine] + ([] if native is None else [native.sync_engine])


def _close(store: Any, mode: str) -> None:
    """Dispose the async engine on the loop that used it (the backend closes the rest)."""
    native = _async_engine(store)
    if mode == "async" and native is not None:
        asyncio.run(native.dispose())


#: Expected ``(statements, round trips)`` per backend and operation.  Keyed by
#: backend; every entry is asserted in both sync and async modes.
EXPECTED: dict[str, dict[str, tuple[int, int]]] = {
    "sqlite": {
        # The head's UPDATE ... RETURNING (under BEGIN IMMEDIATE's write lock) numbers
        # the turn, then its INSERT; without a head the UPDATE writes nothing and the
        # general path runs (SELECT head, INSERT turn, INSERT head, INSERT index row).
        "add_turn, first turn": (5, 7),
        "add_turn": (2, 4),
        "add_turn, evicting": (5, 7),
        # One statement, no transaction (a write takes the lock as BEGIN IMMEDIATE would).
        "working set": (1, 1),
        "working get": (1, 1),
        # One DELETE (the fact's id or its key) in the write unit of work's BEGIN IMMEDIATE.
        "working delete": (1, 3),
        # Read-only units of work keep their BEGIN: one snapshot for every statement.
        "get_message_history": (1, 3),
        "get_recent": (1, 3),
        "get_recent_messages": (1, 3),
    },
    "postgres": {
        # The one-statement append (a data-modifying CTE) runs before the unit of
        # work's transaction begins, in autocommit: one round trip.  Without a head
        # it writes nothing, then the transaction begins and the general path runs:
        # one statement more, once per conversation.
        "add_turn, first turn": (5, 7),
        "add_turn": (1, 1),
        "add_turn, evicting": (5, 7),
        # One statement in autocommit; reads at READ COMMITTED need no transaction.
        "working set": (1, 1),
        "working get": (1, 1),
        # The unit of work's one-statement DELETE runs before its transaction would begin.
        "working delete": (1, 1),
        "get_message_history": (1, 1),
        "get_recent": (1, 1),
        "get_recent_messages": (1, 1),
    },
}


def _measure(sql_env: OpenedBackend, mode: str, wire_for: Callable[[Any], Wire]) -> dict[str, Any]:
    """Run every measured operation once (after a warm-up of each); their counts by name."""
    store = sql_env.store
    # Big enough that 3 short turns never evict; the evicting memory holds one turn.
    memory = ConversationMemory(store=store, max_tokens=10_000)
    evicting = ConversationMemory(store=store, max_tokens=8, summarize_threshold=0)
    working = WorkingMemory(store=store, scope_id="round-trips")
    seen: dict[str, Any] = {}

    def add(mem: ConversationMemory, cid: str, i: int) -> Any:
        raw = [
            {"role": "user", "content": f"question {i}"},
            {"role": "assistant", "content": f"answer {i}"},
        ]
        args = (cid, f"question {i}", f"answer {i}", raw)
        return _run(mode, lambda: mem.add_turn(*args), lambda: mem.async_add_turn(*args))

    def step(name: str, fn: Callable[[], Any]) -> Any:
        wire.reset()
        result = fn()
        seen[name] = (wire.counts(), list(wire.statements), result)
        return result

    # Warm-up: initialise the store, connect, compile every statement once.
    add(memory, "warm", 0)
    add(memory, "warm", 1)
    add(evicting, "warm-e", 0)
    add(evicting, "warm-e", 1)
    _run(mode, lambda: working.set("k", 0), lambda: working.async_set("k", 0))
    _run(mode, lambda: working.get("k"), lambda: working.async_get("k"))
    _run(mode, lambda: working.delete("k"), lambda: working.async_delete("k"))
    _run(
        mode,
        lambda: memory.get_message_history("warm"),
        lambda: memory.async_get_message_history("warm"),
    )
    _run(mode, lambda: memory.get_recent("warm", 2), lambda: memory.async_get_recent("warm", 2))
    _run(
        mode,
        lambda: memory.get_recent_messages("warm", 2),
        lambda: memory.async_get_recent_messages("warm", 2),
    )
    wire = wire_for(store)

    step("add_turn, first turn", lambda: add(memory, "c1", 0))
    step("add_turn", lambda: add(memory, "c1", 1))
    add(memory, "c1", 2)
    add(evicting, "e1", 0)
    step("add_turn, evicting", lambda: add(evicting, "e1", 1))
    step(
        "working set",
        lambda: _run(mode, lambda: working.set("k", 1), lambda: working.async_set("k", 1)),
    )
    seen["working value"] = step(
        "working get", lambda: _run(mode, lambda: working.get("k"), lambda: working.async_get("k"))
    )
    step(
        "working delete",
        lambda: _run(mode, lambda: working.delete("k"), lambda: working.async_delete("k")),
    )
    seen["working after delete"] = _run(
        mode, lambda: working.get("k"), lambda: working.async_get("k")
    )
    step(
        "get_message_history",
        lambda: _run(
            mode,
            lambda: memory.get_message_history("c1"),
            lambda: memory.async_get_message_history("c1"),
        ),
    )
    step(
        "get_recent",
        lambda: _run(
            mode, lambda: memory.get_recent("c1", 2), lambda: memory.async_get_recent("c1", 2)
        ),
    )
    step(
        "get_recent_messages",
        lambda: _run(
            mode,
            lambda: memory.get_recent_messages("c1", 4),
            lambda: memory.async_get_recent_messages("c1", 4),
        ),
    )
    seen["turns"] = _run(mode, lambda: memory.get_turns("c1"), lambda: memory.async_get_turns("c1"))
    seen["evicting turns"] = _run(
        mode, lambda: evicting.get_turns("e1"), lambda: evicting.async_get_turns("e1")
    )
    _close(store, mode)
    return seen


def test_statements_and_round_trips_per_operation(
    sql_env: OpenedBackend, mode: str, wire_for: Callable[[Any], Wire]
) -> None:
    """Each operation sends the expected statements and round trips, and does its work."""
    seen = _measure(sql_env, mode, wire_for)
    counts = {name: value[0] for name, value in seen.items() if isinstance(value, tuple)}
    assert counts == EXPECTED[sql_env.name], {
        name: value[1] for name, value in seen.items() if isinstance(value, tuple)
    }
    # The counted operations did what they should.
    assert [t.turn_id for t in seen["turns"]] == [0, 1, 2]
    assert (seen["working value"], seen["working after delete"]) == (1, None)
    assert [t.user_prompt for t in seen["evicting turns"]] == ["question 1"]
    assert [t.turn_id for t in seen["get_recent"][2]] == [1, 2]
    assert len(seen["get_message_history"][2]) == 6
    assert [m["content"] for m in seen["get_recent_messages"][2]] == [
        "question 1",
        "answer 1",
        "question 2",
        "answer 2",
    ]


def test_a_threshold_below_the_budget_keeps_the_one_statement_append(
    sql_env: OpenedBackend, wire_for: Callable[[Any], Wire]
) -> None:
    """Issue 33: the threshold triggers eviction whatever max_tokens is; a turn that
    stays under it is still the one-statement append, one that crosses it is
    refused by that statement and evicts on the general path."""
    store = sql_env.store
    memory = ConversationMemory(store=store, max_tokens=10_000, summarize_threshold=30)
    memory.add_turn("t", "question 0", "answer 0")  # 5 tokens each: the head exists
    memory.add_turn("t", "question 1", "answer 1")
    wire = wire_for(store)
    wire.reset()
    memory.add_turn("t", "question 2", "answer 2")
    assert wire.counts() == EXPECTED[sql_env.name]["add_turn"]
    crossing = ConversationMemory(store=store, max_tokens=10_000, summarize_threshold=11)
    wire.reset()
    crossing.add_turn("t", "question 3", "answer 3")  # 20 > 11: down to 10
    assert wire.counts()[0] > EXPECTED[sql_env.name]["add_turn"][0]
    assert [t.turn_id for t in crossing.get_turns("t")] == [2, 3]
    assert crossing.get_total_tokens("t") == 10
    _close(store, "sync")


def test_a_history_read_without_limits_is_one_statement(sql_env: OpenedBackend) -> None:
    """Issue 35: with neither a token nor a message limit, every turn is read by one
    statement (batches would take two for 40 turns: 32, then the rest); the messages
    are those a batched read of the same turns gives."""
    store = sql_env.store
    unlimited = ConversationMemory(store=store, max_tokens=None)
    batched = ConversationMemory(store=store, max_tokens=10**12)  # a limit no turn reaches
    said = [
        [{"role": "user", "content": f"q{n}"}, {"role": "assistant", "content": f"a{n}"}]
        for n in range(40)
    ]
    unlimited.add_turns(
        "c",
        [
            ConversationTurn(user_prompt=f"q{n}", assistant_response=f"a{n}", raw_messages=m)
            for n, m in enumerate(said)
        ],
    )
    with statements_sent(store.engine) as sent:
        everything = unlimited.get_message_history("c")
    assert [s for s in sent if s[0] != "BEGIN"] == [("SELECT", True)], sent
    with statements_sent(store.engine) as sent:
        assert batched.get_message_history("c") == everything
    assert len([s for s in sent if s[0] == "SELECT"]) == 2, sent
    assert everything == [message for pair in said for message in pair]
    _close(store, "sync")


# ------------------------------------------------------------------ the one-statement append


#: What a turn that needs no eviction sends: (first word, as cached SQL text?).
CACHED_APPEND = {
    "sqlite": [("UPDATE", True), ("INSERT", True)],  # (after the engine's BEGIN IMMEDIATE)
    "postgres": [("WITH", True)],
}


def test_the_one_statement_append_runs_as_cached_text(sql_env: OpenedBackend) -> None:
    """Issue 35: the append's statements go through ``exec_driver_sql`` as cached text
    (no compiled Core statement: no per-call cache key or schema rendering)."""
    store = sql_env.store
    memory = ConversationMemory(store=store)
    memory.add_turn("c", "hi", "hello")  # a new conversation: the general path
    with statements_sent(store.engine) as sent:
        memory.add_turn("c", "again", "sure")
    assert [s for s in sent if s[0] != "BEGIN"] == CACHED_APPEND[sql_env.name], sent
    assert [(t.turn_id, t.assistant_response) for t in memory.get_turns("c")] == [
        (0, "hello"),
        (1, "sure"),
    ]
    _close(store, "sync")


def _turns_script(memory: ConversationMemory, cid: str) -> None:
    """A conversation with an owner, raw messages (tool calls too), metadata, evictions
    and summaries: turns that take the one-statement append and turns that cannot."""
    for i in range(12):
        raw: list[Any] = [
            {"role": "user", "content": f"question {i}"},
            {"role": "assistant", "content": f"answer {i}"},
        ]
        if i % 3 == 1:
            raw[1:1] = [
                {"role": "assistant", "tool_calls": [{"id": f"t{i}", "name": "f"}]},
                {"role": "tool", "tool_call_id": f"t{i}", "content": "ok"},
            ]
        memory.add_turn(
            cid, f"question {i}", f"answer {i} " * (i % 4), raw, metadata={"i": i}, user_id="u1"
        )


def _normalised_rows(store: Any, cid: str) -> list[dict[str, Any]]:
    """Every row of ``cid`` (turns, head, index), with what names the conversation taken out."""
    from firefly_orm.conversation import INDEX_NAMESPACE, archive_namespace
    from firefly_orm.conversation import conversation_namespace as ns_of
    from firefly_orm.entry import derived_entry_id

    rows: list[dict[str, Any]] = []
    index = [e for e in store.load(INDEX_NAMESPACE) if e.key == cid]
    for namespace in (ns_of(cid), archive_namespace(cid)):
        for entry in [*store.load(namespace), *index]:
            data = entry.model_dump()
            assert data.pop("entry_id") == derived_entry_id(entry.namespace, entry.key)
            data.pop("namespace")
            data.pop("created_at")
            content = data["content"]
            content.pop("timestamp", None)
            if entry.key == "head":  # both paths stamp the head with the time they ran
                assert isinstance(content.pop("updated_at"), str)
                assert isinstance(content.pop("last_turn_at"), str)
            for part in (content, data["metadata"]):
                if "conversation_id" in part:
                    assert part.pop("conversation_id") == cid
            if entry.namespace == "conversation-index":
                data.pop("key")
            rows.append(data)
        index = []
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))


#: The first statement of the fast append, by backend: PostgreSQL's CTE, SQLite's
#: UPDATE of the head.
_FAST_APPEND = {"postgres": "WITH head AS", "sqlite": "SET content=json_set("}


def test_one_statement_append_writes_what_the_general_path_writes(
    sql_env: OpenedBackend, wire_for: Callable[[Any], Wire], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same rows, head content and versions, turn ids, summaries: with and without it."""
    from firefly_orm.conversation import _ops as ops

    store = sql_env.store
    summaries: list[str] = []

    def summarizer(turns: list[Any]) -> str:
        summaries.append(",".join(str(t.turn_id) for t in turns))
        return f"summary of {summaries[-1]}"

    def memory() -> ConversationMemory:
        return ConversationMemory(
            store=store,
            max_tokens=60,
            summarize_threshold=0,
            max_messages=14,
            summarizer=summarizer,
            keep_evicted=True,
        )

    wire = wire_for(store)
    with monkeypatch.context() as patch:
        patch.setattr(ops, "_one_statement_append", lambda uow: None)
        _turns_script(memory(), "general")
    general_statements = len(wire.statements)
    general_summaries = list(summaries)
    summaries.clear()
    wire.reset()
    _turns_script(memory(), "at-once")
    assert summaries == general_summaries and summaries  # the same evictions
    tried = sum(_FAST_APPEND[sql_env.name] in s for s in wire.statements)
    assert 0 < tried < 12  # taken, though not by every turn
    assert len(wire.statements) < general_statements
    assert _normalised_rows(store, "at-once") == _normalised_rows(store, "general")
    reader = memory()
    assert reader.get_context("at-once") == reader.get_context("general")


def test_one_statement_append_refuses_another_owner_and_writes_nothing(
    sql_env: OpenedBackend,
) -> None:
    from firefly_orm.errors import ConversationNotFoundError

    store = sql_env.store
    memory = ConversationMemory(store=store, max_tokens=10_000)
    memory.add_turn("c", "q0", "a0", user_id="u1")
    before = _normalised_rows(store, "c")
    with pytest.raises(ConversationNotFoundError):
        memory.add_turn("c", "q1", "a1", user_id="u2")
    assert _normalised_rows(store, "c") == before
    assert memory.add_turn("c", "q1", "a1", user_id="u1").turn_id == 1


def test_concurrent_one_statement_appends_keep_the_head_exact(sql_env: OpenedBackend) -> None:
    """Writers racing on one conversation: every turn stored once, ids dense, totals exact."""
    import threading

    store = sql_env.store
    memory = ConversationMemory(store=store, max_tokens=100_000)
    memory.add_turn("c", "first", "turn")
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            for i in range(10):
                memory.add_turn("c", f"w{w} q{i}", f"a{i}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    turns = memory.get_turns("c")
    assert [t.turn_id for t in turns] == list(range(41))
    assert len({t.user_prompt for t in turns}) == 41
    assert memory.get_total_tokens("c") == sum(t.token_estimate for t in turns)
    head = store.load_by_key("conversation:c", "head")
    assert head.content["turn_count"] == 41 and head.content["next_turn_id"] == 41
    assert head.content["total_messages"] == 82
    assert head.version == 41  # created by the first turn, then one version per turn


# ------------------------------------------------------------------ the deferred transaction


@pytest.fixture
def pg_store(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A PostgreSQL store (a schema of its own) that has connected once (its level is known)."""
    opened = open_backend(request, "postgres")
    try:
        opened.store.load("warm-up")
        yield opened.store
    finally:
        opened.close()


def _request(namespace: str, turn: int) -> Any:
    """A one-statement append of a small turn to the conversation in ``namespace``."""
    from firefly_orm.conversation._model import ConversationTurn
    from firefly_orm.conversation._rows import HEAD_KEY, turn_entry
    from firefly_orm.entry import derived_entry_id
    from firefly_orm.sql._ops import TurnAppend

    row = turn_entry(
        namespace,
        ConversationTurn(turn_id=turn, user_prompt="q", assistant_response="a"),
        None,
        text_search=True,
    )
    return TurnAppend(
        namespace=namespace,
        head_id=derived_entry_id(namespace, HEAD_KEY),
        conversation_id=namespace.split(":", 1)[1],
        row=row,
        tokens=row.content["token_estimate"],
        messages=2,
        token_cap=10_000,
        message_cap=None,
        owner=None,
    )


@pytest.mark.postgres
def test_an_append_committed_alone_ends_what_its_unit_of_work_may_do(pg_store: Any) -> None:
    """The append that ran without a transaction is committed; nothing may follow it."""
    from firefly_orm.entry import MemoryEntry

    memory = ConversationMemory(store=pg_store, max_tokens=10_000)
    memory.add_turn("c", "q0", "a0")
    with (
        pytest.raises(RuntimeError, match="committed on its own"),
        pg_store.unit_of_work() as uow,
    ):
        assert uow.entries.append_turn(_request("conversation:c", 1)) is not None
        uow.entries.save("other", MemoryEntry(content="must not be written"))
    assert [t.turn_id for t in memory.get_turns("c")] == [0, 1]
    assert pg_store.load("other") == []


@pytest.mark.postgres
def test_a_deferred_unit_of_work_is_one_transaction_once_begun(pg_store: Any) -> None:
    """Statements that need a transaction get one: rolled back together, sync and async."""
    from firefly_orm.entry import MemoryEntry

    with pytest.raises(KeyError), pg_store.unit_of_work() as uow:
        uow.entries.save("ns", MemoryEntry(key="a", content=1))
        uow.target.execute(sa.text("SELECT 1"))  # the caller's own statement, same transaction
        uow.entries.save("ns", MemoryEntry(key="b", content=2))
        raise KeyError("boom")
    assert pg_store.load("ns") == []

    async def run() -> None:
        with pytest.raises(KeyError):
            async with pg_store.async_unit_of_work() as uow:
                await uow.run_sync(lambda u: u.entries.save("ns", MemoryEntry(key="c", content=3)))
                await uow.run_on_target(lambda conn: conn.execute(sa.text("SELECT 1")))
                raise KeyError("boom")
        async with pg_store.async_unit_of_work() as uow:
            await uow.run_sync(lambda u: u.entries.save("ns", MemoryEntry(key="d", content=4)))
            await uow.commit()

    asyncio.run(run())
    assert [e.key for e in pg_store.load("ns")] == ["d"]


@pytest.mark.postgres
def test_an_append_that_writes_nothing_leaves_the_transaction_to_the_general_path(
    pg_store: Any, wire_for: Callable[[Any], Wire]
) -> None:
    """No head yet: the append writes nothing, and the general path then runs in one transaction."""
    wire = wire_for(pg_store)
    memory = ConversationMemory(store=pg_store, max_tokens=10_000)
    wire.reset()
    memory.add_turn("fresh", "q0", "a0")
    assert wire.counts() == EXPECTED["postgres"]["add_turn, first turn"]
    assert wire.transactions == 1
    assert [t.turn_id for t in memory.get_turns("fresh")] == [0]
