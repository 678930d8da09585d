"""The app's Alembic environment (run by :mod:`examples.fastapi_chat.migrate`).

Its ``version_locations`` hold the app's revisions (branch ``chat``) and
firefly_orm's (branch ``firefly_orm``), so this one environment runs both, on
one connection, and records both in the app's ``alembic_version``.  firefly_orm's
tables land in the connection's default schema (PostgreSQL: the first schema of
``search_path``).  ``include_name=migrate.include_name`` keeps them out of the
app's autogenerate, which compares the database with the app's models only.

The URL comes from ``config.attributes["url"]`` (set by ``alembic_config``) or
``-x url=...``.  Online mode only.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

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
    # SQLAlchemy issues BEGIN, so every revision (and the version rows) commit together.
    enable_sqlite_savepoints(engine)
try:
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=metadata,
            include_name=migrate.include_name,
            render_as_batch=sqlite,
        )
        with context.begin_transaction():
            context.run_migrations()
finally:
    engine.dispose()
