"""Read replicas against a real streaming standby that applies each commit late.

A disposable primary cluster and a hot standby made from it with ``pg_basebackup
-R``, applying commits :data:`APPLY_DELAY` seconds late
(``recovery_min_apply_delay``); the main cluster is never touched.  Statements are
counted per server (the port of the connection each one ran on).  Checked:

* reads (history, turn listings, exports, ``load``) run on the standby, writes and
  the reads inside them on the primary: the standby gets no statement of a write;
* read-your-writes: right after this process added a turn, its reads go to the
  primary and see that turn (the standby does not have it yet); once the window
  has passed they go to the standby again;
* the standby really lags: a turn another process has just added is not in what
  this process reads from the standby, is there inside ``consistent_reads()`` and
  ``unit_of_work(read_only=True, consistent=True)``, and on the standby once it has
  applied the commit.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa
from faults.servers import ClusterUnavailable, DisposableCluster
from modes import call
from pg_servers import ServerUnavailable, create_standby, unavailable

from firefly_orm.conversation import ConversationMemory
from firefly_orm.conversation._rows import TURN_KEY_PREFIX, conversation_namespace
from firefly_orm.sql import PostgreSQLStore

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

#: Seconds the standby waits before applying each commit.
APPLY_DELAY = 2.0
#: The stores' read-your-writes window (above the standby's lag).
WINDOW = 4.0


class Replication:
    """A primary and its delayed standby."""

    def __init__(self, primary: DisposableCluster, standby: DisposableCluster) -> None:
        self.primary = primary
        self.standby = standby

    def store(self, schema: str, **options: Any) -> PostgreSQLStore:
        return PostgreSQLStore(
            self.primary.url,
            replica_url=self.standby.url,
            replica_window=WINDOW,
            schema_name=schema,
            pool_min_size=0,
            **options,
        )


@pytest.fixture(scope="module")
def replication(request: pytest.FixtureRequest) -> Iterator[Replication]:
    try:
        primary = DisposableCluster.create()
    except ClusterUnavailable as exc:
        unavailable(request.config, "a disposable PostgreSQL cluster", str(exc))
    try:
        try:
            standby = create_standby(primary, apply_delay=APPLY_DELAY)
        except ServerUnavailable as exc:
            unavailable(request.config, "a streaming standby", str(exc))
        try:
            yield Replication(primary, standby)
        finally:
            standby.drop()
    finally:
        primary.drop()


@pytest.fixture
def schema() -> str:
    return "rep_" + uuid.uuid4().hex[:10]


@contextmanager
def statements_per_server() -> Iterator[Counter[int]]:
    """Statements run meanwhile, by the port of the server they ran on (sync and async)."""
    counts: Counter[int] = Counter()

    def count(conn: sa.Connection, *args: Any) -> None:
        counts[int(conn.connection.driver_connection.info.port)] += 1  # type: ignore[union-attr]

    sa.event.listen(sa.Engine, "before_cursor_execute", count)
    try:
        yield counts
    finally:
        sa.event.remove(sa.Engine, "before_cursor_execute", count)


async def pause(mode: str, seconds: float) -> None:
    if mode == "sync":
        time.sleep(seconds)
    else:
        await asyncio.sleep(seconds)


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_reads_on_the_standby_writes_on_the_primary_and_your_own_writes(
    replication: Replication, schema: str, mode: str
) -> None:
    primary, standby = replication.primary.port, replication.standby.port
    store = replication.store(schema)
    memory = ConversationMemory(store=store)
    try:
        await call(mode, store, "initialize")
        cid = await call(mode, memory, "new_conversation")
        first = await call(mode, memory, "add_turn", cid, "hello", "hi there")
        await pause(mode, WINDOW)  # past the window; the standby has applied the turn

        with statements_per_server() as reads:
            turns = await call(mode, memory, "get_turns", cid)
            exported = await call(mode, memory, "export_conversation", cid)
            facts = await call(mode, store, "load", "some-namespace")
        assert [t.turn_id for t in turns] == [first.turn_id]
        assert exported["turns"][0]["user_prompt"] == "hello"
        assert facts == []
        assert reads[primary] == 0 and reads[standby] >= 3, dict(reads)

        with statements_per_server() as writes:
            second = await call(mode, memory, "add_turn", cid, "again", "sure")
        assert writes[primary] > 0 and writes[standby] == 0, dict(writes)

        # Read-your-writes: the standby has not applied the turn yet; the primary has.
        with statements_per_server() as own:
            turns = await call(mode, memory, "get_turns", cid)
        assert [t.turn_id for t in turns] == [first.turn_id, second.turn_id]
        assert own[standby] == 0 and own[primary] > 0, dict(own)

        await pause(mode, WINDOW)
        with statements_per_server() as later:
            turns = await call(mode, memory, "get_turns", cid)
        assert [t.turn_id for t in turns] == [first.turn_id, second.turn_id]
        assert later[primary] == 0 and later[standby] > 0, dict(later)
    finally:
        await store.async_close()


WRITER = """
import sys, time
from firefly_orm.conversation import ConversationMemory
from firefly_orm.sql import PostgreSQLStore
store = PostgreSQLStore(sys.argv[1], schema_name=sys.argv[2], pool_min_size=0)
ConversationMemory(store=store).add_turn(sys.argv[3], "from another process", "noted")
print(time.time(), flush=True)
store.close()
"""


def test_the_standby_lags_behind_another_processs_write(
    replication: Replication, schema: str
) -> None:
    """What another process just wrote: not on the standby yet, on the primary when asked."""
    store = replication.store(schema)
    memory = ConversationMemory(store=store)
    try:
        store.initialize()
        cid = memory.new_conversation()
        memory.add_turn(cid, "mine", "ok")
        time.sleep(WINDOW)
        assert [t.user_prompt for t in memory.get_turns(cid)] == ["mine"]

        done = subprocess.run(
            [sys.executable, "-c", WRITER, replication.primary.url, schema, cid],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        committed_at = float(done.stdout.split()[-1])
        namespace = conversation_namespace(cid)
        stale = [t.user_prompt for t in memory.get_turns(cid)]
        with store.unit_of_work(read_only=True) as uow:
            stale_rows = len(uow.entries.list(namespace, key_prefix=TURN_KEY_PREFIX))
        read_at = time.time()
        with store.consistent_reads():
            fresh = [t.user_prompt for t in memory.get_turns(cid)]
        with store.unit_of_work(read_only=True, consistent=True) as uow:
            fresh_rows = len(uow.entries.list(namespace, key_prefix=TURN_KEY_PREFIX))
        assert read_at - committed_at < APPLY_DELAY, "the writer took too long to exit"
        assert (stale, stale_rows) == (["mine"], 1)  # the standby has not applied it
        assert (fresh, fresh_rows) == (["mine", "from another process"], 2)

        time.sleep(APPLY_DELAY)
        assert [t.user_prompt for t in memory.get_turns(cid)] == fresh
    finally:
        store.close()


@pytest.mark.postgres
def test_a_fresh_stores_first_async_read_only_unit_of_work_runs_on_the_primary(
    postgres_url: str,
) -> None:
    """Initialising counts as a write (a replica may lag behind a new schema), so the
    first read-only unit of work of a fresh store reads the primary: here the "replica"
    is a database without the store's schema, which would fail the read."""
    from dbutil import drop_schema

    schema = "rfirst_" + uuid.uuid4().hex[:10]
    replica = sa.engine.make_url(postgres_url).set(database="postgres")

    async def run() -> Any:
        store = PostgreSQLStore(
            postgres_url,
            schema_name=schema,
            migrate=True,
            replica_url=replica.render_as_string(hide_password=False),
        )
        try:
            return await store.async_run_in_unit_of_work(
                lambda uow: uow.entries.get_by_key("ns", "k"), read_only=True
            )
        finally:
            await store.async_close()

    try:
        assert asyncio.run(run()) is None
    finally:
        drop_schema(postgres_url, schema)
