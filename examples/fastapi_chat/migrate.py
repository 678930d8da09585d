"""The app's Alembic, from code and from the command line.

The app's environment (``migrations/``) has two version locations: the app's
revisions and firefly_orm's (:func:`firefly_orm.migrate.versions_location`).
``upgrade heads`` runs both branches (``chat`` and ``firefly_orm``) on one
connection, recorded in the app's ``alembic_version``; each branch can also be
moved alone (``chat@base``, ``firefly_orm@head``).  The memory store is then
opened with ``initialize(migrate=False)``: it checks, and never migrates a
database the app's Alembic manages.

Command line::

    python -m examples.fastapi_chat.migrate [--db URL] upgrade [heads]
    python -m examples.fastapi_chat.migrate [--db URL] downgrade REVISION   # chat@base, base
    python -m examples.fastapi_chat.migrate [--db URL] current
    python -m examples.fastapi_chat.migrate [--db URL] check   # models vs. the database
"""

from __future__ import annotations

import argparse
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

__all__ = [
    "APP_BRANCH",
    "DEFAULT_DB",
    "ENV_DB",
    "SCRIPT_LOCATION",
    "alembic_config",
    "current",
    "current_heads",
    "database_url",
    "downgrade",
    "heads",
    "main",
    "upgrade",
]

#: The app's Alembic environment.
SCRIPT_LOCATION = Path(__file__).resolve().parent / "migrations"
#: The branch label of the app's own revisions.
APP_BRANCH = "chat"
#: The environment variable naming the database (``--db`` wins).
ENV_DB = "FASTAPI_CHAT_DB"
#: The database when neither ``--db`` nor :data:`ENV_DB` is given: an embedded SQLite file.
DEFAULT_DB = "sqlite:///data/fastapi_chat.sqlite3"


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

    Without a URL it still reads the revisions (heads, history).  The URL
    travels in ``config.attributes``, never through the ini parser (a ``%`` in
    a password or a query would be read as interpolation).
    """
    cfg = Config()
    cfg.set_main_option("script_location", str(SCRIPT_LOCATION))
    cfg.set_main_option("path_separator", "os")
    cfg.set_main_option(
        "version_locations",
        os.pathsep.join([str(SCRIPT_LOCATION / "versions"), firefly_migrate.versions_location()]),
    )
    if url is not None:
        cfg.attributes["url"] = url
    return cfg


def upgrade(url: str, revision: str = "heads") -> None:
    """Upgrade to ``revision`` (default: every branch to its head)."""
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    """Downgrade to ``revision`` (``chat@base``: the app's tables only; ``base``: all)."""
    command.downgrade(alembic_config(url), revision)


def heads() -> set[str]:
    """The head revisions of the app's environment (the app's and firefly_orm's)."""
    script = ScriptDirectory.from_config(alembic_config())
    return set(script.get_heads())


def current(url: str) -> set[str]:
    """The revisions recorded in the app's ``alembic_version`` (empty when never migrated)."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            return current_heads(connection)
    finally:
        engine.dispose()


def current_heads(connection: sa.Connection) -> set[str]:
    """The revisions recorded in the app's ``alembic_version`` on ``connection``.

    The app reads them at start-up (through ``AsyncConnection.run_sync``) and
    refuses to serve a database that is not at :func:`heads`.
    """
    return set(MigrationContext.configure(connection).get_current_heads())


def main(argv: Sequence[str] | None = None) -> int:
    """The ``python -m examples.fastapi_chat.migrate`` command (exit status 0, or 1)."""
    parser = argparse.ArgumentParser(
        prog="python -m examples.fastapi_chat.migrate",
        description="Run the help desk's Alembic (its tables and firefly_orm's).",
    )
    parser.add_argument("--db", help=f"database URL (default: ${ENV_DB}, else {DEFAULT_DB})")
    parser.add_argument("action", choices=("upgrade", "downgrade", "current", "check"))
    parser.add_argument("revision", nargs="?", help="target revision (upgrade: heads)")
    args = parser.parse_args(argv)
    url = database_url(args.db)
    try:
        if args.action == "upgrade":
            upgrade(url, args.revision or "heads")
        elif args.action == "downgrade":
            if not args.revision:
                parser.error("downgrade needs a revision (chat@base, firefly_orm@base, base)")
            downgrade(url, args.revision)
        elif args.action == "check":
            command.check(alembic_config(url))
        revisions = sorted(current(url))
        print("at:", ", ".join(revisions) if revisions else "(nothing)")
    except CommandError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
