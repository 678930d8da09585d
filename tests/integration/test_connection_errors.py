"""Connection failures are classified the same way on the sync and the async path.

For every kind of failure (the host does not resolve, the connection is refused,
the server never answers, the login is refused, no pooled connection is free),
on PostgreSQL and MongoDB, ``initialize()`` and ``await async_initialize()`` (and a
first operation, which initialises the store) raise
:class:`~firefly_orm.errors.DatabaseConnectionError` with the same message, no
secret in it.  The servers are real: a host name that cannot resolve (``.invalid``),
a loopback port nobody listens on, a socket that accepts and never answers, the
test PostgreSQL / MongoDB server with an unknown role or user, and a disposable
PostgreSQL cluster that checks passwords (scram-sha-256).
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import sqlalchemy as sa
from faults.servers import PG_VERSION, ClusterUnavailable, DisposableCluster
from pg_servers import unavailable

from firefly_orm.errors import DatabaseConnectionError
from firefly_orm.sql import PostgreSQLStore
from firefly_orm.testing._secantus import free_port

SECRET = "s3cr3t-pw"
#: Seconds a store waits for a server that never answers.
TIMEOUT = 2


@pytest.fixture(scope="module")
def silent_port() -> Iterator[int]:
    """A loopback port whose connections are accepted by the kernel and never answered."""
    with socket.create_server(("127.0.0.1", 0), backlog=64) as sock:
        yield int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def password_cluster(request: pytest.FixtureRequest) -> Iterator[DisposableCluster]:
    """A disposable PostgreSQL cluster where role ``firefly_pw`` logs in with a password."""
    try:
        cluster = DisposableCluster.create()
    except ClusterUnavailable as exc:
        unavailable(request.config, "a disposable PostgreSQL cluster", str(exc))
    try:
        hba = Path("/etc/postgresql") / PG_VERSION / cluster.name / "pg_hba.conf"
        hba.write_text("host all firefly_pw 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
        engine = sa.create_engine(cluster.url, poolclass=sa.pool.NullPool)
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE ROLE firefly_pw LOGIN PASSWORD 'right-password'")
            conn.exec_driver_sql("SELECT pg_reload_conf()")
        engine.dispose()
        yield cluster
    finally:
        cluster.drop()


def _pg_url(host: str, port: int, user: str = "app", password: str = SECRET) -> str:
    return f"postgresql+psycopg://{user}:{quote(password, safe='')}@{host}:{port}/app"


def _role_url(postgres_url: str) -> str:
    url = sa.engine.make_url(postgres_url)
    role = "no_such_role_" + uuid.uuid4().hex[:6]
    return url.set(username=role, password=SECRET).render_as_string(hide_password=False)


#: kind -> (URL from the fixtures, a phrase of the driver's message for that kind)
PG_KINDS: dict[str, tuple[Callable[[pytest.FixtureRequest], str], str]] = {
    "dns": (lambda r: _pg_url("no-such-host.invalid", 5432), "failed to resolve host"),
    "refused": (lambda r: _pg_url("127.0.0.1", free_port()), "Connection refused"),
    "timeout": (
        lambda r: _pg_url("127.0.0.1", r.getfixturevalue("silent_port")),
        "timeout expired",
    ),
    "unknown-role": (
        lambda r: _role_url(r.getfixturevalue("postgres_url")),
        "does not exist",
    ),
    "wrong-password": (
        lambda r: _pg_url(
            "127.0.0.1", r.getfixturevalue("password_cluster").port, "firefly_pw", SECRET
        ).replace("/app", "/postgres"),
        "password authentication failed",
    ),
}


def _failure(call: Callable[[], Any]) -> DatabaseConnectionError:
    with pytest.raises(DatabaseConnectionError) as caught:
        call()
    return caught.value


async def _afailure(call: Callable[[], Any]) -> DatabaseConnectionError:
    with pytest.raises(DatabaseConnectionError) as caught:
        await call()
    return caught.value


async def _both_paths(
    make: Callable[[], Any], call: str
) -> tuple[DatabaseConnectionError, DatabaseConnectionError]:
    """The errors of ``call`` (``initialize``, or a first ``load``) on a sync and an async store."""
    sync_store, async_store = make(), make()
    try:
        if call == "initialize":
            sync_error = _failure(sync_store.initialize)
            async_error = await _afailure(async_store.async_initialize)
        else:  # a first operation initialises the store
            sync_error = _failure(partial(sync_store.load, "ns"))
            async_error = await _afailure(partial(async_store.async_load, "ns"))
    finally:
        sync_store.close()
        await async_store.async_close()
    return sync_error, async_error


def _check(message: str, phrase: str, where: str) -> None:
    assert phrase in message, message
    assert SECRET not in message and quote(SECRET, safe="") not in message
    assert where in message, message


@pytest.mark.postgres
@pytest.mark.parametrize("kind", sorted(PG_KINDS))
async def test_postgres_failures_are_connection_errors_on_both_paths(
    request: pytest.FixtureRequest, kind: str
) -> None:
    make_url, phrase = PG_KINDS[kind]
    url = make_url(request)
    messages: list[str] = []
    for call in ("initialize", "load"):
        sync_error, async_error = await _both_paths(
            partial(PostgreSQLStore, url, timeout=TIMEOUT, pool_min_size=0), call
        )
        assert type(sync_error) is type(async_error) is DatabaseConnectionError
        assert str(sync_error) == str(async_error)
        _check(str(sync_error), phrase, "initialize failed on postgresql+psycopg://")
        assert sync_error.__cause__ is not None
        messages.append(str(sync_error))
    assert messages[0] == messages[1]


@pytest.mark.postgres
@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_no_free_pooled_connection_is_a_connection_error(
    postgres_url: str, mode: str
) -> None:
    """The pool's own timeout (every connection checked out) on both paths."""
    schema = f"conn_err_pool_{mode}"  # one per parameter: xdist may run both at once
    store = PostgreSQLStore(
        postgres_url, pool_size=1, pool_min_size=0, timeout=1, schema_name=schema
    )
    try:
        store.initialize()
        if mode == "sync":
            with store.unit_of_work(), store.unit_of_work():  # pool_size + overflow
                error = _failure(lambda: store.load("ns"))
        else:
            async with store.async_unit_of_work(), store.async_unit_of_work():
                error = await _afailure(lambda: store.async_load("ns"))
        assert "load timed out waiting for a connection to" in str(error)
    finally:
        with store.engine.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await store.async_close()


