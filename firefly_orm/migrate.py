"""Programmatic migrations (Alembic) for firefly_orm's tables.

The Alembic environment ships inside the wheel (``firefly_orm/migrations``) and
lives at the repository root in a checkout (``migrations/``);
:func:`script_location` finds whichever is present.

Our migrations keep their own version table, ``firefly_orm_alembic_version``,
inside the store's schema (PostgreSQL) so they never collide with a host app's
``alembic_version``; the first revision carries the branch label
``firefly_orm``.  Tables are created under ``schema_translate_map`` so one
revision serves any schema name.

Use from code::

    from firefly_orm import migrate
    migrate.upgrade("postgresql+psycopg://app@db/app", schema_name="firefly_memory")
    migrate.check(engine, schema_name="firefly_memory")   # [] when at head

Every entry point — :func:`upgrade`, :func:`downgrade`, :func:`stamp`, a
store's ``initialize()``, ``firefly-orm migrate`` and ``alembic upgrade head``
through our ``env.py`` (:func:`run_environment`) — runs the migration the same
way: in ONE database transaction that first takes the database's migration
lock, then reads the current revision, then runs every revision's DDL and the
version-table update, and commits once.

* PostgreSQL: a transaction-level advisory lock (``pg_advisory_xact_lock``,
  one key per schema name).
* SQLite: the database's own write lock, ``BEGIN IMMEDIATE``, taken before
  anything is read; it works across processes, and a migrator waits for it
  :data:`firefly_orm.migration_lock.SQLITE_LOCK_TIMEOUT` seconds (30).
  SQLite's DDL is transactional, and the transaction is begun by us, so
  pysqlite never commits between statements; Alembic's batch copies
  (``_alembic_tmp_*``) run inside it too.

So several workers starting together migrate exactly once (the others wait,
re-read the revision and find the schema at head), and a process killed at any
point leaves the database at its previous revision, never half-migrated: the
next migration simply runs again.  A database already at head is left alone
(no DDL, no lock), so a least-privilege role may call ``initialize()`` too.
Inside a caller's own transaction (a :class:`~sqlalchemy.engine.Connection`
already in one) the migration runs in a SAVEPOINT of it and the caller's
commit decides; on SQLite the caller's BEGIN is then the lock.

Inside a host application's Alembic (see the README and
``docs/design/host-alembic.md``), the recommended way is one call in the app's
env.py, :func:`run_with_host`, with :func:`autogenerate_filters` in its
``context.configure``: our revisions keep their own version table, so the app's
history has one head; the app's ``alembic upgrade`` also upgrades ours, in the
same transaction, and every other app command (``downgrade -1``, ``revision
--autogenerate``, ``check``, ``current``, ``history``, ``stamp``) leaves ours
alone.  A dependency or merge scheme between the two histories was not chosen:
it would tie every app revision (or a merge per firefly_orm release) to ours
and let the app's ``downgrade -1`` walk into our revisions.  Two older ways
still work:

* (a) keep our own version table: call :func:`upgrade` (or ``firefly-orm
  migrate``) beside the host's ``alembic upgrade head``;
* (b) add :func:`versions_location` (``firefly_orm:migrations/versions`` in an
  ``alembic.ini``) to the host's ``version_locations`` and run ``alembic upgrade
  firefly_orm@head``: the HOST's env.py then runs our revisions, they are
  recorded in the host's version table and land in the host connection's
  default schema, or in the schema named by ``-x firefly_orm_schema=NAME`` /
  ``config.attributes["firefly_orm_schema"]`` (see :func:`revision_schema`).
  :func:`current`, :func:`check` and ``initialize(migrate=False)`` recognise a
  database migrated that way.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy.engine import URL, Connection, Engine

from firefly_orm.entry import TABLE_NAME, metadata
from firefly_orm.envnames import ENV_POSTGRES_URL, ENV_SQLITE_PATH, database_url_from_env
from firefly_orm.errors import (
    DatabaseConnectionError,
    EntryValidationError,
    MigrationRequiredError,
    MissingExtraError,
    redact_url,
    scrub_secret,
    url_secrets,
)
from firefly_orm.migration_lock import migration_transaction
from firefly_orm.search import is_search_index_object

__all__ = [
    "BRANCH_LABEL",
    "DEFAULT_SCHEMA",
    "HOST_SCHEMA_OPTION",
    "HOST_VERSION_TABLE",
    "HOST_OFFLINE_FROM_OPTION",
    "VERSION_TABLE",
    "autogenerate_filters",
    "check",
    "current",
    "downgrade",
    "head",
    "include_name",
    "include_object",
    "make_config",
    "migrate_advice",
    "normalize_url",
    "require_head",
    "revision_schema",
    "run_environment",
    "run_with_host",
    "script_location",
    "stamp",
    "upgrade",
    "validate_schema_name",
    "versions_location",
]

logger = logging.getLogger("firefly_orm")

VERSION_TABLE = "firefly_orm_alembic_version"
DEFAULT_SCHEMA = "firefly_memory"
#: The version table a host's Alembic uses by default (mode (b): our branch inside it).
HOST_VERSION_TABLE = "alembic_version"
#: The branch label of our first revision (``alembic upgrade firefly_orm@head`` in mode (b)).
BRANCH_LABEL = "firefly_orm"
#: ``-x`` argument / ``config.attributes`` key naming the schema for our tables in mode (b).
HOST_SCHEMA_OPTION = "firefly_orm_schema"
_OUR_TABLES = frozenset({TABLE_NAME, VERSION_TABLE})
_SCHEMA_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")

Target = Engine | Connection | str | URL


def validate_schema_name(schema_name: str | None) -> str | None:
    """Return a valid PostgreSQL schema name (or None); raise on anything else.

    The name is only ever passed to SQLAlchemy as an identifier (quoted by the
    dialect when needed), never interpolated into SQL text; this check keeps it
    to letters, digits and underscores, at most 63 characters.  The whole name
    must match (``re.fullmatch``: ``"abc\\n"`` is refused, not taken as ``abc``).
    """
    if schema_name is None:
        return None
    if not isinstance(schema_name, str) or not _SCHEMA_RE.fullmatch(schema_name):
        raise EntryValidationError(
            "schema_name",
            f"{schema_name!r} is not a valid schema name "
            "(letters, digits and underscores, not starting with a digit, at most 63 chars)",
        )
    return schema_name


def script_location() -> str:
    """Directory of the Alembic environment (installed copy first, then checkout)."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "migrations", here.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return str(candidate)
    raise FileNotFoundError("firefly_orm's migrations directory was not found")


