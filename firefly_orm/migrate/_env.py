"""The Alembic environment bodies (internal; see :mod:`firefly_orm.migrate`).

* :func:`run_environment`: the body of our ``migrations/env.py``, run by every
  migration of ours (:func:`~firefly_orm.migrate.upgrade` and the other
  commands, a store's ``initialize()``, ``firefly-orm migrate``, ``alembic
  upgrade head`` from a checkout), online and offline (``--sql``).
* :func:`run_with_host`: one call in a HOST app's env.py that upgrades our
  tables with the app's ``alembic upgrade`` (design note:
  ``docs/design/host-alembic.md``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.util import CommandError
from sqlalchemy.engine import URL, Connection

from firefly_orm.entry import metadata
from firefly_orm.envnames import ENV_POSTGRES_URL, ENV_SQLITE_PATH, database_url_from_env
from firefly_orm.migrate._commands import (
    migration_engine,
    open_connection,
    read_state,
    refuse_foreign_table,
    upgrade,
)
from firefly_orm.migrate._config import (
    DEFAULT_SCHEMA,
    RUNNING_COMMAND,
    VERSION_TABLE,
    head,
    make_config,
    normalize_url,
    validate_schema_name,
)
from firefly_orm.migrate._filters import own_include_name
from firefly_orm.migrate._lock import migration_transaction

__all__ = ["HOST_OFFLINE_FROM_OPTION", "run_environment", "run_with_host"]

logger = logging.getLogger("firefly_orm")

#: ``alembic -x firefly_orm_from=REV upgrade A:B --sql``: where our part of an
#: offline script starts (see :func:`run_with_host`).
HOST_OFFLINE_FROM_OPTION = "firefly_orm_from"
#: ``config.attributes`` flag of our environment when it runs inside a host's.
_WITHIN_HOST = "firefly_orm_within_host"
#: The Alembic commands that upgrade our tables (see :func:`_alembic_command`).
_UPGRADING_COMMANDS = frozenset({"upgrade"})
#: The Alembic commands after which, at base, our leftovers go (:func:`_remove_leftovers`).
_DOWNGRADING_COMMANDS = frozenset({"downgrade"})

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
    _configure(
        context,
        schema,
        connection=connection,
        include_name=own_include_name,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        transaction_per_migration=False,
    )
    # Before our first revision, and before anything is written: a memory_entries
    # table of someone else's (the Firefly framework's own store) would fail it
    # with a bare "already exists".  Read without our schema mapping (a host's
    # alembic_version may be in the default schema).
    if _alembic_command(context) in _UPGRADING_COMMANDS and read_state(connection, schema) == (
        None,
        None,
    ):
        refuse_foreign_table(connection, schema)
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
        # In a transaction already, so Alembic begins and commits nothing itself
        # (on SQLite it would otherwise commit after each revision).
        with context.begin_transaction():
            context.run_migrations()
        if _alembic_command(context) in _DOWNGRADING_COMMANDS and not (
            context.get_context().get_current_heads()
        ):
            _remove_leftovers(connection, schema)
    finally:
        if schema is not None:
            connection.execution_options(schema_translate_map=previous)


#: Schemas never dropped, even when empty: every PostgreSQL database has them.
_KEPT_SCHEMAS = frozenset({"public", "information_schema"})


def _remove_leftovers(connection: Connection, schema: str | None) -> None:
    """After a downgrade to base: our empty version table, then our schema if it is empty.

    Runs in the migration's transaction, so the caller's commit (or the
    migration's own) decides.  The version table goes only when it holds no
    row.  The schema (never the connection's default one, nor ``public``) goes
    only when nothing else is in it: ``DROP SCHEMA`` without ``CASCADE``
    refuses a schema that holds any object (a table, a view, a function, a
    type...), and then, or when this role may not drop it, the schema is kept
    (rolled back to a SAVEPOINT) and the reason logged.
    """
    version = sa.Table(
        VERSION_TABLE, sa.MetaData(), sa.Column("version_num", sa.String(32)), schema=schema
    )
    if sa.inspect(connection).has_table(VERSION_TABLE, schema=schema):
        if connection.execute(sa.select(version.c.version_num).limit(1)).first() is not None:
            return
        version.drop(connection)
        logger.info("firefly_orm: dropped the empty %s after the downgrade to base", VERSION_TABLE)
    if schema is None or connection.dialect.name != "postgresql":
        return
    if schema in _KEPT_SCHEMAS or schema.startswith("pg_"):
        return
    if not sa.inspect(connection).has_schema(schema):
        return
    try:
        with connection.begin_nested():
            connection.execute(sa.schema.DropSchema(schema))  # RESTRICT: refuses a non-empty one
    except sa.exc.DBAPIError as exc:
        reason = str(exc.orig if exc.orig is not None else exc).strip().splitlines()
        logger.info(
            "firefly_orm: schema %s kept after the downgrade to base: %s",
            schema,
            reason[0] if reason else type(exc).__name__,
        )
        return
    logger.info("firefly_orm: dropped schema %s, empty after the downgrade to base", schema)


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
    engine = migration_engine(url)
    try:
        with open_connection(engine) as conn:
            _configure_and_run(context, conn, url_schema(conn.dialect.name))
    finally:
        engine.dispose()


# --------------------------------------------------------------------------- a host's env.py


def _alembic_command(context: Any) -> str | None:
    """The ``alembic.command`` function running an env.py, ours or a host's (``"upgrade"``, ...).

    Alembic's commands pass their step function as ``fn=`` to the
    :class:`~alembic.runtime.environment.EnvironmentContext`; it is defined
    inside the command (``upgrade.<locals>.upgrade``,
    ``downgrade.<locals>.downgrade``, ``stamp.<locals>.do_stamp``,
    ``check.<locals>.retrieve_migrations``, ...), so the enclosing function's
    name is the command's.  Our own upgrades and downgrades run on the cached
    script directory with a step function of ours, and name their command in
    ``config.attributes`` (:data:`~firefly_orm.migrate._config.RUNNING_COMMAND`),
    which is read first.  None when that cannot be told (another caller, or
    an Alembic that does it differently): the caller then does nothing.
    """
    try:
        named = context.config.attributes.get(RUNNING_COMMAND)
        if isinstance(named, str):
            return named
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
    command_name = _alembic_command(context)
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
