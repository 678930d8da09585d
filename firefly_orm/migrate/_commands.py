"""Running our migrations from code (internal; see :mod:`firefly_orm.migrate`).

:func:`upgrade`, :func:`downgrade`, :func:`stamp`, :func:`current`,
:func:`check` and :func:`require_head` on an engine, a connection or a URL; the
state they read (our version table, or a host's ``alembic_version`` holding our
revisions); and the refusal to migrate over a ``memory_entries`` table that our
migrations did not create (:func:`refuse_foreign_table`).  The transaction and
lock every migration runs in are :mod:`firefly_orm.migrate._lock`'s.

Upgrades and downgrades run Alembic's environment on our script directory
read once per process (:func:`~firefly_orm.migrate._config.script_directory`),
as ``alembic.command.upgrade`` / ``downgrade`` would on one they build anew
(:func:`alembic_upgrade`, :func:`alembic_downgrade`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.environment import EnvironmentContext
from alembic.runtime.migration import MigrationContext
from alembic.util import CommandError
from sqlalchemy.engine import URL, Connection, Engine

from firefly_orm.bridges import _telemetry
from firefly_orm.entry import TABLE_NAME, metadata
from firefly_orm.envnames import ENV_POSTGRES_SCHEMA, ENV_SQLITE_PATH
from firefly_orm.errors import (
    DatabaseConnectionError,
    EntryValidationError,
    MigrationRequiredError,
    MissingExtraError,
    redact_url,
    scrub_secret,
    url_secrets,
)
from firefly_orm.migrate._config import (
    BRANCH_LABEL,
    DEFAULT_SCHEMA,
    HOST_SCHEMA_OPTION,
    HOST_VERSION_TABLE,
    RUNNING_COMMAND,
    VERSION_TABLE,
    head,
    make_config,
    normalize_url,
    our_revisions,
    pooler_connect_args,
    script_directory,
    split_pooler_option,
    validate_schema_name,
)
from firefly_orm.migrate._lock import migration_transaction

__all__ = [
    "Target",
    "alembic_downgrade",
    "alembic_upgrade",
    "check",
    "current",
    "downgrade",
    "migrate_advice",
    "migration_engine",
    "open_connection",
    "read_state",
    "refuse_foreign_table",
    "require_head",
    "stamp",
    "upgrade",
]

logger = logging.getLogger("firefly_orm")

Target = Engine | Connection | str | URL


def _schema_for(connection: Connection, schema_name: str | None) -> str | None:
    if connection.dialect.name == "sqlite":
        return None
    return validate_schema_name(schema_name)


def migration_engine(url: str | URL, *, connect_args: Mapping[str, Any] | None = None) -> Engine:
    """An engine (no pool) for migrating the database at ``url``.

    ``url`` is normalised (:func:`~firefly_orm.migrate._config.normalize_url`).
    A PostgreSQL URL may carry the stores' ``?pooler=transaction|session``
    option: it is taken off the URL (the driver refuses unknown options) and
    applied as the stores apply it (behind a transaction pooler, no server-side
    prepared statements).  Nothing else is needed behind a pooler: every
    migration is one transaction, and its lock (``pg_advisory_xact_lock``) ends
    with it.

    Raises:
        EntryValidationError: not a database URL, or an unknown pool mode.
        MissingExtraError: the database's driver is not installed.
    """
    parsed = normalize_url(url)
    options = dict(connect_args or {})
    if parsed.get_backend_name() == "postgresql":
        parsed, pooler = split_pooler_option(parsed, "url")
        options.update(pooler_connect_args(pooler))
    try:
        return sa.create_engine(parsed, poolclass=sa.pool.NullPool, connect_args=options)
    except ImportError as exc:
        backend = parsed.get_backend_name()
        extra = "postgres" if backend == "postgresql" else backend
        raise MissingExtraError(f"{backend} URLs", extra, exc.name) from exc
    except sa.exc.ArgumentError as exc:
        raise EntryValidationError("url", f"{redact_url(parsed)}: {exc}") from exc


@contextmanager
def _connect(target: Target) -> Iterator[tuple[Connection, bool]]:
    """Yield ``(connection, caller_tx)``.

    ``caller_tx`` is True when ``target`` is the caller's own connection and it
    was already in a transaction: that transaction belongs to the caller, so it
    is never committed or rolled back here (work runs in a SAVEPOINT instead).
    """
    if isinstance(target, Connection):
        yield target, target.in_transaction()
        return
    if isinstance(target, Engine):
        with open_connection(target) as conn:
            yield conn, False
        return
    engine = migration_engine(target)
    try:
        with open_connection(engine) as conn:
            yield conn, False
    finally:
        engine.dispose()


@contextmanager
def open_connection(engine: Engine) -> Iterator[Connection]:
    """Connect, turning a failure into :class:`DatabaseConnectionError` (password hidden)."""
    try:
        conn = engine.connect()
    except sa.exc.DBAPIError as exc:
        # Not only OperationalError: a bad connect argument (``?foo=bar``,
        # ``connect_timeout=abc``) is a ProgrammingError from the driver.
        lines = str(exc.orig if exc.orig is not None else exc).strip().splitlines()
        reason = scrub_secret(lines[0] if lines else type(exc).__name__, url_secrets(engine.url))
        raise DatabaseConnectionError(
            f"cannot connect to {redact_url(engine.url)}: {reason}"
        ) from exc
    with conn:
        yield conn


def _end(conn: Connection, caller_tx: bool, *, commit: bool) -> None:
    """Finish the transaction WE began on ``conn`` (never the caller's)."""
    if caller_tx or not conn.in_transaction():
        return
    if commit:
        conn.commit()
    else:
        conn.rollback()


def _run_env(config: Config, name: str, revision: str, steps: Callable[..., Any]) -> None:
    """Run our env.py for the Alembic command ``name`` on the cached script directory.

    The body of ``alembic.command.upgrade`` / ``downgrade`` (online): an
    ``EnvironmentContext`` whose step function ``steps(script, rev)``
    plans the revisions from the database's ``rev`` to ``revision``, then
    env.py; only the ``ScriptDirectory`` is ours, read once per process,
    instead of one built (every revision file read again) per call.  The
    command's name goes to env.py in ``config.attributes``
    (:data:`~firefly_orm.migrate._config.RUNNING_COMMAND`).
    """
    if ":" in revision:
        raise CommandError("Range revision not allowed")
    script = script_directory()

    def step(rev: Any, _context: Any) -> Any:
        return steps(script, rev)

    config.attributes[RUNNING_COMMAND] = name
    with EnvironmentContext(config, script, fn=step, as_sql=False, destination_rev=revision):
        script.run_env()


def alembic_upgrade(config: Config, revision: str) -> None:
    """``alembic.command.upgrade(config, revision)`` on our cached script directory."""
    _run_env(config, "upgrade", revision, lambda script, rev: script._upgrade_revs(revision, rev))


def alembic_downgrade(config: Config, revision: str) -> None:
    """``alembic.command.downgrade(config, revision)`` on our cached script directory."""
    _run_env(
        config, "downgrade", revision, lambda script, rev: script._downgrade_revs(revision, rev)
    )


def _run(target: Target, schema_name: str | None, fn: Any, *args: Any) -> None:
    """Run the Alembic command ``fn(config, *args)`` in one locked migration transaction."""
    with _connect(target) as (conn, _caller_tx):
        schema = _schema_for(conn, schema_name)
        with migration_transaction(conn, schema):
            fn(make_config(conn, schema_name=schema), *args)


def _is_permission_error(exc: sa.exc.DBAPIError) -> bool:
    orig = exc.orig
    if getattr(orig, "sqlstate", None) == "42501":  # insufficient_privilege
        return True
    text = str(orig).lower()
    return "readonly database" in text or "permission denied" in text


def upgrade(target: Target, *, schema_name: str | None = None, revision: str = "head") -> None:
    """Upgrade our tables to ``revision`` (default: head); creates the schema if needed.

    A database already at head is left untouched (no DDL, no lock).  Otherwise
    the whole upgrade runs in one transaction holding the migration lock
    (PostgreSQL advisory lock per schema name, SQLite ``BEGIN IMMEDIATE``; see
    :mod:`firefly_orm.migrate`): concurrent callers migrate once, the rest wait
    and find the schema at head; a crash leaves the previous revision.

    Raises:
        MigrationRequiredError: the role may not create the schema or tables
            (migrate as an admin, then use ``initialize(migrate=False)``), the
            database is managed by a host's Alembic (mode (b)) and not at head,
            or the schema already holds a ``memory_entries`` table our
            migrations did not create (the Firefly framework's own store
            makes one); nothing is written then.
        sqlalchemy.exc.OperationalError: the lock was not granted in time
            (SQLite: ``database is locked`` after
            :data:`firefly_orm.migrate._lock.SQLITE_LOCK_TIMEOUT` seconds).
    """
    with _telemetry.migration("upgrade", revision), _connect(target) as (conn, caller_tx):
        schema = _schema_for(conn, schema_name)
        # A first look without the lock: a database at head needs no lock at all.
        if not _upgrade_needed(
            *_read_state(conn, caller_tx, schema), schema, revision, conn.engine.url
        ):
            return
        try:
            with migration_transaction(conn, schema):
                # Read again under the lock: a migrator that waited finds it done.
                state = read_state(conn, schema)
                if not _upgrade_needed(*state, schema, revision, conn.engine.url):
                    return
                alembic_upgrade(make_config(conn, schema_name=schema), revision)
        except (sa.exc.ProgrammingError, sa.exc.OperationalError) as exc:
            if not _is_permission_error(exc):
                raise
            reason = str(exc.orig).strip().splitlines()[0]
            raise MigrationRequiredError(
                f"database not at head and this role may not migrate it "
                f"(schema {schema or '(default)'}: {reason}); run `firefly-orm migrate` "
                "with a role that may create tables, then use initialize(migrate=False)"
            ) from exc
    logger.info("firefly_orm schema %s upgraded to %s", schema or "(default)", revision)


def _upgrade_needed(
    at: str | None, managed_by: str | None, schema: str | None, revision: str, url: URL
) -> bool:
    """Whether an upgrade to ``revision`` has work to do on a database at ``at``.

    Raises:
        MigrationRequiredError: a host's Alembic manages our revisions (mode (b))
            and the database is not at head, or ``at`` is a revision we do not know.
    """
    if managed_by == HOST_VERSION_TABLE:
        if at == head() and revision in ("head", "heads", head()):
            return False
        raise MigrationRequiredError(
            f"database not at head (at {at}); {migrate_advice(url, schema, managed_by)}"
        )
    if revision in ("head", "heads") and at == head():
        logger.debug("firefly_orm schema %s already at head", schema or "(default)")
        return False
    _refuse_unknown(at)
    return True


def downgrade(target: Target, revision: str, *, schema_name: str | None = None) -> None:
    """Downgrade our tables to ``revision`` (``"base"`` drops them).

    Runs in one transaction holding the migration lock, like :func:`upgrade`.
    """
    with _telemetry.migration("downgrade", revision):
        _run(target, schema_name, alembic_downgrade, revision)


def stamp(target: Target, revision: str = "head", *, schema_name: str | None = None) -> None:
    """Record ``revision`` in our version table without running migrations.

    Runs in one transaction holding the migration lock, like :func:`upgrade`.
    """
    _run(target, schema_name, command.stamp, revision)


def _read_state(
    conn: Connection, caller_tx: bool, schema: str | None
) -> tuple[str | None, str | None]:
    """:func:`read_state`, then end our read transaction (a caller's stays open)."""
    try:
        return read_state(conn, schema)
    finally:
        _end(conn, caller_tx, commit=False)


def read_state(conn: Connection, schema: str | None) -> tuple[str | None, str | None]:
    """(revision, version table holding it): ours first, then a host's (mode (b)).

    ``(None, None)``: no migration of ours is recorded anywhere.
    """
    ctx = MigrationContext.configure(
        conn, opts={"version_table": VERSION_TABLE, "version_table_schema": schema}
    )
    rev = ctx.get_current_revision()
    if rev is not None:
        return rev, VERSION_TABLE
    inspector = sa.inspect(conn)
    ours = our_revisions()
    for where in dict.fromkeys((schema, None)):
        if not inspector.has_table(HOST_VERSION_TABLE, schema=where):
            continue
        table = sa.table(HOST_VERSION_TABLE, sa.column("version_num"), schema=where)
        found = [v for v in conn.execute(sa.select(table.c.version_num)).scalars() if v in ours]
        if found:
            if not inspector.has_table(TABLE_NAME, schema=schema):
                host = f"{where}.{HOST_VERSION_TABLE}" if where else HOST_VERSION_TABLE
                raise MigrationRequiredError(
                    f"firefly_orm's revisions are recorded in the host's {host} table "
                    f"(at {found[0]}) but {TABLE_NAME} is not in schema "
                    f"{schema or '(default)'}: the host's Alembic created our tables in "
                    f"another schema; run it with `-x {HOST_SCHEMA_OPTION}={schema or 'NAME'}` "
                    "or give the store the schema_name the tables are in"
                )
            return found[0], HOST_VERSION_TABLE
    return None, None


def refuse_foreign_table(conn: Connection, schema: str | None) -> None:
    """Refuse a first migration over a ``memory_entries`` table that is not ours.

    Called before our first revision runs on a database where no migration of
    ours is recorded (:func:`read_state` gives ``(None, None)``): a table of
    that name there was made by someone else — the Firefly framework's own
    PostgreSQL store creates ``firefly_memory.memory_entries`` in its own shape
    — and the first revision would fail on it with a bare "already exists".

    Raises:
        MigrationRequiredError: such a table exists; the message says what was
            found and what to do.  Nothing is written.
    """
    inspector = sa.inspect(conn)
    if not inspector.has_table(TABLE_NAME, schema=schema):
        return
    found = [column["name"] for column in inspector.get_columns(TABLE_NAME, schema=schema)]
    where = f"{schema}.{TABLE_NAME}" if schema else TABLE_NAME
    table = sa.table(TABLE_NAME, schema=schema)
    empty = conn.execute(sa.select(sa.literal(1)).select_from(table).limit(1)).first() is None
    missing = [c.name for c in metadata.tables[TABLE_NAME].columns if c.name not in found]
    has_schemas = conn.dialect.name != "sqlite"
    elsewhere = (
        f"another schema (schema_name= / {ENV_POSTGRES_SCHEMA})"
        if has_schemas
        else f"another database file ({ENV_SQLITE_PATH})"
    )
    if missing:
        what = (
            f"is not firefly_orm's (its columns: {', '.join(found)}; firefly_orm's "
            f"{', '.join(missing)} are missing)"
        )
        if has_schemas:
            what += "; the Firefly framework's own PostgreSQL store creates such a table"
        todo = (
            "bring over any data you need from it (README: 'Migrating from the Firefly "
            f"framework'), then drop it, or give firefly_orm {elsewhere}"
        )
    else:
        what = (
            f"has firefly_orm's columns but no firefly_orm migration is recorded (no "
            f"{VERSION_TABLE}): it was made without the migrations"
        )
        todo = (
            "if its shape is that of a firefly_orm revision, record that revision with "
            f"`firefly-orm stamp REV`, or give firefly_orm {elsewhere}"
        )
    raise MigrationRequiredError(
        f"cannot create firefly_orm's tables: {where} already exists and {what}. It is "
        f"{'empty' if empty else 'NOT empty'}. Nothing was changed: {todo}"
    )


def current(target: Target, *, schema_name: str | None = None) -> str | None:
    """The revision the database is at (None when never migrated).

    Reads our own version table; when it is absent or empty, a host's
    ``alembic_version`` (in the schema, then the default schema) holding one of
    our revisions counts too (migrated from the host's Alembic, mode (b)).
    """
    with _connect(target) as (conn, caller_tx):
        schema = _schema_for(conn, schema_name)
        return _read_state(conn, caller_tx, schema)[0]


def _refuse_unknown(at: str | None) -> None:
    """A revision we do not know was written by a newer firefly_orm: never touch it."""
    if at is not None and at not in our_revisions():
        raise MigrationRequiredError(
            f"database is at firefly_orm revision {at!r}, which this version of "
            f"firefly_orm does not know (newest known: {head()!r}); it was migrated by a "
            "newer firefly_orm: upgrade the package instead of the database"
        )


def check(target: Target, *, schema_name: str | None = None) -> list[str]:
    """Revisions still to apply (``[]`` when the database is at head).

    Raises:
        MigrationRequiredError: the database is at a revision this version of
            the library does not know (a newer firefly_orm migrated it).
    """
    return _pending(current(target, schema_name=schema_name))


def _pending(at: str | None) -> list[str]:
    """Revisions from ``at`` to head, oldest first (refuses a revision we do not know)."""
    _refuse_unknown(at)
    script = script_directory()
    return list(reversed([rev.revision for rev in script.iterate_revisions(head(), at)]))


def migrate_advice(url: str | URL, schema_name: str | None, managed_by: str | None) -> str:
    """The command that brings a database to head, for the way it is managed.

    * Our revisions in the host's ``alembic_version`` (the host's Alembic runs
      our versions directory as a branch): the host's ``alembic upgrade
      firefly_orm@head`` (``firefly-orm migrate`` refuses such a database).
    * Our own version table (or nothing yet): ``firefly-orm migrate --url ...``
      with the schema spelled out, or the app's ``alembic upgrade head`` when
      its env.py calls :func:`~firefly_orm.migrate.run_with_host`.

    The URL is shown with its password hidden.
    """
    if managed_by == HOST_VERSION_TABLE:
        option = f" -x {HOST_SCHEMA_OPTION}={schema_name}" if schema_name else ""
        return (
            f"run your app's `alembic{option} upgrade {BRANCH_LABEL}@head` (firefly_orm's "
            f"revisions are recorded in its {HOST_VERSION_TABLE} table)"
        )
    parsed = normalize_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.get_driver_name() != "pysqlite":
        # An async store's engine (aiosqlite): the command migrates with the sync driver.
        parsed = parsed.set(drivername="sqlite")
    elif parsed.get_backend_name() == "postgresql" and parsed.get_driver_name() == "asyncpg":
        parsed = parsed.set(drivername="postgresql+psycopg")
    cli = f"firefly-orm migrate --url {redact_url(parsed)}"
    if parsed.get_backend_name() != "sqlite":
        cli += f" --schema {schema_name}" if schema_name else " --schema ''"
    return (
        f"run `{cli}`, or your app's `alembic upgrade head` when its env.py calls "
        "firefly_orm.migrate.run_with_host()"
    )


def require_head(target: Target, *, schema_name: str | None = None) -> None:
    """Raise :class:`MigrationRequiredError` unless the database is at head.

    The message names the command that migrates this database
    (:func:`migrate_advice`).
    """
    with _connect(target) as (conn, caller_tx):
        schema = _schema_for(conn, schema_name)
        at, managed_by = _read_state(conn, caller_tx, schema)
        url = conn.engine.url
        pending = _pending(at)
        elsewhere = _found_elsewhere(conn, caller_tx, schema) if pending and at is None else ""
    if pending:
        raise MigrationRequiredError(
            f"database not at head: {len(pending)} firefly_orm migration(s) pending "
            f"({', '.join(pending)}){elsewhere}; {migrate_advice(url, schema, managed_by)}"
        )


#: How many other schemas holding our tables a refusal names.
_SCHEMAS_NAMED = 3
#: Our version tables in schemas other than ``:schema`` that this role may read.
_OTHER_VERSION_TABLES = sa.text(
    "SELECT n.nspname FROM pg_catalog.pg_class c "
    "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
    "WHERE c.relname = :table AND c.relkind IN ('r', 'p') AND n.nspname <> :schema "
    "AND has_table_privilege(c.oid, 'SELECT') ORDER BY n.nspname"
)


def _found_elsewhere(conn: Connection, caller_tx: bool, schema: str | None) -> str:
    """Where else firefly_orm's tables are, as a sentence for :func:`require_head`'s error.

    PostgreSQL only: a store looking in the wrong schema (built without
    ``schema_name=`` while the app keeps our tables in ``firefly_memory``, say)
    finds nothing in its own schema although our tables are migrated in another
    one.  Lists every other schema holding our version table (readable by this
    role), those at head first; ``""`` when there is none.  Reads only.
    """
    if conn.dialect.name != "postgresql":
        return ""
    try:
        here = schema or conn.execute(sa.text("SELECT current_schema()")).scalar() or ""
        found: list[tuple[str, str | None]] = []
        others = conn.execute(
            _OTHER_VERSION_TABLES, {"table": VERSION_TABLE, "schema": here}
        ).scalars()
        for other in others.all():
            table = sa.table(VERSION_TABLE, sa.column("version_num"), schema=other)
            try:
                with conn.begin_nested():  # a schema dropped meanwhile is skipped
                    found.append((other, conn.execute(sa.select(table.c.version_num)).scalar()))
            except sa.exc.DBAPIError:
                continue
    finally:
        _end(conn, caller_tx, commit=False)
    found = [(name, at) for name, at in found if at is not None]
    if not found:
        return ""
    # At head first, then the usual name (DEFAULT_SCHEMA), then by name.
    found.sort(key=lambda item: (item[1] != head(), item[0] != DEFAULT_SCHEMA, item[0]))
    where = ", ".join(
        f"{name!r} ({'at head' if at == head() else f'at {at}'})"
        for name, at in found[:_SCHEMAS_NAMED]
    )
    if len(found) > _SCHEMAS_NAMED:
        where += f" and {len(found) - _SCHEMAS_NAMED} more"
    first = found[0][0]
    return (
        f". firefly_orm's tables were found in another schema: {where}, while this "
        f"looks in {here!r}: check schema_name= (e.g. SQLAlchemyStore(..., "
        f"schema_name={first!r}), `--schema {first}`); if you do mean {here!r}"
    )
