"""Alembic environment for firefly_orm.

All the logic lives in :func:`firefly_orm.migrate.run_environment`, so the same
code runs for ``alembic upgrade head`` from a checkout, for the programmatic API
(``firefly_orm.migrate.upgrade``) and for ``firefly-orm migrate``.
"""

from alembic import context

from firefly_orm.migrate import run_environment

run_environment(context)
