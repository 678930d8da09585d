"""The app's Alembic environment (run by :mod:`examples.fastapi_chat.migrate`).

The recommended one-head setup (README: "Migrations inside your Alembic"):

* ``migrate.run_with_host(...)``, inside the migration transaction and before
  the app's revisions, brings firefly_orm's tables to firefly_orm's head
  whenever the app's command is an upgrade, in the same transaction.  Our
  revisions keep their own version table (``firefly_orm_alembic_version``), so
  the app's history has ONE head: ``upgrade head``, ``downgrade -1``,
  ``current``, ``history`` and ``stamp`` see the app's revisions only, and
  every command but an upgrade leaves our tables alone.
* ``migrate.autogenerate_filters(...)`` keeps our tables, version table and
  indexes out of the app's autogenerate and ``alembic check``, which compare
  the database with the app's models only.

firefly_orm's tables land in ``MEMORY_SCHEMA`` (:mod:`examples.fastapi_chat.migrate`;
None: the connection's default schema, on PostgreSQL the first schema of
``search_path``), where the app's store (the same ``schema_name``) finds them.

The URL comes from ``config.attributes["url"]`` (set by ``alembic_config``) or
``-x url=...``.  Online mode only.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

from examples.fastapi_chat.migrate import MEMORY_SCHEMA
from examples.fastapi_chat.models import metadata
from firefly_orm import migrate
from firefly_orm.sql import enable_sqlite_savepoints

config = context.config
url = config.attributes.get("url") or context.get_x_argument(as_dictionary=True).get("url")
if not url:
    raise SystemExit("no database URL: pass -x url=... (or use examples.fastapi_chat.migrate)")
if context.is_offline_mode():
    raise SystemExit("this environment runs online only (no --sql)")

engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
sqlite = engine.dialect.name == "sqlite"
if sqlite:
    # SQLAlchemy issues BEGIN (so SQLite's DDL is transactional, and our part can
    # run in a SAVEPOINT of the app's transaction).
    enable_sqlite_savepoints(engine)
try:
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=metadata,
            render_as_batch=sqlite,
            # One transaction for the whole upgrade: ours, the app's revisions and both
            # version rows commit together, or none does.  (Alembic's default on SQLite
            # is a transaction per revision, which would commit ours on its own.)
            transactional_ddl=True,
            **migrate.autogenerate_filters(schema_name=MEMORY_SCHEMA),
        )
        with context.begin_transaction():
            migrate.run_with_host(context, connection, schema_name=MEMORY_SCHEMA)
            context.run_migrations()
finally:
    engine.dispose()