def versions_location() -> str:
    """Directory of our revision files, for a host's ``version_locations`` (mode (b)).

    In an ``alembic.ini`` an installed package can also be named as the
    resource ``firefly_orm:migrations/versions`` (with ``path_separator =
    space``); from code, append this path::

        cfg.set_main_option(
            "version_locations", f"{host_versions} {migrate.versions_location()}"
        )
    """
    return str(Path(script_location()) / "versions")


def revision_schema() -> str | None:
    """The schema our revisions should name explicitly (called inside a revision).

    * Our own environment (``firefly_orm_alembic_version``): ``None`` — the
      schema is applied by ``schema_translate_map`` on the connection; in
      offline mode (``alembic upgrade head --sql``) there is no connection to
      translate, so the configured version table schema is named instead.
    * A host's environment (mode (b)): the schema given as
      ``alembic -x firefly_orm_schema=NAME`` or
      ``config.attributes["firefly_orm_schema"]``; ``None`` (the host
      connection's default schema) when neither is set.
    """
    from alembic import context as env_context
    from alembic import op

    migration_context = op.get_context()
    if migration_context.opts.get("version_table") == VERSION_TABLE:
        if migration_context.as_sql:
            return validate_schema_name(migration_context.opts.get("version_table_schema"))
        return None
    config = env_context.config
    name = config.attributes.get(HOST_SCHEMA_OPTION)
    if name is None:
        x_args: dict[str, str] = env_context.get_x_argument(as_dictionary=True)
        name = x_args.get(HOST_SCHEMA_OPTION) or None
    return validate_schema_name(name)


