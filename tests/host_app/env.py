"""The host application's Alembic environment (what an app's env.py looks like).

Settings come from the environment, as in a deployed app: the URL from
``alembic -x url=...`` or ``HOST_APP_DATABASE_URL``, the PostgreSQL schema of
the memory tables from ``HOST_APP_MEMORY_SCHEMA`` (empty: the default schema).

How firefly_orm is wired depends on the ini's ``firefly_orm`` option:

* ``run_with_host`` (``alembic-one-head.ini``, the recommended way): the app's
  own commands run ours too — ``migrate.run_with_host(...)`` in the migration
  transaction, ``migrate.autogenerate_filters(...)`` combined with the app's own
  filter (it ignores ``tmp_*`` scratch tables);
* unset (``alembic.ini``, ``alembic-with-firefly.ini``): only the filter,
  ``include_name=migrate.include_name``; ours are migrated by ``firefly-orm
  migrate`` or as a ``firefly_orm`` branch of this history.

``HOST_APP_NO_FILTER=1`` leaves every filter out (a negative control for tests).
"""

from __future__ import annotations

import os
from typing import Any

import sqlalchemy as sa
from alembic import context
from host_models import metadata

from firefly_orm import migrate

config = context.config
url = context.get_x_argument(as_dictionary=True).get("url") or os.environ["HOST_APP_DATABASE_URL"]
MEMORY_SCHEMA = os.environ.get("HOST_APP_MEMORY_SCHEMA") or None
ONE_HEAD = config.get_main_option("firefly_orm") == "run_with_host"


def app_include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    """The app's own autogenerate filter: scratch tables are not the app's schema."""
    return not (type_ == "table" and (name or "").startswith("tmp_"))


def filters() -> dict[str, Any]:
    if os.environ.get("HOST_APP_NO_FILTER") == "1":
        return {"include_name": app_include_name}
    if ONE_HEAD:
        return migrate.autogenerate_filters(
            include_name=app_include_name, schema_name=MEMORY_SCHEMA
        )
    return {"include_name": migrate.include_name}


def run_migrations(connection: sa.Connection | None) -> None:
    with context.begin_transaction():
        if ONE_HEAD:
            migrate.run_with_host(context, connection, schema_name=MEMORY_SCHEMA)
        context.run_migrations()


if context.is_offline_mode():
    context.configure(url=url, target_metadata=metadata, literal_binds=True, **filters())
    run_migrations(None)
else:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=metadata,
            render_as_batch=connection.dialect.name == "sqlite",
            **filters(),
        )
        run_migrations(connection)
    engine.dispose()
