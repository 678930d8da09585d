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
  :data:`firefly_orm.migrate._lock.SQLITE_LOCK_TIMEOUT` seconds (30).
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

The vector tables (``memory_vectors``, for semantic recall) have a history of
their own with its own version table, run only when asked
(:func:`upgrade_vectors`, a store built with ``vectors=True``, ``firefly-orm
migrate --vectors``), so the main history never needs pgvector or sqlite-vec;
see :mod:`firefly_orm.migrate._vectors` for why it is not an Alembic branch.

Every name above is imported from here; the code lives in internal modules,
none of which imports this one: :mod:`~firefly_orm.migrate._config` (names,
schema and URL checks, the script directory), :mod:`~firefly_orm.migrate._commands`
(upgrade, downgrade, stamp, current, check), :mod:`~firefly_orm.migrate._filters`
(autogenerate filters) and :mod:`~firefly_orm.migrate._env` (the env.py bodies).
"""

from __future__ import annotations

from firefly_orm.migrate._commands import Target as Target  # the type of a target argument
from firefly_orm.migrate._commands import (
    check,
    current,
    migrate_advice,
    require_head,
    stamp,
    upgrade,
)
from firefly_orm.migrate._config import (
    BRANCH_LABEL,
    DEFAULT_SCHEMA,
    HOST_SCHEMA_OPTION,
    HOST_VERSION_TABLE,
    VERSION_TABLE,
    head,
    make_config,
    normalize_url,
    revision_schema,
    script_location,
    validate_schema_name,
    versions_location,
)
from firefly_orm.migrate._env import HOST_OFFLINE_FROM_OPTION, run_environment, run_with_host
from firefly_orm.migrate._filters import autogenerate_filters, include_name, include_object
from firefly_orm.migrate._vectors import (
    downgrade,
    downgrade_vectors,
    require_vectors,
    upgrade_vectors,
    vector_head,
    vectors_current,
)

# In the order the reference shows them (docs/reference/migrate.md: members_order __all__).
__all__ = [
    "VERSION_TABLE",
    "DEFAULT_SCHEMA",
    "HOST_VERSION_TABLE",
    "BRANCH_LABEL",
    "HOST_SCHEMA_OPTION",
    "HOST_OFFLINE_FROM_OPTION",
    "validate_schema_name",
    "script_location",
    "versions_location",
    "revision_schema",
    "include_name",
    "include_object",
    "autogenerate_filters",
    "make_config",
    "normalize_url",
    "upgrade",
    "downgrade",
    "stamp",
    "head",
    "current",
    "check",
    "migrate_advice",
    "require_head",
    "run_environment",
    "run_with_host",
    "upgrade_vectors",
    "downgrade_vectors",
    "vector_head",
    "vectors_current",
    "require_vectors",
]
