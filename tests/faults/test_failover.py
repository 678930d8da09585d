"""Restarts behind PgBouncer, and a switchover to a promoted standby, under load.

The writers, events and checks of ``test_server_restart.py`` (sync threads and
async tasks adding turns to two conversations through ONE store object; every
error a :class:`~firefly_orm.errors.DatabaseConnectionError`; no acknowledged
turn lost or duplicated; the same store recovers by itself), in two more setups
on disposable clusters (the main cluster is never touched):

* **through PgBouncer** (transaction pooling, ``pooler="transaction"``): the
  PostgreSQL server behind it is restarted, stopped ``-m immediate`` and
  SIGKILLed; the store keeps talking to the same PgBouncer;
* **switchover**: the store's URL names two servers (``host=primary,standby``,
  ``target_session_attrs=read-write``); the primary is stopped (a planned
  switchover) or SIGKILLed (a crash), and its synchronous standby is promoted.
  Every acknowledged turn was on the standby before it was acknowledged, so none
  is lost.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from faults.servers import DisposableCluster
from faults.test_server_restart import _events, _load_through_events
from pg_servers import (
    PgBouncer,
    ServerUnavailable,
    create_standby,
    promote,
    stop_fast,
    unavailable,
)

from firefly_orm.sql import PostgreSQLStore

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


@pytest.fixture
def bouncer(request: pytest.FixtureRequest, pg_cluster: DisposableCluster) -> Iterator[PgBouncer]:
    """PgBouncer in front of the disposable cluster."""
    bouncer = PgBouncer(pg_cluster.url)
    try:
        bouncer.start()
    except ServerUnavailable as exc:
        unavailable(request.config, "pgbouncer", str(exc))
    try:
        yield bouncer
    finally:
        bouncer.stop()


def test_server_restarts_behind_pgbouncer_under_load(
    pg_cluster: DisposableCluster, bouncer: PgBouncer
) -> None:
    store = PostgreSQLStore(
        bouncer.url_for(pg_cluster.url),
        schema_name="faults",
        pool_size=4,
        pool_min_size=0,
        timeout=2,
        pooler="transaction",
    )
    try:
        store.initialize()
        _load_through_events(store, _events(pg_cluster), "postgres through pgbouncer")
    finally:
        store.close()


def _two_hosts(primary: DisposableCluster, standby: DisposableCluster) -> str:
    """One URL naming both servers; libpq connects to whichever accepts writes."""
    url = sa.engine.make_url(primary.url).set(host=None, port=None)
    url = url.update_query_dict(
        {
            "host": [f"127.0.0.1:{primary.port}", f"127.0.0.1:{standby.port}"],
            "target_session_attrs": "read-write",
        }
    )
    return url.render_as_string(hide_password=False)


@pytest.mark.parametrize("how", ["stop -m fast", "kill -9"])
def test_switchover_to_a_promoted_standby_under_load(
    request: pytest.FixtureRequest, pg_cluster: DisposableCluster, how: str
) -> None:
    try:
        standby = create_standby(pg_cluster, synchronous=True)
    except ServerUnavailable as exc:
        unavailable(request.config, "a streaming standby", str(exc))
    try:
        store = PostgreSQLStore(
            _two_hosts(pg_cluster, standby),
            schema_name="faults",
            pool_size=4,
            pool_min_size=0,
            timeout=2,
        )

        def switchover() -> None:
            if how == "kill -9":
                pg_cluster.kill_postmaster()
            else:
                stop_fast(pg_cluster)
            promote(standby)

        try:
            store.initialize()
            _load_through_events(store, [(f"{how} primary, promote standby", switchover)], how)
            with store.engine.connect() as conn:
                port = conn.exec_driver_sql("SELECT inet_server_port()").scalar_one()
            assert port == standby.port  # the promoted standby serves the store
        finally:
            store.close()
    finally:
        standby.drop()