def _is_ours(name: str | None) -> bool:
    """Our tables: the entries, our version table and SQLite's full-text index tables."""
    return name in _OUR_TABLES or is_search_index_object(name, "table")


def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    """For a HOST app's ``env.py``: keep firefly_orm's tables out of its autogenerate.

    Alembic's autogenerate (``alembic revision --autogenerate``, ``alembic
    check``) compares the app's models with the LIVE database, so without this
    filter it proposes to drop our tables.  Pass it as
    ``context.configure(include_name=firefly_orm.migrate.include_name)``, or
    use :func:`autogenerate_filters` to combine it with a filter of your own.
    It returns False for our tables (the entries, our version table, and on
    SQLite the FTS5 tables of the full-text index) and for every index,
    constraint and column of theirs, True for everything else.
    """
    if type_ == "table":
        return not _is_ours(name)
    parent = parent_names.get("table_name") if isinstance(parent_names, Mapping) else None
    return not _is_ours(parent)


def include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    """``include_object`` twin of :func:`include_name` (also filters our indexes)."""
    if type_ == "table":
        return not _is_ours(name)
    table = getattr(obj, "table", None)
    return not (table is not None and _is_ours(getattr(table, "name", None)))


NameFilter = Callable[[str | None, str, Any], bool]
ObjectFilter = Callable[[Any, str | None, str, bool, Any], bool]


def autogenerate_filters(
    *,
    include_name: NameFilter | None = None,
    include_object: ObjectFilter | None = None,
    schema_name: str | None = None,
) -> dict[str, Any]:
    """``context.configure`` keyword arguments that keep our objects out of autogenerate.

    Combines our filters with the app's own: an object is compared only when
    the app's filter (if any) AND ours keep it.  With ``schema_name`` (our
    tables in their own PostgreSQL schema), that whole schema is left out too,
    which matters when the app's env.py passes ``include_schemas=True``::

        context.configure(
            connection=connection,
            target_metadata=Base.metadata,
            **migrate.autogenerate_filters(include_name=my_include_name),
        )

    Raises:
        EntryValidationError: ``schema_name`` is not a valid schema name.
    """
    own_schema = validate_schema_name(schema_name)
    app_name, app_object = include_name, include_object

    def name_filter(name: str | None, type_: str, parent_names: Any) -> bool:
        if own_schema is not None and type_ == "schema" and name == own_schema:
            return False
        if not _our_name_filter(name, type_, parent_names):
            return False
        return app_name is None or bool(app_name(name, type_, parent_names))

    def object_filter(
        obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
    ) -> bool:
        if not _our_object_filter(obj, name, type_, reflected, compare_to):
            return False
        return app_object is None or bool(app_object(obj, name, type_, reflected, compare_to))

    return {"include_name": name_filter, "include_object": object_filter}


_our_name_filter = include_name
_our_object_filter = include_object


def _own_include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    """Our env's filter: only our own table is compared or migrated, without the
    parts of the full-text index that the model does not describe (PostgreSQL's
    generated ``search_vector`` column and its GIN index)."""
    if type_ == "table":
        return name == TABLE_NAME
    return not is_search_index_object(name, type_)


def make_config(
    connection: Connection | None = None,
    *,
    url: str | URL | None = None,
    schema_name: str | None = None,
) -> Config:
    """An Alembic :class:`Config` for our environment, built in code (no ini file)."""
    cfg = Config()
    cfg.set_main_option("script_location", script_location())
    cfg.set_main_option("path_separator", "os")
    cfg.attributes["connection"] = connection
    cfg.attributes["schema_name"] = schema_name
    cfg.attributes["configure_logging"] = False
    if url is not None:
        cfg.attributes["url"] = url
    return cfg


def _schema_for(connection: Connection, schema_name: str | None) -> str | None:
    if connection.dialect.name == "sqlite":
        return None
    return validate_schema_name(schema_name)


