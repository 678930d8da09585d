"""Fixtures of the fault-injection suite: servers of their own, to restart, kill and pollute.

* ``pg_cluster``: a disposable PostgreSQL cluster (``pg_createcluster`` on a free
  port, trust auth), dropped at the end.  Skipped when it cannot be created,
  FAILED instead under ``--require-db postgres`` (CI has postgresql-common, so a
  missing ``pg_createcluster`` there is a broken environment, not a reason to skip).
* ``dedicated_mongo_url``: a SecantusDB server for one test (a writer killed inside
  a transaction leaves it open, holding its documents until the server's
  transaction lifetime ends: a shared server would carry that into other tests),
  or ``FIREFLY_ORM_TEST_MONGO_URL`` when that is set.
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


@pytest.fixture
def pg_cluster(request: pytest.FixtureRequest) -> Iterator[DisposableCluster]:
    """A PostgreSQL 15 cluster of this test's own, on a free port; dropped afterwards."""
    try:
        cluster = DisposableCluster.create()
    except ClusterUnavailable as exc:
        _unavailable(request.config, "postgres", f"no disposable cluster: {exc}")
    try:
        yield cluster
    finally:
        cluster.drop()


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
        server.stop()


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
