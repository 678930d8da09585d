"""The app's Alembic, from code and from the command line.

The app's environment (``migrations/``) holds the app's revisions only, with
ONE head; its env.py calls ``firefly_orm.migrate.run_with_host``, so the app's
``upgrade`` also brings firefly_orm's tables to firefly_orm's head, in the same
transaction, recorded in firefly_orm's own version table
(``firefly_orm_alembic_version``), never in the app's ``alembic_version``.  The
app's ``downgrade`` (``-1``, ``base``) undoes the app's revisions only; our
tables stay (``firefly-orm downgrade REV`` moves ours).  The memory store is
then opened with ``initialize(migrate=False)``: it checks, and never migrates.

Command line::

    python -m examples.fastapi_chat.migrate [--db URL] upgrade [REVISION]   # head
    python -m examples.fastapi_chat.migrate [--db URL] downgrade REVISION   # -1, base
    python -m examples.fastapi_chat.migrate [--db URL] current
    python -m examples.fastapi_chat.migrate [--db URL] check   # models vs. the database
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError

from firefly_orm import migrate as firefly_migrate
from firefly_orm.errors import MigrationRequiredError
from firefly_orm.sql import enable_sqlite_savepoints

__all__ = [
    "APP_VERSION_TABLE",
    "DEFAULT_DB",
    "ENV_DB",
    "MEMORY_SCHEMA",
    "SCRIPT_LOCATION",
    "adopt",
    "alembic_config",
    "current",
    "current_revision",
    "database_url",
    "downgrade",
    "head",
    "main",
    "memory_revision",
    "upgrade",
]

#: The app's Alembic environment.
SCRIPT_LOCATION = Path(__file__).resolve().parent / "migrations"
#: The environment variable naming the database (``--db`` wins).
ENV_DB = "FASTAPI_CHAT_DB"
#: The database when neither ``--db`` nor :data:`ENV_DB` is given: an embedded SQLite file.
DEFAULT_DB = "sqlite:///data/fastapi_chat.sqlite3"
#: Where firefly_orm's tables live (env.py's ``run_with_host`` and the app's store
#: both use it): None = the connection's default schema (PostgreSQL: the first
#: schema of ``search_path``); a name such as ``"firefly_memory"`` keeps them apart.
MEMORY_SCHEMA: str | None = None
#: The app's version table (Alembic's default name).
APP_VERSION_TABLE = "alembic_version"

logger = logging.getLogger(__name__)


def database_url(given: str | None = None) -> str:
    """The database URL to use: ``given``, else :data:`ENV_DB`, else :data:`DEFAULT_DB`.

    ``postgresql://`` gets the psycopg driver; for a SQLite file, its directory
    is created.
    """
    url = firefly_migrate.normalize_url(given or os.environ.get(ENV_DB) or DEFAULT_DB)
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        Path(url.database).parent.mkdir(parents=True, exist_ok=True)
    return url.render_as_string(hide_password=False)


def alembic_config(url: str | None = None) -> Config:
    """An Alembic ``Config`` for the app's environment on ``url`` (no ini file).

    Its only version location is the app's ``versions/`` (firefly_orm's
    revisions are run by ``run_with_host`` in env.py, not listed here).
    Without a URL it still reads the revisions (head, history).  The URL
    travels in ``config.attributes``, never through the ini parser (a ``%`` in
    a password or a query would be read as interpolation).
    """
    cfg = Config()
    cfg.set_main_option("script_location", str(SCRIPT_LOCATION))
    cfg.set_main_option("path_separator", "os")
    if url is not None:
        cfg.attributes["url"] = url
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Upgrade the app to ``revision``; firefly_orm's tables go to firefly_orm's head with it.

    A database migrated by an earlier version of this example is first moved
    to the one-head setup (:func:`adopt`).
    """
    moved = adopt(url)
    if moved is not None:
        logger.warning(
            "firefly_orm's revision %s moved from the app's alembic_version to its own "
            "version table (the one-head setup)",
            moved,
        )
    command.upgrade(alembic_config(url), revision)


def adopt(url: str) -> str | None:
    """Move a database migrated the older way to the one-head setup; the revision moved.

    An earlier version of this example listed firefly_orm's revisions in the
    app's ``version_locations`` (two heads, README way (b)): firefly_orm's
    revision is then a row of the app's ``alembic_version``, which the one-head
    environment does not know (Alembic: "Can't locate revision").  In one
    transaction, that row is deleted and the same revision recorded in
    firefly_orm's own version table (README: "Migrating an existing app",
    step 7).  None: nothing to move (a new database, or one already moved).
    """
    ours = {
        rev.revision for rev in ScriptDirectory(firefly_migrate.script_location()).walk_revisions()
    }
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    if engine.dialect.name == "sqlite":
        enable_sqlite_savepoints(engine)  # our stamp runs in a SAVEPOINT of this transaction
    try:
        with engine.begin() as connection:
            if not sa.inspect(connection).has_table(APP_VERSION_TABLE):
                return None
            table = sa.table(APP_VERSION_TABLE, sa.column("version_num"))
            found: list[str] = [
                v for v in connection.execute(sa.select(table.c.version_num)).scalars() if v in ours
            ]
            if not found:
                return None
            connection.execute(sa.delete(table).where(table.c.version_num.in_(found)))
            firefly_migrate.stamp(connection, found[0], schema_name=MEMORY_SCHEMA)
            return found[0]
    finally:
        engine.dispose()


def downgrade(url: str, revision: str) -> None:
    """Downgrade the app's revisions to ``revision`` (``-1``, ``base``); ours are left alone."""
    command.downgrade(alembic_config(url), revision)


def head() -> str:
    """The app's head revision (one: firefly_orm's revisions are not in the app's history)."""
    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"the app's history must have one head, found {heads}")
    return heads[0]


def current(url: str) -> str | None:
    """The app's revision in its ``alembic_version`` (None when never migrated)."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            return current_revision(connection)
    finally:
        engine.dispose()


def current_revision(connection: sa.Connection) -> str | None:
    """The app's revision on ``connection`` (None when never migrated).

    The app reads it at start-up (through ``AsyncConnection.run_sync``) and
    refuses to serve a database that is not at :func:`head`.
    """
    return MigrationContext.configure(connection).get_current_revision()


def memory_revision(url: str) -> str | None:
    """firefly_orm's revision, from its own version table (None when never migrated)."""
    return firefly_migrate.current(url, schema_name=MEMORY_SCHEMA)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``python -m examples.fastapi_chat.migrate`` command (exit status 0, or 1)."""
    parser = argparse.ArgumentParser(
        prog="python -m examples.fastapi_chat.migrate",
        description="Run the help desk's Alembic (its tables, and firefly_orm's on upgrade).",
    )
    parser.add_argument("--db", help=f"database URL (default: ${ENV_DB}, else {DEFAULT_DB})")
    parser.add_argument("action", choices=("upgrade", "downgrade", "current", "check"))
    parser.add_argument("revision", nargs="?", help="target revision (upgrade: head)")
    args = parser.parse_args(argv)
    url = database_url(args.db)
    try:
        if args.action == "upgrade":
            upgrade(url, args.revision or "head")
        elif args.action == "downgrade":
            if not args.revision:
                parser.error("downgrade needs a revision (-1, base, or a revision id)")
            downgrade(url, args.revision)
        elif args.action == "check":
            command.check(alembic_config(url))
        print(
            f"app at: {current(url) or '(nothing)'}; firefly_orm at: "
            f"{memory_revision(url) or '(nothing)'}"
        )
    except (CommandError, MigrationRequiredError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