def normalize_url(url: str | URL) -> URL:
    """Parse ``url``; plain ``postgresql://`` / ``postgres://`` get the psycopg (3) driver.

    Raises:
        EntryValidationError: not a database URL (the message hides the password).
    """
    try:
        parsed = sa.engine.make_url(url)
    except (sa.exc.ArgumentError, ValueError, TypeError) as exc:
        raise EntryValidationError("url", f"not a database URL: {redact_url(url)}") from exc
    if parsed.drivername in ("postgres", "postgresql"):
        # "postgres://" is the usual form of hosted DATABASE_URLs.
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


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
        with _open(target) as conn:
            yield conn, False
        return
    url = normalize_url(target)
    try:
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    except ImportError as exc:
        extra = "postgres" if url.get_backend_name() == "postgresql" else url.get_backend_name()
        raise MissingExtraError(f"{url.get_backend_name()} URLs", extra, exc.name) from exc
    except sa.exc.ArgumentError as exc:
        raise EntryValidationError("url", f"{redact_url(url)}: {exc}") from exc
    try:
        with _open(engine) as conn:
            yield conn, False
    finally:
        engine.dispose()


@contextmanager
def _open(engine: Engine) -> Iterator[Connection]:
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
    the module docstring): concurrent callers migrate once, the rest wait and
    find the schema at head; a crash leaves the previous revision.

    Raises:
        MigrationRequiredError: the role may not create the schema or tables
            (migrate as an admin, then use ``initialize(migrate=False)``), or the
            database is managed by a host's Alembic (mode (b)) and not at head.
        sqlalchemy.exc.OperationalError: the lock was not granted in time
            (SQLite: ``database is locked`` after
            :data:`firefly_orm.migration_lock.SQLITE_LOCK_TIMEOUT` seconds).
    """
    with _connect(target) as (conn, caller_tx):
        schema = _schema_for(conn, schema_name)
        # A first look without the lock: a database at head needs no lock at all.
        if not _upgrade_needed(
            *_read_state(conn, caller_tx, schema), schema, revision, conn.engine.url
        ):
            return
        try:
            with migration_transaction(conn, schema):
                # Read again under the lock: a migrator that waited finds it done.
                if not _upgrade_needed(*_state(conn, schema), schema, revision, conn.engine.url):
                    return
                command.upgrade(make_config(conn, schema_name=schema), revision)
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
    _run(target, schema_name, command.downgrade, revision)


def stamp(target: Target, revision: str = "head", *, schema_name: str | None = None) -> None:
    """Record ``revision`` in our version table without running migrations.

    Runs in one transaction holding the migration lock, like :func:`upgrade`.
    """
    _run(target, schema_name, command.stamp, revision)


def head() -> str:
    """The head revision of our migrations."""
    script = ScriptDirectory.from_config(make_config())
    heads = script.get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"firefly_orm migrations must have one head, found {heads}")
    return heads[0]


def _our_revisions() -> set[str]:
    script = ScriptDirectory.from_config(make_config())
    return {rev.revision for rev in script.walk_revisions()}


def _read_state(
    conn: Connection, caller_tx: bool, schema: str | None
) -> tuple[str | None, str | None]:
    """:func:`_state`, then end our read transaction (a caller's stays open)."""
    try:
        return _state(conn, schema)
    finally:
        _end(conn, caller_tx, commit=False)


def _state(conn: Connection, schema: str | None) -> tuple[str | None, str | None]:
    """(revision, version table holding it): ours first, then a host's (mode (b))."""
    ctx = MigrationContext.configure(
        conn, opts={"version_table": VERSION_TABLE, "version_table_schema": schema}
    )
    rev = ctx.get_current_revision()
    if rev is not None:
        return rev, VERSION_TABLE
    inspector = sa.inspect(conn)
    ours = _our_revisions()
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
    if at is not None and at not in _our_revisions():
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
    script = ScriptDirectory.from_config(make_config())
    return list(reversed([rev.revision for rev in script.iterate_revisions(head(), at)]))


def migrate_advice(url: str | URL, schema_name: str | None, managed_by: str | None) -> str:
    """The command that brings a database to head, for the way it is managed.

    * Our revisions in the host's ``alembic_version`` (the host's Alembic runs
      our versions directory as a branch): the host's ``alembic upgrade
      firefly_orm@head`` (``firefly-orm migrate`` refuses such a database).
    * Our own version table (or nothing yet): ``firefly-orm migrate --url ...``
      with the schema spelled out, or the app's ``alembic upgrade head`` when
      its env.py calls :func:`run_with_host`.

    The URL is shown with its password hidden.
    """
    if managed_by == HOST_VERSION_TABLE:
        option = f" -x {HOST_SCHEMA_OPTION}={schema_name}" if schema_name else ""
        return (
            f"run your app's `alembic{option} upgrade {BRANCH_LABEL}@head` (firefly_orm's "
            f"revisions are recorded in its {HOST_VERSION_TABLE} table)"
        )
    parsed = normalize_url(url)
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
    if pending:
        raise MigrationRequiredError(
            f"database not at head: {len(pending)} firefly_orm migration(s) pending "
            f"({', '.join(pending)}); {migrate_advice(url, schema, managed_by)}"
        )


# --------------------------------------------------------------------------- env.py


def _environment_url(config: Any, x_args: dict[str, str]) -> str | None:
    """The URL given to ``env.py``: attribute, ``-x url=``, environment, ``alembic.ini``."""
    url: str | None = (
        config.attributes.get("url")
        or x_args.get("url")
        or database_url_from_env()
        or config.get_main_option("sqlalchemy.url")
    )
    return url


def _configure(context: Any, schema: str | None, **options: Any) -> None:
    """``context.configure`` with our metadata and version table (in ``schema``)."""
    context.configure(
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        version_table_schema=schema,
        **options,
    )


def _configure_and_run(context: Any, connection: Connection, schema: str | None) -> None:
    """Run the migrations on ``connection`` in the migration transaction (:func:`upgrade`'s).

    A connection already in a transaction is in ours (lock taken by
    :func:`upgrade` / :func:`downgrade` / :func:`stamp`) or in its owner's, who
    commits it; any other gets one locked transaction here (``alembic upgrade``).
    """
    if connection.in_transaction():
        _run_migrations(context, connection, schema)
        return
    with migration_transaction(connection, schema):
        _run_migrations(context, connection, schema)


def _run_migrations(context: Any, connection: Connection, schema: str | None) -> None:
    # CREATE SCHEMA needs the CREATE right on the database even with IF NOT
    # EXISTS; skip it when the schema is there (an admin may have made it).
    if schema is not None and not sa.inspect(connection).has_schema(schema):
        connection.execute(sa.schema.CreateSchema(schema, if_not_exists=True))
    # Connection.execution_options() changes the connection IN PLACE: a caller's
    # (a host app's) connection gets its own mapping back afterwards, or its
    # later statements would land in our schema.
    previous = connection.get_execution_options().get("schema_translate_map")
    if schema is not None:
        connection.execution_options(schema_translate_map={None: schema})
    try:
        _configure_and_migrate(context, connection, schema)
    finally:
        if schema is not None:
            connection.execution_options(schema_translate_map=previous)


def _configure_and_migrate(context: Any, connection: Connection, schema: str | None) -> None:
    is_sqlite = connection.dialect.name == "sqlite"
    _configure(
        context,
        schema,
        connection=connection,
        include_name=_own_include_name,
        render_as_batch=is_sqlite,
        compare_type=True,
        transaction_per_migration=False,
    )
    # In a transaction already, so Alembic begins and commits nothing itself
    # (on SQLite it would otherwise commit after each revision).
    with context.begin_transaction():
        context.run_migrations()


def run_environment(context: Any) -> None:
    """Body of ``migrations/env.py`` (online and offline modes)."""
    config = context.config
    x_args: dict[str, str] = context.get_x_argument(as_dictionary=True)
    schema_arg = config.attributes.get("schema_name")
    if schema_arg is None and "schema" in x_args:
        schema_arg = x_args["schema"] or None
    explicit_schema = "schema_name" in config.attributes or "schema" in x_args

    def url_schema(backend: str) -> str | None:
        """The schema on a database we connect to ourselves (none on SQLite)."""
        if backend == "sqlite":
            return None
        return validate_schema_name(schema_arg if explicit_schema else DEFAULT_SCHEMA)

    if context.is_offline_mode():
        url = _environment_url(config, x_args)
        if not url:
            raise RuntimeError("no database URL: pass -x url=... (offline mode)")
        offline_url = normalize_url(url)
        schema = url_schema(offline_url.get_backend_name())
        # Inside a host's script (run_with_host) the host's BEGIN/COMMIT frame ours.
        within_host = bool(config.attributes.get(_WITHIN_HOST))
        _configure(
            context,
            schema,
            url=offline_url,
            literal_binds=True,
            **({"transactional_ddl": False} if within_host else {}),
        )
        with context.begin_transaction():
            if schema is not None:
                # The version table (created first) lives in the schema too.
                context.execute(sa.schema.CreateSchema(schema, if_not_exists=True))
            context.run_migrations()
        return

    connection: Connection | None = config.attributes.get("connection")
    if connection is not None:
        schema = None if connection.dialect.name == "sqlite" else validate_schema_name(schema_arg)
        _configure_and_run(context, connection, schema)
        return

    url = _environment_url(config, x_args)
    if not url:
        raise RuntimeError(
            f"no database URL: pass `alembic -x url=...` or set {ENV_POSTGRES_URL}"
            f" / {ENV_SQLITE_PATH}"
        )
    engine = sa.create_engine(normalize_url(url), poolclass=sa.pool.NullPool)
    try:
        with _open(engine) as conn:
            _configure_and_run(context, conn, url_schema(conn.dialect.name))
    finally:
        engine.dispose()


# --------------------------------------------------------------------------- a host's env.py

#: ``alembic -x firefly_orm_from=REV upgrade A:B --sql``: where our part of an
#: offline script starts (see :func:`run_with_host`).
HOST_OFFLINE_FROM_OPTION = "firefly_orm_from"
#: ``config.attributes`` flag of our environment when it runs inside a host's.
_WITHIN_HOST = "firefly_orm_within_host"
#: What ``run_with_host`` does for each Alembic command (see :func:`_host_command`).
_UPGRADING_COMMANDS = frozenset({"upgrade"})


def _host_command(context: Any) -> str | None:
    """The ``alembic.command`` function running the host's env.py (``"upgrade"``, ...).

    Alembic's commands pass their step function as ``fn=`` to the
    :class:`~alembic.runtime.environment.EnvironmentContext`; it is defined
    inside the command (``upgrade.<locals>.upgrade``,
    ``downgrade.<locals>.downgrade``, ``stamp.<locals>.do_stamp``,
    ``check.<locals>.retrieve_migrations``, ...), so the enclosing function's
    name is the command's.  None when that cannot be told (another caller, or
    an Alembic that does it differently): the caller then does nothing.
    """
    try:
        fn = context.get_context().opts.get("fn")
    except (AttributeError, CommandError):  # not configured, or not an Alembic context
        return None
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", "")
    if module != "alembic.command" or ".<locals>." not in qualname:
        return None
    return str(qualname.split(".<locals>.", 1)[0])


@contextmanager
def _keep_alembic_proxies() -> Iterator[None]:
    """Put the host's ``alembic.context`` / ``alembic.op`` back after ours ran.

    Alembic installs one global proxy per module and REMOVES it when an
    environment ends; our nested environment would leave the host's env.py
    without ``context.run_migrations``.
    """
    from alembic import context as context_module
    from alembic import op as op_module

    saved = [getattr(module, "_proxy", None) for module in (context_module, op_module)]
    try:
        yield
    finally:
        for proxy in saved:
            if proxy is not None:
                proxy._install_proxy()


def run_with_host(
    context: Any,
    connection: Connection | None,
    *,
    schema_name: str | None = None,
    upgrade_ours: bool | None = None,
) -> None:
    """Upgrade firefly_orm's tables from a HOST app's Alembic ``env.py``, in its transaction.

    One call in the app's env.py, after ``context.configure(...)`` and inside
    ``with context.begin_transaction():``, before ``context.run_migrations()``
    (so the app's revisions may refer to our tables)::

        with context.begin_transaction():
            migrate.run_with_host(context, connection, schema_name=None)
            context.run_migrations()

    Our revisions keep their own version table (``firefly_orm_alembic_version``)
    and are never a branch of the app's history, so every app command behaves
    as before: ``alembic upgrade head`` (or any upgrade) also brings our tables
    to OUR head, in the same transaction (behind our migration lock); every
    other command (``downgrade``, ``stamp``, ``current``, ``history``,
    ``check``, ``revision --autogenerate``) leaves ours alone.  Keep our
    objects out of the app's autogenerate with :func:`autogenerate_filters`.

    Args:
        context: ``alembic.context`` of the app's env.py, already configured.
        connection: the app's connection (online), or None (``--sql``).
        schema_name: PostgreSQL schema for our tables and version table
            (None: the connection's default schema, e.g. ``public``).  Ignored
            on SQLite.  The store must be created with the same schema_name.
        upgrade_ours: None (default) = upgrade when the running command is
            ``alembic upgrade`` (told from the step function Alembic passes to
            the environment; when it cannot be told, nothing is done and a
            warning is logged); True / False forces it (an app driving
            Alembic's ``EnvironmentContext`` itself).

    Offline (``alembic upgrade ... --sql``): our DDL is written into the app's
    script, inside its BEGIN/COMMIT, starting from our base when the app's
    script starts from an empty database; for a range (``A:B --sql``) pass
    ``-x firefly_orm_from=OUR_REV`` (``head``: leave ours out), else the
    script says in a comment that ours was left out.

    Raises:
        EntryValidationError: ``schema_name`` is not a valid schema name.
        MigrationRequiredError: our revisions are recorded in the app's
            ``alembic_version`` (the versions-directory way): do not mix the two.
    """
    schema = validate_schema_name(schema_name)
    command_name = _host_command(context)
    if upgrade_ours is None:
        if command_name is None:
            logger.warning(
                "firefly_orm: cannot tell which Alembic command runs this env.py; "
                "firefly_orm's tables were not migrated (pass upgrade_ours=True, or run "
                "`firefly-orm migrate`)"
            )
            return
        upgrade_ours = command_name in _UPGRADING_COMMANDS
    if not upgrade_ours:
        logger.debug("firefly_orm: alembic %s leaves firefly_orm's tables alone", command_name)
        return
    with _keep_alembic_proxies():
        if context.is_offline_mode():
            _host_offline_upgrade(context, schema)
        else:
            if connection is None:
                raise TypeError("run_with_host: pass the app's connection (online mode)")
            upgrade(connection, schema_name=schema)


def _host_offline_upgrade(context: Any, schema: str | None) -> None:
    """Write our upgrade into the host's offline script (same output, same dialect)."""
    host = context.get_context()
    x_args: dict[str, str] = context.get_x_argument(as_dictionary=True)
    start = x_args.get(HOST_OFFLINE_FROM_OPTION)
    if start is None:
        host_start = context.get_starting_revision_argument()
        if host_start not in (None, (), "base"):
            host.impl.static_output(
                f"-- firefly_orm: its tables are not in this script (it starts at "
                f"{host_start!r}); pass -x {HOST_OFFLINE_FROM_OPTION}=REV with the "
                "firefly_orm revision the database is at"
            )
            return
        start = "base"
    if start in ("head", "heads", head()):
        return
    cfg = make_config(schema_name=None if host.dialect.name == "sqlite" else schema)
    cfg.attributes["url"] = URL.create(host.dialect.name)
    cfg.attributes[_WITHIN_HOST] = True
    cfg.output_buffer = host.output_buffer
    command.upgrade(cfg, f"{start}:head", sql=True)
