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

On PostgreSQL, :func:`upgrade` holds a transaction-level advisory lock, so
several workers starting together migrate exactly once; the others wait and
then find the schema at head.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import URL, Connection, Engine

from firefly_orm.entry import TABLE_NAME, metadata
from firefly_orm.errors import EntryValidationError, MigrationRequiredError

__all__ = [
    "DEFAULT_SCHEMA",
    "VERSION_TABLE",
    "check",
    "current",
    "downgrade",
    "head",
    "include_name",
    "include_object",
    "run_environment",
    "script_location",
    "stamp",
    "upgrade",
    "validate_schema_name",
]

logger = logging.getLogger("firefly_orm")

VERSION_TABLE = "firefly_orm_alembic_version"
DEFAULT_SCHEMA = "firefly_memory"
_OUR_TABLES = frozenset({TABLE_NAME, VERSION_TABLE})
_SCHEMA_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")

Target = Engine | Connection | str | URL


def validate_schema_name(schema_name: str | None) -> str | None:
    """Return a valid PostgreSQL schema name (or None); raise on anything else.

    The name is only ever passed to SQLAlchemy as an identifier (quoted by the
    dialect when needed), never interpolated into SQL text; this check keeps it
    to letters, digits and underscores, at most 63 characters.
    """
    if schema_name is None:
        return None
    if not isinstance(schema_name, str) or not _SCHEMA_RE.match(schema_name):
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


def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    """For a HOST app's ``env.py``: keep firefly_orm's tables out of its autogenerate.

    Pass it as ``context.configure(include_name=firefly_orm.migrate.include_name)``
    (or call it from your own ``include_name``); it returns False for our tables
    and True for everything else.
    """
    if type_ == "table":
        return name not in _OUR_TABLES
    return True


def include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    """``include_object`` twin of :func:`include_name` (also filters our indexes)."""
    if type_ == "table":
        return name not in _OUR_TABLES
    table = getattr(obj, "table", None)
    return not (table is not None and getattr(table, "name", None) in _OUR_TABLES)


def _own_include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    """Our env's filter: only our own table is compared or migrated."""
    if type_ == "table":
        return name == TABLE_NAME
    return True


def _lock_key(schema_name: str | None) -> int:
    digest = hashlib.sha256(f"firefly_orm:{schema_name or ''}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


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


@contextmanager
def _connect(target: Target) -> Iterator[Connection]:
    if isinstance(target, Connection):
        yield target
        return
    if isinstance(target, Engine):
        with target.connect() as conn:
            yield conn
        return
    engine = sa.create_engine(target, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def _run(target: Target, schema_name: str | None, fn: Any, *args: Any) -> Any:
    with _connect(target) as conn:
        schema = _schema_for(conn, schema_name)
        cfg = make_config(conn, schema_name=schema)
        result = fn(cfg, *args)
        if conn.in_transaction():
            conn.commit()
        return result


def upgrade(target: Target, *, schema_name: str | None = None, revision: str = "head") -> None:
    """Upgrade our tables to ``revision`` (default: head); creates the schema if needed.

    On PostgreSQL the upgrade holds an advisory lock (per schema name) for its
    whole transaction, so concurrent callers migrate once and the rest wait.
    """
    with _connect(target) as conn:
        schema = _schema_for(conn, schema_name)
        if conn.dialect.name == "postgresql":
            if conn.in_transaction():
                conn.commit()
            with conn.begin():
                conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_lock_key(schema))))
                command.upgrade(make_config(conn, schema_name=schema), revision)
        else:
            command.upgrade(make_config(conn, schema_name=schema), revision)
            if conn.in_transaction():
                conn.commit()
    logger.info("firefly_orm schema %s upgraded to %s", schema_name or "(default)", revision)


def downgrade(target: Target, revision: str, *, schema_name: str | None = None) -> None:
    """Downgrade our tables to ``revision`` (``"base"`` drops them)."""
    _run(target, schema_name, command.downgrade, revision)


def stamp(target: Target, revision: str = "head", *, schema_name: str | None = None) -> None:
    """Record ``revision`` in our version table without running migrations."""
    _run(target, schema_name, command.stamp, revision)


