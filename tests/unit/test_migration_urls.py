"""The URL a migration is given: the stores' ``?pooler=`` option is accepted.

No database: the engine's connect call is intercepted (``do_connect``) to see
what the driver would be given, then stopped.  Migrations through a real
PgBouncer are in ``tests/integration/test_migrate_pooler.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from firefly_orm import migrate
from firefly_orm.errors import EntryValidationError
from firefly_orm.migrate._commands import migration_engine


class _Stopped(Exception):
    """Raised in place of connecting."""


def _driver_arguments(engine: sa.Engine) -> dict[str, Any]:
    """The keyword arguments the driver's ``connect()`` would get."""
    seen: dict[str, Any] = {}

    def capture(dialect: Any, record: Any, cargs: Any, cparams: dict[str, Any]) -> None:
        seen.update(cparams)
        raise _Stopped

    sa.event.listen(engine, "do_connect", capture)
    try:
        with pytest.raises(_Stopped):
            engine.connect()
    finally:
        engine.dispose()
    return seen


def _url(query: str = "") -> str:
    return f"postgresql://app:pw@db.invalid:6432/app{query}"


def test_a_transaction_pooler_is_taken_off_the_url_and_applied() -> None:
    engine = migration_engine(_url("?pooler=transaction&sslmode=require"))
    assert "pooler" not in engine.url.query
    assert engine.url.query["sslmode"] == "require"
    assert engine.url.drivername == "postgresql+psycopg"
    args = _driver_arguments(engine)
    assert "pooler" not in args
    assert args["prepare_threshold"] is None  # no server-side prepared statements
    assert args["sslmode"] == "require"


@pytest.mark.parametrize("query", ["", "?pooler=session"])
def test_without_a_transaction_pooler_statements_may_be_prepared(query: str) -> None:
    args = _driver_arguments(migration_engine(_url(query)))
    assert "pooler" not in args and "prepare_threshold" not in args


def test_the_callers_connect_arguments_are_kept() -> None:
    engine = migration_engine(_url("?pooler=transaction"), connect_args={"connect_timeout": 7})
    args = _driver_arguments(engine)
    assert args["connect_timeout"] == 7 and args["prepare_threshold"] is None


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("?pooler=statement", "statement pooling cannot run multi-statement transactions"),
        ("?pooler=pgbouncer", "not a pool mode"),
        ("?pooler=transaction&pooler=session", "give pooler= once"),
    ],
)
def test_a_bad_pooler_is_refused_before_connecting(query: str, message: str) -> None:
    # db.invalid never resolves: a connection attempt would be a DatabaseConnectionError.
    for call in (migrate.upgrade, migrate.current, migrate.check):
        with pytest.raises(EntryValidationError, match=message):
            call(_url(query), schema_name="s")
