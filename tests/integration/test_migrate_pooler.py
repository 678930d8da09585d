"""Migrations given the stores' URL with ``?pooler=transaction``.

The same URL a store is built from works for every way of migrating: the
programmatic API, ``alembic upgrade head`` through our env.py, and
``firefly-orm migrate`` (the option is taken off the URL before the driver sees
it, which would refuse it).  Directly on PostgreSQL, and through a PgBouncer in
transaction pooling mode.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_runner import run_cli
from dbutil import drop_schema
from integration.test_pgbouncer import with_pooler

from firefly_orm import migrate
from firefly_orm.entry import MemoryEntry
from firefly_orm.sql import PostgreSQLStore

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.fixture
def schema(postgres_url: str) -> Iterator[str]:
    name = "migpool_" + uuid.uuid4().hex[:10]
    yield name
    drop_schema(postgres_url, name)


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("FIREFLY_AGENTIC_")}


def _store_works(url: str, schema: str) -> None:
    store = PostgreSQLStore(url, schema_name=schema, pool_min_size=0)
    try:
        store.initialize(migrate=False)  # at head, or MigrationRequiredError
        store.save("ns", MemoryEntry(key="k", content="v"))
        loaded = store.load_by_key("ns", "k")
        assert loaded is not None and loaded.content == "v"
    finally:
        store.close()


@pytest.mark.parametrize("through", ["postgres", "pgbouncer"])
def test_the_api_migrates_through_a_pooler_url(
    request: pytest.FixtureRequest, postgres_url: str, schema: str, through: str
) -> None:
    server = postgres_url if through == "postgres" else request.getfixturevalue("pgbouncer_url")
    url = with_pooler(server)
    assert migrate.check(url, schema_name=schema) != []
    migrate.upgrade(url, schema_name=schema)
    assert migrate.current(url, schema_name=schema) == migrate.head()
    migrate.downgrade(url, "base", schema_name=schema)
    assert migrate.current(postgres_url, schema_name=schema) is None
    migrate.upgrade(url, schema_name=schema)
    migrate.require_head(url, schema_name=schema)
    assert migrate.check(postgres_url, schema_name=schema) == []
    _store_works(url, schema)


def test_alembic_through_our_env_accepts_a_pooler_url(postgres_url: str, schema: str) -> None:
    url = with_pooler(postgres_url)
    result = subprocess.run(
        [str(BIN / "alembic"), "-x", f"url={url}", "-x", f"schema={schema}", "upgrade", "head"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
    )
    assert result.returncode == 0, result.stderr
    assert migrate.current(postgres_url, schema_name=schema) == migrate.head()


def _cli_uses_the_migration_engine() -> bool:
    """``firefly-orm``'s migration engine is ``firefly_orm.migrate._commands.migration_engine``."""
    package = ROOT / "firefly_orm"
    sources = [package / "cli.py", *(package / "cli").glob("*.py")]
    return any("migration_engine" in path.read_text() for path in sources if path.is_file())


def test_the_cli_migrates_through_a_pooler_url(
    pgbouncer_url: str, postgres_url: str, schema: str
) -> None:
    if not _cli_uses_the_migration_engine():
        pytest.skip("firefly-orm's migration engine does not take ?pooler= off the URL yet")
    url = with_pooler(pgbouncer_url)
    for command in (["migrate"], ["check"], ["downgrade", "base"], ["migrate"]):
        result = run_cli(*command, "--url", url, "--schema", schema)
        assert result.returncode == 0, (command, result.stdout, result.stderr)
    assert migrate.check(postgres_url, schema_name=schema) == []
    _store_works(url, schema)
