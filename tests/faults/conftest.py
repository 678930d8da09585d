"""Fixtures of the fault-injection suite: servers of their own, to restart, kill and pollute.

* ``pg_cluster``: a disposable PostgreSQL cluster (``pg_createcluster`` on a
  reserved port, trust auth) of this pytest process (one per xdist worker), made
  once and dropped at the end of the session; each test gets it reset
  (:meth:`DisposableCluster.reset`: started again if a test left it stopped or
  killed, its synchronous standby setting, sessions, schemas and databases gone),
  or a new one when the reset fails.  Creating one costs ``initdb`` and a start
  (5 to 9 s on a loaded machine) and a drop; a reset, a start at most.  Skipped
  when it cannot be created, FAILED instead under ``--require-db postgres`` (CI has
  postgresql-common, so a missing ``pg_createcluster`` there is a broken
  environment, not a reason to skip).  The standbys of the switchover tests stay
  per test: they are promoted (a primary of their own), so nothing is left to reuse.
* ``dedicated_mongo_url``: a SecantusDB server for one test (a writer killed inside
  a transaction leaves it open, holding its documents until the server's
  transaction lifetime ends: a shared server would carry that into other tests),
  or ``FIREFLY_ORM_TEST_MONGO_URL`` when that is set.  Killed at the end: its
  data is thrown away, nothing needs a clean shutdown.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from faults.servers import (
    TRANSACTION_LIFETIME,
    ClusterUnavailable,
    DisposableCluster,
    MongoServer,
)


def _required(config: pytest.Config, db: str) -> bool:
    raw = str(config.getoption("--require-db") or "")
    return db in {name.strip().lower() for name in raw.split(",")}


def _unavailable(config: pytest.Config, db: str, reason: str) -> NoReturn:
    if _required(config, db):
        pytest.fail(f"{db} is required (--require-db) but unavailable: {reason}", pytrace=False)
    pytest.skip(f"{db} unavailable: {reason}")


class _SessionCluster:
    """The disposable cluster of this pytest process, made on first use."""

    def __init__(self) -> None:
        self.cluster: DisposableCluster | None = None

    def ready(self) -> DisposableCluster:
        """The cluster, reset for a test (a new one if the reset fails)."""
        if self.cluster is not None:
            try:
                self.cluster.reset()
                return self.cluster
            except ClusterUnavailable:  # damaged beyond a reset: start over
                self.drop()
        self.cluster = DisposableCluster.create()
        return self.cluster

    def drop(self) -> None:
        cluster, self.cluster = self.cluster, None
        if cluster is not None:
            cluster.drop()


@pytest.fixture(scope="session")
def _session_cluster() -> Iterator[_SessionCluster]:
    holder = _SessionCluster()
    try:
        yield holder
    finally:
        holder.drop()


@pytest.fixture
def pg_cluster(
    request: pytest.FixtureRequest, _session_cluster: _SessionCluster
) -> DisposableCluster:
    """The PostgreSQL 15 cluster of this pytest process, reset for this test (see above)."""
    try:
        return _session_cluster.ready()
    except ClusterUnavailable as exc:
        _unavailable(request.config, "postgres", f"no disposable cluster: {exc}")


@pytest.fixture
def dedicated_mongo_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A MongoDB server only this test uses (or the environment's server, when set).

    A writer killed inside a transaction leaves it open until the server's
    transaction lifetime ends (``transactionLifetimeLimitSeconds``); on the suite's
    own server that is :data:`TRANSACTION_LIFETIME` seconds, and on the
    environment's server it is set to that for the test (best effort) and restored.
    """
    url = os.environ.get("FIREFLY_ORM_TEST_MONGO_URL")
    if url:
        with _transaction_lifetime(url, TRANSACTION_LIFETIME):
            yield url
        return
    if importlib.util.find_spec("secantus") is None:
        _unavailable(request.config, "mongo", "SecantusDB is not installed")
    server = MongoServer(tmp_path / "mongo-data")
    try:
        server.start()
    except RuntimeError as exc:
        _unavailable(request.config, "mongo", str(exc))
    try:
        yield server.url
    finally:
        server.close()


@contextlib.contextmanager
def _transaction_lifetime(url: str, seconds: float) -> Iterator[None]:
    """``transactionLifetimeLimitSeconds`` set to ``seconds`` meanwhile, if the server lets us."""
    import pymongo
    from pymongo.errors import PyMongoError

    client: Any = pymongo.MongoClient(url, serverSelectionTimeoutMS=5000)
    try:
        try:
            old = client.admin.command(
                "setParameter", 1, transactionLifetimeLimitSeconds=max(1, int(seconds))
            )
        except PyMongoError:
            old = None
        yield
        if old is not None and "was" in old:
            with contextlib.suppress(PyMongoError):
                client.admin.command("setParameter", 1, transactionLifetimeLimitSeconds=old["was"])
    finally:
        client.close()
