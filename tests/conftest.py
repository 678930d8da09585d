"""Shared fixtures: real databases, the ``store`` backends and the ``mode`` switch.

Databases are resolved in this order (see DESIGN.md, "Testing against real databases"):

1. a URL from the environment (``FIREFLY_ORM_TEST_POSTGRES_URL``,
   ``FIREFLY_ORM_TEST_MONGO_URL``);
2. a testcontainers container, when a Docker daemon answers;
3. MongoDB only: a SecantusDB server (MongoDB wire protocol) started as a subprocess
   (``tests/mongo_server.py``);
4. otherwise the tests are skipped, with the reason.

``--require-db postgres,mongo`` turns those skips into failures, and also fails
the run at the end if any test marked ``postgres`` / ``mongo`` was skipped for
any other reason.

Backends live in :data:`BACKENDS` (name -> factory + marks); adding one is one entry.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import pytest
from dbutil import drop_mongo_database, drop_schema

# Rewrite asserts in the contract suite so failures show the compared values.
pytest.register_assert_rewrite("firefly_orm.testing")

DB_NAMES = ("postgres", "mongo")
POSTGRES_ENV = "FIREFLY_ORM_TEST_POSTGRES_URL"
MONGO_ENV = "FIREFLY_ORM_TEST_MONGO_URL"
POSTGRES_IMAGE = "postgres:16-alpine"
MONGO_IMAGE = "mongo:7"


# --------------------------------------------------------------------------- options / markers


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--require-db",
        action="store",
        default="",
        metavar="NAMES",
        help=(
            "comma-separated databases (postgres, mongo) that must be available: their "
            "fixtures fail instead of skipping, and the run fails if a test marked with "
            "one of them was skipped"
        ),
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "postgres: needs a PostgreSQL server")
    config.addinivalue_line("markers", "mongo: needs a MongoDB (wire-compatible) server")
    required = _required_dbs(config)
    config.stash[_REQUIRED] = required
    if required:
        config.pluginmanager.register(RequiredDbGuard(required), "firefly-orm-required-db")


_REQUIRED = pytest.StashKey[frozenset[str]]()


def _required_dbs(config: pytest.Config) -> frozenset[str]:
    raw = str(config.getoption("--require-db") or "")
    names = {name.strip().lower() for name in raw.split(",") if name.strip()}
    unknown = names - set(DB_NAMES)
    if unknown:
        raise pytest.UsageError(
            f"--require-db: unknown database(s) {sorted(unknown)}; choose from {DB_NAMES}"
        )
    return frozenset(names)


def _unavailable(config: pytest.Config, db: str, reason: str) -> NoReturn:
    """Skip (or fail, when ``db`` is required) because ``db`` is not available."""
    if db in config.stash[_REQUIRED]:
        pytest.fail(f"{db} is required (--require-db) but unavailable: {reason}", pytrace=False)
    pytest.skip(f"{db} unavailable: {reason}")


class RequiredDbGuard:
    """Fails the run when a test marked with a required database was skipped."""

    def __init__(self, required: frozenset[str]) -> None:
        self.required = required
        self.skipped: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped:
            hit = sorted(db for db in self.required if db in report.keywords)
            if hit:
                self.skipped.append(f"{report.nodeid} [{', '.join(hit)}]")

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.skipped and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.skipped:
            return
        terminalreporter.section("required databases (--require-db)", sep="=", red=True)
        terminalreporter.write_line(
            f"{len(self.skipped)} test(s) needing a required database were skipped; the run fails:"
        )
        for line in self.skipped:
            terminalreporter.write_line(f"  SKIPPED {line}")


# --------------------------------------------------------------------------- docker / servers


_docker_answer: dict[str, bool] = {}


def docker_available() -> bool:
    """Whether a Docker daemon answers (probed once, 2 s timeout)."""
    if "ok" not in _docker_answer:
        try:
            from testcontainers.core.docker_client import DockerClient

            DockerClient(timeout=2).client.ping()
            _docker_answer["ok"] = True
        except Exception:
            _docker_answer["ok"] = False
    return _docker_answer["ok"]


@pytest.fixture(scope="session")
def postgres_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A PostgreSQL SQLAlchemy URL (psycopg driver): env, then testcontainers, else skip."""
    url = os.environ.get(POSTGRES_ENV)
    if url:
        yield url
        return
    if docker_available():
        from testcontainers.community.postgres import PostgresContainer

        with PostgresContainer(POSTGRES_IMAGE, driver="psycopg") as container:
            yield container.get_connection_url()
        return
    _unavailable(request.config, "postgres", f"{POSTGRES_ENV} is not set and Docker is not running")