def head() -> str:
    """The head revision of our migrations."""
    script = ScriptDirectory.from_config(make_config())
    heads = script.get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"firefly_orm migrations must have one head, found {heads}")
    return heads[0]


def current(target: Target, *, schema_name: str | None = None) -> str | None:
    """The revision the database is at (None when never migrated)."""
    with _connect(target) as conn:
        schema = _schema_for(conn, schema_name)
        ctx = MigrationContext.configure(
            conn, opts={"version_table": VERSION_TABLE, "version_table_schema": schema}
        )
        rev = ctx.get_current_revision()
        if conn.in_transaction():
            conn.rollback()
        return rev


def check(target: Target, *, schema_name: str | None = None) -> list[str]:
    """Revisions still to apply (``[]`` when the database is at head)."""
    at = current(target, schema_name=schema_name)
    script = ScriptDirectory.from_config(make_config())
    pending = [rev.revision for rev in script.iterate_revisions(head(), at)]
    return list(reversed(pending))


def require_head(target: Target, *, schema_name: str | None = None) -> None:
    """Raise :class:`MigrationRequiredError` unless the database is at head."""
    pending = check(target, schema_name=schema_name)
    if pending:
        raise MigrationRequiredError(
            f"database not at head: {len(pending)} firefly_orm migration(s) pending "
            f"({', '.join(pending)}); run `firefly-orm migrate` or `alembic upgrade head`"
        )


# --------------------------------------------------------------------------- env.py


def _env_url(x_args: dict[str, str]) -> str | None:
    if x_args.get("url"):
        return x_args["url"]
    if os.environ.get("FIREFLY_AGENTIC_MEMORY_POSTGRES_URL"):
        return os.environ["FIREFLY_AGENTIC_MEMORY_POSTGRES_URL"]
    if os.environ.get("FIREFLY_AGENTIC_MEMORY_SQLITE_PATH"):
        return f"sqlite:///{os.environ['FIREFLY_AGENTIC_MEMORY_SQLITE_PATH']}"
    return None


def _configure_and_run(context: Any, connection: Connection, schema: str | None) -> None:
    is_sqlite = connection.dialect.name == "sqlite"
    if schema is not None:
        connection.execute(sa.schema.CreateSchema(schema, if_not_exists=True))
        connection = connection.execution_options(schema_translate_map={None: schema})
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        version_table_schema=schema,
        include_name=_own_include_name,
        render_as_batch=is_sqlite,
        compare_type=True,
        transaction_per_migration=False,
    )
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

    if context.is_offline_mode():
        url = (
            config.attributes.get("url")
            or _env_url(x_args)
            or config.get_main_option("sqlalchemy.url")
        )
        if not url:
            raise RuntimeError("no database URL: pass -x url=... (offline mode)")
        dialect_name = sa.engine.make_url(url).get_backend_name()
        schema = None
        if dialect_name != "sqlite":
            schema = validate_schema_name(schema_arg if explicit_schema else DEFAULT_SCHEMA)
        context.configure(
            url=url,
            target_metadata=metadata,
            version_table=VERSION_TABLE,
            version_table_schema=schema,
            literal_binds=True,
        )
        with context.begin_transaction():
            context.run_migrations()
        return

    connection: Connection | None = config.attributes.get("connection")
    if connection is not None:
        schema = None if connection.dialect.name == "sqlite" else validate_schema_name(schema_arg)
        _configure_and_run(context, connection, schema)
        return

    url = (
        config.attributes.get("url") or _env_url(x_args) or config.get_main_option("sqlalchemy.url")
    )
    if not url:
        raise RuntimeError(
            "no database URL: pass `alembic -x url=...` or set FIREFLY_AGENTIC_MEMORY_POSTGRES_URL"
            " / FIREFLY_AGENTIC_MEMORY_SQLITE_PATH"
        )
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            schema = None
            if conn.dialect.name != "sqlite":
                schema = validate_schema_name(schema_arg if explicit_schema else DEFAULT_SCHEMA)
                with conn.begin():
                    conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_lock_key(schema))))
                    _configure_and_run(context, conn, schema)
            else:
                _configure_and_run(context, conn, None)
                if conn.in_transaction():
                    conn.commit()
    finally:
        engine.dispose()
