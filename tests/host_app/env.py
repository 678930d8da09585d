"""The host application's Alembic environment (what an app's env.py looks like).

The one firefly_orm-specific line is ``include_name=migrate.include_name``: the
host's autogenerate then never proposes to drop firefly_orm's tables (nor its
version table) that live in the same database.

URL: ``alembic -x url=...`` or ``HOST_APP_DATABASE_URL``.
``HOST_APP_NO_FILTER=1`` leaves the filter out (a negative control for tests).
"""

from __future__ import annotations

import os

import sqlalchemy as sa
from alembic import context
from host_models import metadata

from firefly_orm import migrate

url = context.get_x_argument(as_dictionary=True).get("url") or os.environ["HOST_APP_DATABASE_URL"]
include_name = None if os.environ.get("HOST_APP_NO_FILTER") == "1" else migrate.include_name

if context.is_offline_mode():
    context.configure(url=url, target_metadata=metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=metadata,
            include_name=include_name,
            render_as_batch=connection.dialect.name == "sqlite",
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()