@pytest.fixture(scope="session")
def postgres_admin_engine(postgres_url: str) -> Iterator[Any]:
    """A sync engine for test bookkeeping (dropping per-test schemas)."""
    import sqlalchemy as sa

    engine = sa.create_engine(postgres_url, poolclass=sa.pool.NullPool)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def mongo_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A MongoDB URL: env, then testcontainers, then a SecantusDB subprocess, else skip.

    The resolution lives in ``tests/mongo_server.py`` (shared with the Mongo store
    tests, so one server serves the whole run).
    """
    from mongo_server import mongo_url_for_tests

    required = "mongo" in request.config.stash[_REQUIRED]
    with mongo_url_for_tests(required=required) as url:
        yield url


# --------------------------------------------------------------------------- backends


BackendFactory = Callable[[pytest.FixtureRequest, str], AbstractAsyncContextManager[Any]]


@dataclass(frozen=True)
class Backend:
    """One store backend of the ``store`` fixture."""

    factory: BackendFactory
    marks: tuple[pytest.MarkDecorator, ...] = field(default=())


async def close_store(store: Any, mode: str) -> None:
    """Close ``store`` the way ``mode`` code would (stores without close() are fine)."""
    if mode == "async" and callable(getattr(store, "async_close", None)):
        await store.async_close()
    elif callable(getattr(store, "close", None)):
        store.close()


@asynccontextmanager
async def memory_backend(request: pytest.FixtureRequest, mode: str) -> AsyncIterator[Any]:
    from firefly_orm.store import InMemoryStore

    yield InMemoryStore()


@asynccontextmanager
async def file_backend(request: pytest.FixtureRequest, mode: str) -> AsyncIterator[Any]:
    from firefly_orm.file_store import FileStore

    tmp_path: Path = request.getfixturevalue("tmp_path")
    store = FileStore(tmp_path / "memory")
    try:
        yield store
    finally:
        await close_store(store, mode)


@asynccontextmanager
async def sqlite_backend(request: pytest.FixtureRequest, mode: str) -> AsyncIterator[Any]:
    from firefly_orm.sql import SQLiteStore

    tmp_path: Path = request.getfixturevalue("tmp_path")
    store = SQLiteStore(tmp_path / "m.sqlite3")
    try:
        yield store
    finally:
        await close_store(store, mode)


@asynccontextmanager
async def postgres_backend(request: pytest.FixtureRequest, mode: str) -> AsyncIterator[Any]:
    """PostgreSQLStore in a schema of its own, dropped afterwards."""
    from firefly_orm.sql import PostgreSQLStore

    url: str = request.getfixturevalue("postgres_url")
    engine = request.getfixturevalue("postgres_admin_engine")
    schema = "t_" + uuid.uuid4().hex[:10]
    store = PostgreSQLStore(url, schema_name=schema)
    try:
        yield store
    finally:
        try:
            await close_store(store, mode)
        finally:
            drop_schema(engine, schema)


@asynccontextmanager
async def postgres_default_schema_backend(
    request: pytest.FixtureRequest, mode: str
) -> AsyncIterator[Any]:
    """PostgreSQLStore with the default schema ("firefly_memory").

    The schema is shared with anything else using the test database, so it is
    not dropped; the contract suite only writes namespaces of its own and
    clears them at the end of each test.
    """
    from firefly_orm.sql import PostgreSQLStore

    url: str = request.getfixturevalue("postgres_url")
    store = PostgreSQLStore(url)
    try:
        yield store
    finally:
        await close_store(store, mode)


@asynccontextmanager
async def mongo_backend(request: pytest.FixtureRequest, mode: str) -> AsyncIterator[Any]:
    """MongoDBStore in a database of its own, dropped afterwards."""
    from firefly_orm.mongo import MongoDBStore

    url: str = request.getfixturevalue("mongo_url")
    database = "t_" + uuid.uuid4().hex[:10]
    store = MongoDBStore(url, database=database)
    try:
        yield store
    finally:
        try:
            await close_store(store, mode)
        finally:
            drop_mongo_database(url, database)


#: Every backend the ``store`` fixture runs; one entry per backend.
BACKENDS: dict[str, Backend] = {
    "memory": Backend(memory_backend),
    "file": Backend(file_backend),
    "sqlite": Backend(sqlite_backend),
    "postgres": Backend(postgres_backend, (pytest.mark.postgres,)),
    "postgres_default_schema": Backend(postgres_default_schema_backend, (pytest.mark.postgres,)),
    "mongo": Backend(mongo_backend, (pytest.mark.mongo,)),
}


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    """Whether a test drives the sync methods or their ``async_`` twins."""
    return str(request.param)


@pytest.fixture(
    params=[pytest.param(name, marks=backend.marks) for name, backend in BACKENDS.items()],
)
async def store(request: pytest.FixtureRequest, mode: str) -> AsyncIterator[Any]:
    """A fresh store of each backend in :data:`BACKENDS`, closed after the test."""
    backend = BACKENDS[request.param]
    async with backend.factory(request, mode) as instance:
        yield instance
