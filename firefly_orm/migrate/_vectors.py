"""The vector history: the migrations of ``memory_vectors``, beside the main ones (internal).

Why a history of its own (its own directory, ``migrations/vector_versions``,
and its own version table,
:data:`~firefly_orm.vector._spec.VECTOR_VERSION_TABLE`) rather than an
Alembic branch of the main one: the main history has one head, and every
entry point (``alembic upgrade head``, ``initialize()``, :func:`check
<firefly_orm.migrate.check>`, a host's ``run_with_host``) keeps meaning "the
tables every store needs", which never need pgvector or sqlite-vec.  A branch
in the same version table would give that table two rows and every reader of
it two heads.  The vector history runs only when asked: a SQL store built with
``vectors=True`` (its ``migrate=`` rules apply: it upgrades or only checks),
:func:`upgrade_vectors`, ``firefly-orm migrate --vectors``.  It needs the main
history at head (its revisions name ``memory_entries``' columns), and runs
like the main one: one transaction holding the migration lock
(:func:`~firefly_orm.migrate._lock.migration_transaction`).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import op
from alembic.runtime.environment import EnvironmentContext
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

from firefly_orm.errors import MigrationRequiredError
from firefly_orm.migrate._commands import Target, _connect, _end, _schema_for, read_state
from firefly_orm.migrate._commands import downgrade as downgrade_main
from firefly_orm.migrate._config import head, make_config, script_location
from firefly_orm.migrate._lock import migration_transaction
from firefly_orm.vector._errors import VectorUnavailableError
from firefly_orm.vector._spec import VECTOR_VERSION_TABLE

__all__ = [
    "NO_PGVECTOR",
    "downgrade",
    "downgrade_vectors",
    "ensure_pgvector",
    "require_pgvector_version",
    "require_vectors",
    "upgrade_vectors",
    "vector_head",
    "vector_schema",
    "vectors_current",
    "vectors_location",
]

logger = logging.getLogger("firefly_orm")

#: What a PostgreSQL server without pgvector is told (the end of the message).
NO_PGVECTOR = (
    "install pgvector on the database server (the postgresql-<version>-pgvector package "
    "of Debian/Ubuntu's PostgreSQL repository, `brew install pgvector`, or a build from "
    "the pgvector sources; managed services list it as the `vector` extension), then run "
    "the vector migration again (`firefly-orm migrate --vectors`). Everything that needs "
    "no vectors keeps working without it"
)

_script: list[ScriptDirectory] = []
_script_lock = threading.Lock()


def vectors_location() -> str:
    """Directory of the vector revisions (beside the main ``versions``)."""
    return str(Path(script_location()) / "vector_versions")


def _vector_script() -> ScriptDirectory:
    """The vector history's ``ScriptDirectory``, read once per process."""
    if _script:
        return _script[0]
    with _script_lock:
        if not _script:
            script = ScriptDirectory(script_location(), version_locations=[vectors_location()])
            script.get_heads()
            _script.append(script)
    return _script[0]


def vector_head() -> str:
    """The head revision of the vector history."""
    heads = _vector_script().get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"firefly_orm vector migrations must have one head, found {heads}")
    return heads[0]


def vector_schema() -> str | None:
    """The schema a vector revision names explicitly (called inside a revision)."""
    schema: str | None = op.get_context().opts.get("version_table_schema")
    return schema


def ensure_pgvector(conn: Connection) -> str:
    """Create the ``vector`` extension if needed; return its schema, quoted.

    Raises:
        VectorUnavailableError: The server has no pgvector, or this role may
            not create the extension; nothing is written (the caller's
            transaction rolls back).
    """
    query = "SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'vector'"
    found = conn.execute(sa.text(query)).scalar()
    if found is None:
        available = conn.execute(
            sa.text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
        ).first()
        if available is None:
            raise VectorUnavailableError(
                "vectors on PostgreSQL need the pgvector extension, which this server does "
                f"not have: {NO_PGVECTOR}"
            )
        try:
            with conn.begin_nested():
                conn.execute(sa.text("CREATE EXTENSION IF NOT EXISTS vector"))
        except sa.exc.DBAPIError as exc:
            reason = str(exc.orig if exc.orig is not None else exc).strip().splitlines()[0]
            raise VectorUnavailableError(
                f"vectors on PostgreSQL need the pgvector extension, which this role may not "
                f"create ({reason}): ask a database owner or superuser to run "
                "`CREATE EXTENSION vector;` in this database, then run the vector migration "
                "again (`firefly-orm migrate --vectors`)"
            ) from exc
        found = conn.execute(sa.text(query)).scalar()
        logger.info("firefly_orm: created the pgvector extension in schema %s", found)
    return str(found)


def require_pgvector_version(conn: Connection, minimum: tuple[int, ...]) -> str:
    """The ``vector`` extension's schema (quoted), refusing a version below ``minimum``.

    Raises:
        VectorUnavailableError: pgvector is older; nothing is written.
    """
    row = conn.execute(
        sa.text(
            "SELECT extversion, extnamespace::regnamespace::text FROM pg_extension "
            "WHERE extname = 'vector'"
        )
    ).one()
    found = tuple(int(part) for part in str(row[0]).split(".") if part.isdigit())
    if found < minimum:
        wanted = ".".join(map(str, minimum))
        raise VectorUnavailableError(
            f"vector search needs pgvector {wanted} or later (iterative index scans), and "
            f"this database has {row[0]}: update it on the server, then run "
            "`ALTER EXTENSION vector UPDATE;` and the vector migration again "
            "(`firefly-orm migrate --vectors`)"
        )
    return str(row[1])


