"""The ``pooler`` and ``replica_url`` / ``replica_window`` options, and where reads go.

No database: stores are built (engines too) but never connect.  What the options
do against real servers is in ``tests/integration/test_pgbouncer.py`` and
``tests/integration/test_replica.py``.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from firefly_orm.errors import EntryValidationError
from firefly_orm.sql import PostgreSQLStore, SQLiteStore
from firefly_orm.sql._engines import Engines
from firefly_orm.sql._replica import ReadRouter, consistent_reads


def _url(query: str = "") -> str:
    return f"postgresql://app:pw@db.internal:6432/app{query}"


@pytest.mark.parametrize(
    ("url", "pooler", "expected"),
    [
        (_url(), None, None),
        (_url(), "transaction", "transaction"),
        (_url("?pooler=transaction"), None, "transaction"),
        (_url("?pooler=session&sslmode=require"), None, "session"),
        (_url("?pooler=transaction"), "transaction", "transaction"),
    ],
)
def test_the_pooler_is_declared_by_argument_or_url(
    url: str, pooler: str | None, expected: str | None
) -> None:
    store = PostgreSQLStore(url, pooler=pooler)  # type: ignore[arg-type]
    assert store.pooler == expected
    assert "pooler" not in store.engine.url.query  # the driver never sees it
    if "sslmode" in url:
        assert store.engine.url.query["sslmode"] == "require"


@pytest.mark.parametrize(
    ("url", "pooler", "message"),
    [
        (_url(), "statement", "statement pooling cannot run multi-statement transactions"),
        (_url(), "bogus", "not a pool mode"),
        (_url("?pooler=bogus"), None, "not a pool mode"),
        (_url("?pooler=session"), "transaction", "pooler declared twice"),
        (_url("?pooler=transaction&pooler=session"), None, "give pooler= once"),
    ],
)
def test_bad_pooler_declarations_are_refused(url: str, pooler: str | None, message: str) -> None:
    with pytest.raises(EntryValidationError, match=message):
        PostgreSQLStore(url, pooler=pooler)  # type: ignore[arg-type]


def test_the_replica_url_may_declare_the_pooler() -> None:
    store = PostgreSQLStore(_url(), replica_url=_url("?pooler=transaction"))
    assert store.pooler == "transaction"
    assert store.has_replica
    assert "replica_url='postgresql+psycopg://app:***@db.internal:6432/app'" in repr(store)
    with pytest.raises(EntryValidationError, match="pooler declared twice"):
        PostgreSQLStore(_url("?pooler=session"), replica_url=_url("?pooler=transaction"))


def test_replica_options_are_checked(tmp_path: Path) -> None:
    with pytest.raises(EntryValidationError, match="replica_url: read replicas are for PostgreSQL"):
        SQLiteStore(tmp_path / "m.sqlite3", replica_url=_url())
    with pytest.raises(EntryValidationError, match="replica_url: not a PostgreSQL URL"):
        PostgreSQLStore(_url(), replica_url=f"sqlite:///{tmp_path / 'x.sqlite3'}")
    for bad in (-1.0, float("nan"), float("inf"), True, "5"):
        with pytest.raises(EntryValidationError, match="replica_window"):
            PostgreSQLStore(_url(), replica_url=_url(), replica_window=bad)
    assert not PostgreSQLStore(_url()).has_replica


def _router(window: float) -> ReadRouter:
    host = "h" + uuid.uuid4().hex[:8]  # a primary of this test's own
    primary = Engines(make_url(f"postgresql+psycopg://app@{host}/app"))
    replica = Engines(make_url(f"postgresql+psycopg://app@{host}-replica/app"))
    return ReadRouter(primary, replica, window)


def test_reads_go_to_the_replica_until_this_process_writes() -> None:
    router = _router(window=3600.0)
    assert router.for_read() is router.replica
    assert router.for_read(consistent=True) is router.primary
    router.wrote()
    assert router.for_read() is router.primary  # read-your-writes
    other = _router(window=3600.0)  # another primary server: unaffected
    assert other.for_read() is other.replica


def test_a_zero_window_sends_reads_to_the_replica_right_after_a_write() -> None:
    router = _router(window=0.0)
    router.wrote()
    assert router.for_read() is router.replica


def test_without_a_replica_every_read_is_on_the_primary() -> None:
    primary = Engines(make_url("postgresql+psycopg://app@solo/app"))
    router = ReadRouter(primary)
    router.wrote()
    assert router.for_read() is primary


def test_consistent_reads_hold_for_the_block_thread_and_task() -> None:
    router = _router(window=0.0)
    with consistent_reads():
        assert router.for_read() is router.primary
    assert router.for_read() is router.replica

    async def main() -> tuple[bool, bool]:
        async def inside() -> bool:
            await asyncio.sleep(0)
            return router.for_read() is router.primary

        with consistent_reads():
            in_block = await asyncio.create_task(inside())
        return in_block, await inside()

    assert asyncio.run(main()) == (True, False)
