"""The ambiguous commit on PostgreSQL: the connection drops right after the commit.

A TCP proxy (:class:`pg_servers.CommitCutter`) sits between the store and the
test PostgreSQL server.  Armed, it forwards the next COMMIT, waits for the server
to answer that it committed, and cuts the connection before that answer reaches
the client.  So the turn IS stored, and ``add_turn`` raises
:class:`~firefly_orm.errors.DatabaseConnectionError`: the caller cannot know.
A turn without an idempotency key takes the one-statement append, which runs
in autocommit: the proxy then cuts after the server completed that statement
(the same ambiguity, with no COMMIT message).

* With ``idempotency_key=``, the retry (same store, same proxy, now passing
  everything) returns the stored turn and the conversation has it once.
* Without a key, the same retry stores it a second time: the control that shows
  the cut really came after the commit (and what the key is for).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from dbutil import drop_schema
from pg_servers import CommitCutter

from firefly_orm.conversation import ConversationMemory
from firefly_orm.errors import DatabaseConnectionError
from firefly_orm.sql import PostgreSQLStore

pytestmark = pytest.mark.postgres


@pytest.fixture
def cutter(postgres_url: str) -> Iterator[CommitCutter]:
    url = sa.engine.make_url(postgres_url)
    proxy = CommitCutter(url.host or "127.0.0.1", url.port or 5432)
    try:
        yield proxy
    finally:
        proxy.close()


@pytest.fixture
def schema(postgres_admin_engine: sa.Engine) -> Iterator[str]:
    name = "cut_" + uuid.uuid4().hex[:10]
    yield name
    drop_schema(postgres_admin_engine, name)


async def call(mode: str, obj: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    """``obj.name(...)`` in sync mode, ``await obj.async_name(...)`` in async mode."""
    if mode == "sync":
        return getattr(obj, name)(*args, **kwargs)
    return await getattr(obj, f"async_{name}")(*args, **kwargs)


@pytest.mark.parametrize("key", ["req-1", None], ids=["with-key", "without-key"])
@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_retry_after_the_connection_dropped_after_commit(
    cutter: CommitCutter, postgres_url: str, schema: str, mode: str, key: str | None
) -> None:
    store = PostgreSQLStore(
        cutter.url_for(postgres_url), schema_name=schema, pool_min_size=0, timeout=5
    )
    direct = PostgreSQLStore(postgres_url, schema_name=schema, pool_min_size=0)
    memory, observer = ConversationMemory(store=store), ConversationMemory(store=direct)
    try:
        await call(mode, store, "initialize")
        cid = await call(mode, memory, "new_conversation")
        await call(mode, memory, "add_turn", cid, "before", "ok")

        if key is None:
            # The one-statement append (a SELECT over the data-modifying CTEs, the
            # turn's first statement), in autocommit: committed as it completes.
            cutter.arm(b"SELECT")
            failed = r"^append_turn \(one statement, committed as it runs: it may have"
        else:  # an idempotency key takes the general path: BEGIN ... COMMIT
            cutter.arm()
            failed = r"^commit failed on"
        with pytest.raises(DatabaseConnectionError, match=failed):
            await call(mode, memory, "add_turn", cid, "hi", "hello", idempotency_key=key)
        assert cutter.cuts == 1
        stored = observer.get_turns(cid)  # read past the proxy: the commit happened
        assert [t.user_prompt for t in stored] == ["before", "hi"]

        again = await call(mode, memory, "add_turn", cid, "hi", "hello", idempotency_key=key)
        turns = observer.get_turns(cid)
        if key is not None:
            assert again.turn_id == stored[-1].turn_id  # the stored turn, returned
            assert [t.user_prompt for t in turns] == ["before", "hi"]
        else:
            assert [t.user_prompt for t in turns] == ["before", "hi", "hi"]
        assert observer.verify(cid) == []
        assert cutter.cuts == 1
    finally:
        await store.async_close()
        direct.close()