def _current(conn: Connection, schema: str | None) -> str | None:
    ctx = MigrationContext.configure(
        conn, opts={"version_table": VECTOR_VERSION_TABLE, "version_table_schema": schema}
    )
    return ctx.get_current_revision()


def vectors_current(target: Target, *, schema_name: str | None = None) -> str | None:
    """The vector revision the database is at (``None``: the vector tables were never made)."""
    with _connect(target) as (conn, caller_tx):
        schema = _schema_for(conn, schema_name)
        try:
            return _current(conn, schema)
        finally:
            _end(conn, caller_tx, commit=False)


def _run(conn: Connection, schema: str | None, destination: str, upgrading: bool) -> None:
    """Run the vector revisions from the database's revision to ``destination``."""
    script = _vector_script()

    def steps(rev: Any, _context: Any) -> Any:
        if upgrading:
            return script._upgrade_revs(destination, rev)
        return script._downgrade_revs(destination, rev)

    config = make_config(conn, schema_name=schema)
    previous = conn.get_execution_options().get("schema_translate_map")
    with EnvironmentContext(config, script, fn=steps, destination_rev=destination) as env:
        env.configure(
            connection=conn,
            version_table=VECTOR_VERSION_TABLE,
            version_table_schema=schema,
            transaction_per_migration=False,
        )
        if schema is not None:
            conn.execution_options(schema_translate_map={None: schema})
        try:
            with env.begin_transaction():
                env.run_migrations()
        finally:
            if schema is not None:
                conn.execution_options(schema_translate_map=previous)
        if not upgrading and not env.get_context().get_current_heads():
            version = sa.table(VECTOR_VERSION_TABLE, schema=schema)
            if sa.inspect(conn).has_table(VECTOR_VERSION_TABLE, schema=schema):
                conn.execute(sa.text(f"DROP TABLE {_quoted(conn, version)}"))


def _quoted(conn: Connection, table: sa.TableClause) -> str:
    preparer = conn.dialect.identifier_preparer
    name = preparer.quote(table.name)
    return name if table.schema is None else f"{preparer.quote_schema(table.schema)}.{name}"


def upgrade_vectors(
    target: Target, *, schema_name: str | None = None, revision: str = "head"
) -> None:
    """Create or upgrade the vector tables (the vector history) to ``revision``.

    A database already there is left alone (no DDL, no lock).  Otherwise one
    transaction holding the migration lock, as :func:`~firefly_orm.migrate.upgrade`.

    Raises:
        MigrationRequiredError: The main tables are not at head (upgrade them
            first: ``firefly-orm migrate``); nothing is written.
        VectorUnavailableError: PostgreSQL without pgvector, or a role that may
            not create the extension (the message says what to do); nothing
            is written.
    """
    with _connect(target) as (conn, caller_tx):
        schema = _schema_for(conn, schema_name)
        destination = vector_head() if revision in ("head", "heads") else revision
        try:
            at = _current(conn, schema)
        finally:
            _end(conn, caller_tx, commit=False)
        if at == destination:
            return
        with migration_transaction(conn, schema):
            if _current(conn, schema) == destination:
                return
            main = read_state(conn, schema)[0]
            if main != head():
                raise MigrationRequiredError(
                    f"the vector tables need firefly_orm's tables at head ({head()}), and "
                    f"schema {schema or '(default)'} is at {main}: run `firefly-orm migrate` "
                    "first"
                )
            _run(conn, schema, destination, upgrading=True)
    logger.info("firefly_orm vector tables in %s upgraded to %s", schema or "(default)", revision)


def downgrade_vectors(
    target: Target, revision: str = "base", *, schema_name: str | None = None
) -> None:
    """Downgrade the vector tables to ``revision`` (``"base"``: drop them and their version table).

    The entries stay; only their vectors go.
    """
    with _connect(target) as (conn, _caller_tx):
        schema = _schema_for(conn, schema_name)
        with migration_transaction(conn, schema):
            _run(conn, schema, revision, upgrading=False)
    logger.info("firefly_orm vector tables in %s downgraded to %s", schema or "(default)", revision)


def downgrade(target: Target, revision: str, *, schema_name: str | None = None) -> None:
    """Downgrade our tables to ``revision`` (``"base"`` drops them).

    Runs in one transaction holding the migration lock, like
    :func:`~firefly_orm.migrate.upgrade`.  When the vector tables exist they
    are dropped first (:func:`downgrade_vectors` to base, its own
    transaction; a WARNING is logged): they hang on the entries' table and its
    columns, and vectors can be made again (``firefly-orm reembed``).
    """
    if vectors_current(target, schema_name=schema_name) is not None:
        logger.warning("firefly_orm: dropping the vector tables before downgrading to %s", revision)
        downgrade_vectors(target, "base", schema_name=schema_name)
    downgrade_main(target, revision, schema_name=schema_name)


def require_vectors(target: Target, *, schema_name: str | None = None) -> None:
    """Raise :class:`MigrationRequiredError` unless the vector tables are at head (reads only)."""
    at = vectors_current(target, schema_name=schema_name)
    if at != vector_head():
        raise MigrationRequiredError(
            f"the vector tables are {'missing' if at is None else f'at {at}'} (need "
            f"{vector_head()}): run `firefly-orm migrate --vectors`, or build the store "
            "with migrate=True"
        )