# --------------------------------------------------------------------------- MongoDB


def _mongo_url(netloc: str, user: str | None = None, password: str = SECRET) -> str:
    auth = f"{user}:{quote(password, safe='')}@" if user else ""
    return (
        f"mongodb://{auth}{netloc}/?directConnection=true"
        "&serverSelectionTimeoutMS=1500&connectTimeoutMS=1500"
    )


def _netloc(mongo_url: str) -> str:
    rest = mongo_url.split("://", 1)[1]
    return rest.split("/", 1)[0].split("?", 1)[0].rsplit("@", 1)[-1]


@pytest.fixture(scope="module")
def mongo_user(mongo_url: str) -> Iterator[str]:
    """A user of the test MongoDB server whose password is ``right-password``."""
    import pymongo

    name = "firefly_" + uuid.uuid4().hex[:8]
    client: Any = pymongo.MongoClient(mongo_url, serverSelectionTimeoutMS=5000)
    try:
        client.admin.command("createUser", name, pwd="right-password", roles=[])
        yield name
        client.admin.command("dropUser", name)
    finally:
        client.close()


MONGO_KINDS: dict[str, tuple[Callable[[pytest.FixtureRequest], str], tuple[str, ...]]] = {
    "dns": (lambda r: _mongo_url("no-such-host.invalid:27017"), ("Name or service not known",)),
    "refused": (
        lambda r: _mongo_url(f"127.0.0.1:{free_port()}"),
        ("Connection refused", "Connect call failed"),
    ),
    "timeout": (
        lambda r: _mongo_url(f"127.0.0.1:{r.getfixturevalue('silent_port')}"),
        ("Timeout", "timed out"),
    ),
    "unknown-user": (
        lambda r: _mongo_url(_netloc(r.getfixturevalue("mongo_url")), "no_such_user"),
        ("uthentication failed",),
    ),
    "wrong-password": (
        lambda r: _mongo_url(
            _netloc(r.getfixturevalue("mongo_url")), r.getfixturevalue("mongo_user")
        ),
        ("uthentication failed",),
    ),
}


@pytest.mark.mongo
@pytest.mark.parametrize("kind", sorted(MONGO_KINDS))
async def test_mongo_failures_are_connection_errors_on_both_paths(
    request: pytest.FixtureRequest, kind: str
) -> None:
    from firefly_orm.mongo import MongoDBStore

    make_url, phrases = MONGO_KINDS[kind]
    url = make_url(request)
    for call in ("initialize", "load"):
        sync_error, async_error = await _both_paths(partial(MongoDBStore, url), call)
        assert type(sync_error) is type(async_error) is DatabaseConnectionError
        for error in (sync_error, async_error):
            message = str(error)
            assert any(phrase in message for phrase in phrases), message
            assert SECRET not in message and quote(SECRET, safe="") not in message
            assert message.startswith("cannot reach MongoDB at mongodb://"), message
        # The same words up to the driver's own text (which says how far its
        # server monitor got in the time: it varies from one attempt to the next).
        assert str(sync_error).split(": ", 1)[0] == str(async_error).split(": ", 1)[0]
