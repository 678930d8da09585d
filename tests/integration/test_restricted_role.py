"""Safe migrations on PostgreSQL: one migrator among many, and a least-privilege role.

* Several processes call ``initialize()`` on one fresh schema at once: exactly
  one of them runs the revision (Alembic's "Running upgrade" log line, captured
  in each process), the others wait on the advisory lock and then succeed.
* An application role with only USAGE on the schema and DML on the tables
  (the guide's grants, run as written) works with ``initialize(migrate=False)``
  and with ``initialize()`` on a migrated schema; on an un-migrated schema it
  gets a clear :class:`MigrationRequiredError`.
"""

from __future__ import annotations

import logging
import multiprocessing
import uuid
from collections.abc import Iterator
from pathlib import Path

import forked
import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory

from firefly_orm import migrate
from firefly_orm.entry import MemoryEntry
from firefly_orm.errors import MigrationRequiredError
from firefly_orm.sql import PostgreSQLStore

pytestmark = pytest.mark.postgres

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def schema(postgres_url: str) -> Iterator[str]:
    name = "rr_" + uuid.uuid4().hex[:10]
    yield name
    engine = sa.create_engine(postgres_url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.execute(sa.schema.DropSchema(name, cascade=True, if_exists=True))
    engine.dispose()


# --------------------------------------------------------------------------- exactly one migrator


def _migrating_worker(
    url: str,
    schema: str,
    start: multiprocessing.synchronize.Event,
    queue: multiprocessing.Queue[tuple[str, int]],
) -> None:
    records: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    log = logging.getLogger("alembic.runtime.migration")
    log.addHandler(Capture())
    log.setLevel(logging.INFO)
    try:
        start.wait(60)
        store = PostgreSQLStore(url, schema_name=schema, pool_min_size=0)
        store.initialize()
        store.save("ns", MemoryEntry(content="ok"))
        store.close()
        ran = sum(1 for m in records if m.startswith("Running upgrade"))
        queue.put(("ok", ran))
    except Exception as exc:  # pragma: no cover - reported to the parent
        queue.put((f"error: {exc!r}", -1))


@pytest.mark.slow
def test_concurrent_initialize_runs_the_revision_exactly_once(
    postgres_url: str, schema: str
) -> None:
    ctx = forked.context()
    queue = ctx.Queue()
    start = ctx.Event()
    procs = [
        ctx.Process(target=_migrating_worker, args=(postgres_url, schema, start, queue))
        for _ in range(5)
    ]
    for p in procs:
        p.start()
    start.set()
    results = [queue.get(timeout=180) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert [status for status, _ in results] == ["ok"] * 5
    # one process ran every revision, the four others none
    revisions = len(list(ScriptDirectory.from_config(migrate.make_config()).walk_revisions()))
    assert sorted(ran for _, ran in results) == [0, 0, 0, 0, revisions]
    assert migrate.check(postgres_url, schema_name=schema) == []
    store = PostgreSQLStore(postgres_url, schema_name=schema, pool_min_size=0)
    try:
        assert len(store.load("ns")) == 5
    finally:
        store.close()


# --------------------------------------------------------------------------- least privilege

#: The guide's least-privilege grants (docs/guide/embedding/least-privilege.md shows the file).
GRANTS = REPO / "docs_src" / "least_privilege_grants.sql"


def guide_grants() -> str:
    """The GRANT statements of the guide's least-privilege page, as written there."""
    return GRANTS.read_text(encoding="utf-8")


@pytest.fixture
def app_role(postgres_url: str, schema: str) -> Iterator[str]:
    """A LOGIN role with no rights of its own (trust auth: no password)."""
    role = "rr_app_" + uuid.uuid4().hex[:8]
    engine = sa.create_engine(postgres_url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.exec_driver_sql(f'CREATE ROLE "{role}" LOGIN')
    try:
        yield role
    finally:
        with engine.begin() as conn:
            conn.execute(sa.schema.DropSchema(schema, cascade=True, if_exists=True))
            conn.exec_driver_sql(f'DROP OWNED BY "{role}"')
            conn.exec_driver_sql(f'DROP ROLE "{role}"')
        engine.dispose()


def _as(url: str, role: str) -> str:
    return sa.engine.make_url(url).set(username=role, password=None).render_as_string(False)


def _grant(postgres_url: str, schema: str, role: str) -> None:
    sql = guide_grants().replace("firefly_memory", schema).replace("firefly_app", role)
    engine = sa.create_engine(postgres_url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        for statement in sql.split(";"):
            lines = [ln for ln in statement.splitlines() if not ln.strip().startswith("--")]
            if "\n".join(lines).strip():
                conn.exec_driver_sql("\n".join(lines))
    engine.dispose()


def test_least_privilege_role_after_admin_migrated(
    postgres_url: str, schema: str, app_role: str
) -> None:
    migrate.upgrade(postgres_url, schema_name=schema)  # the admin
    _grant(postgres_url, schema, app_role)
    url = _as(postgres_url, app_role)

    store = PostgreSQLStore(url, schema_name=schema, pool_min_size=0)
    try:
        store.initialize(migrate=False)
        store.save("ns", MemoryEntry(key="k", content={"v": 1}))
        with store.unit_of_work() as uow:
            uow.entries.save("ns", MemoryEntry(key="k2", content=2))
            uow.entries.delete("ns", [e.entry_id for e in uow.entries.list("ns") if e.key == "k"])
            uow.commit()
        assert [e.key for e in store.load("ns")] == ["k2"]
        store.clear("ns")
        assert store.load("ns") == []
    finally:
        store.close()

    # initialize() (migrate=True) on a schema at head needs no DDL right either
    again = PostgreSQLStore(url, schema_name=schema, pool_min_size=0)
    try:
        again.initialize()
        again.save("ns", MemoryEntry(content="ok"))
    finally:
        again.close()

    # the role really is restricted: no DDL in the schema
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with pytest.raises(sa.exc.ProgrammingError, match="permission denied"), engine.begin() as conn:
        conn.execute(sa.text(f'CREATE TABLE "{schema}".sneaky (id int)'))
    engine.dispose()


def test_least_privilege_role_cannot_migrate(postgres_url: str, schema: str, app_role: str) -> None:
    engine = sa.create_engine(postgres_url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:  # the admin made the schema but did not migrate
        conn.execute(sa.schema.CreateSchema(schema))
        conn.exec_driver_sql(f'GRANT USAGE ON SCHEMA "{schema}" TO "{app_role}"')
    engine.dispose()
    url = _as(postgres_url, app_role)

    checking = PostgreSQLStore(url, schema_name=schema, pool_min_size=0)
    try:
        with pytest.raises(MigrationRequiredError, match="database not at head"):
            checking.initialize(migrate=False)
    finally:
        checking.close()

    migrating = PostgreSQLStore(url, schema_name=schema, pool_min_size=0)
    try:
        with pytest.raises(MigrationRequiredError) as info:
            migrating.initialize()
        message = str(info.value)
        assert "may not migrate" in message and "permission denied" in message
        assert "firefly-orm migrate" in message
    finally:
        migrating.close()
    assert migrate.current(postgres_url, schema_name=schema) is None
