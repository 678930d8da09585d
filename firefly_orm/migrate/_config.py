"""What our migrations are called and where they live (internal; see :mod:`firefly_orm.migrate`).

The leaf of the migration modules: the version table and branch names, the
schema-name and URL checks, the Alembic script directory (read once per
process: :func:`script_directory`) and the :class:`~alembic.config.Config`
built in code, and :func:`revision_schema`, which our revision files call.  It
imports no other migration module, so :mod:`firefly_orm.migrate._commands`,
:mod:`firefly_orm.migrate._filters` and :mod:`firefly_orm.migrate._env` all
build on it without an import cycle.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any, Literal, cast

import sqlalchemy as sa
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy.engine import URL, Connection

from firefly_orm.errors import EntryValidationError, redact_url

__all__ = [
    "POOLER_MODES",
    "POOLER_OPTION",
    "BRANCH_LABEL",
    "DEFAULT_SCHEMA",
    "HOST_SCHEMA_OPTION",
    "HOST_VERSION_TABLE",
    "RUNNING_COMMAND",
    "VERSION_TABLE",
    "check_pooler",
    "head",
    "make_config",
    "normalize_url",
    "pooler_connect_args",
    "our_revisions",
    "revision_schema",
    "script_directory",
    "script_location",
    "split_pooler_option",
    "validate_schema_name",
    "versions_location",
]

VERSION_TABLE = "firefly_orm_alembic_version"
DEFAULT_SCHEMA = "firefly_memory"
#: The version table a host's Alembic uses by default (mode (b): our branch inside it).
HOST_VERSION_TABLE = "alembic_version"
#: The branch label of our first revision (``alembic upgrade firefly_orm@head`` in mode (b)).
BRANCH_LABEL = "firefly_orm"
#: ``-x`` argument / ``config.attributes`` key naming the schema for our tables in mode (b).
HOST_SCHEMA_OPTION = "firefly_orm_schema"
#: ``config.attributes`` key naming the Alembic command our code runs in our
#: environment (``"upgrade"``, ``"downgrade"``): it runs on the cached script
#: directory, so env.py cannot tell it from the step function Alembic's own
#: commands pass (see :func:`firefly_orm.migrate._env.run_environment`).
RUNNING_COMMAND = "firefly_orm_command"
_SCHEMA_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def validate_schema_name(schema_name: str | None) -> str | None:
    """Return a valid PostgreSQL schema name (or None); raise on anything else.

    The name is only ever passed to SQLAlchemy as an identifier (quoted by the
    dialect when needed), never interpolated into SQL text; this check keeps it
    to letters, digits and underscores, at most 63 characters.  The whole name
    must match (``re.fullmatch``: ``"abc\\n"`` is refused, not taken as ``abc``).
    """
    if schema_name is None:
        return None
    if not isinstance(schema_name, str) or not _SCHEMA_RE.fullmatch(schema_name):
        raise EntryValidationError(
            "schema_name",
            f"{schema_name!r} is not a valid schema name "
            "(letters, digits and underscores, not starting with a digit, at most 63 chars)",
        )
    return schema_name


def script_location() -> str:
    """Directory of the Alembic environment (installed copy first, then checkout)."""
    package = Path(__file__).resolve().parent.parent  # firefly_orm/
    for candidate in (package / "migrations", package.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return str(candidate)
    raise FileNotFoundError("firefly_orm's migrations directory was not found")


def versions_location() -> str:
    """Directory of our revision files, for a host's ``version_locations`` (mode (b)).

    In an ``alembic.ini`` an installed package can also be named as the
    resource ``firefly_orm:migrations/versions`` (with ``path_separator =
    space``); from code, append this path::

        cfg.set_main_option(
            "version_locations", f"{host_versions} {migrate.versions_location()}"
        )
    """
    return str(Path(script_location()) / "versions")


def revision_schema() -> str | None:
    """The schema our revisions should name explicitly (called inside a revision).

    * Our own environment (``firefly_orm_alembic_version``): ``None`` — the
      schema is applied by ``schema_translate_map`` on the connection; in
      offline mode (``alembic upgrade head --sql``) there is no connection to
      translate, so the configured version table schema is named instead.
    * A host's environment (mode (b)): the schema given as
      ``alembic -x firefly_orm_schema=NAME`` or
      ``config.attributes["firefly_orm_schema"]``; ``None`` (the host
      connection's default schema) when neither is set.
    """
    from alembic import context as env_context
    from alembic import op

    migration_context = op.get_context()
    if migration_context.opts.get("version_table") == VERSION_TABLE:
        if migration_context.as_sql:
            return validate_schema_name(migration_context.opts.get("version_table_schema"))
        return None
    config = env_context.config
    name = config.attributes.get(HOST_SCHEMA_OPTION)
    if name is None:
        x_args: dict[str, str] = env_context.get_x_argument(as_dictionary=True)
        name = x_args.get(HOST_SCHEMA_OPTION) or None
    return validate_schema_name(name)


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


def normalize_url(url: str | URL) -> URL:
    """Parse ``url``; plain ``postgresql://`` / ``postgres://`` get the psycopg (3) driver.

    Raises:
        EntryValidationError: not a database URL (the message hides the password).
    """
    try:
        parsed = sa.engine.make_url(url)
    except (sa.exc.ArgumentError, ValueError, TypeError) as exc:
        raise EntryValidationError("url", f"not a database URL: {redact_url(url)}") from exc
    if parsed.drivername in ("postgres", "postgresql"):
        # "postgres://" is the usual form of hosted DATABASE_URLs.
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


#: Our script directories, revision map loaded, by script location (one per process).
_scripts: dict[str, ScriptDirectory] = {}
_scripts_lock = threading.Lock()


def script_directory() -> ScriptDirectory:
    """Our Alembic ``ScriptDirectory``, its revision files read once per process.

    Built on first use from :func:`make_config` (what ``alembic.command``'s
    ``ScriptDirectory.from_config`` would build) with the revision map loaded
    (every revision file read and compiled), then kept for the process, one
    per script location: the revision files are part of the installed
    package.  :func:`head`, :func:`our_revisions` and the migrations our code
    runs (:mod:`firefly_orm.migrate._commands`) all use it; a host's Alembic
    builds its own (``run_with_host`` upgrades ours through this one).  A
    forked process inherits it.
    """
    location = script_location()
    script = _scripts.get(location)
    if script is not None:
        return script
    with _scripts_lock:
        script = _scripts.get(location)
        if script is None:
            script = ScriptDirectory.from_config(make_config())
            script.get_heads()  # the revision map loaded now, once, under the lock
            _scripts[location] = script
    return script


def head() -> str:
    """The head revision of our migrations."""
    heads = script_directory().get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"firefly_orm migrations must have one head, found {heads}")
    return heads[0]


def our_revisions() -> set[str]:
    """Every revision id of our migrations."""
    return {rev.revision for rev in script_directory().walk_revisions()}


# --------------------------------------------------------------------------- poolers
# Here, not in firefly_orm.sql._presets (which re-exports them): the migration
# engine needs them too, and firefly_orm.sql imports this package, not the reverse.

#: The URL query parameter declaring a connection pooler (``?pooler=transaction``);
#: the store removes it before the driver sees the URL.
POOLER_OPTION = "pooler"
#: Pool modes of a pooler in front of PostgreSQL that the store works behind.
POOLER_MODES = ("transaction", "session")
Pooler = Literal["transaction", "session"]


def check_pooler(value: object, field: str) -> Pooler:
    """``value`` if it is a pool mode firefly_orm works behind (``field`` names it)."""
    if value not in POOLER_MODES:
        hint = (
            " (statement pooling cannot run multi-statement transactions; use transaction)"
            if value == "statement"
            else ""
        )
        raise EntryValidationError(
            field, f"{value!r} is not a pool mode firefly_orm works behind: {POOLER_MODES}{hint}"
        )
    return cast(Pooler, value)


def split_pooler_option(url: URL, field: str = "url") -> tuple[URL, Pooler | None]:
    """``url`` without the ``pooler`` query parameter, and the pool mode it declared.

    Raises:
        EntryValidationError: An unknown pool mode, or ``pooler`` given twice
            (``field`` names the argument in the message).
    """
    if POOLER_OPTION not in url.query:
        return url, None
    value = url.query[POOLER_OPTION]
    if not isinstance(value, str):
        raise EntryValidationError(field, f"give {POOLER_OPTION}= once")
    return url.difference_update_query([POOLER_OPTION]), check_pooler(value, field)


def pooler_connect_args(pooler: str | None) -> dict[str, Any]:
    """psycopg connect arguments for a pooler in ``pooler`` mode (``None``: no pooler).

    Behind a transaction pooler a statement psycopg prepared on one server
    connection is missing on the next one (or left behind on the first): no
    server-side prepared statements then (``prepare_threshold=None``).
    """
    return {"prepare_threshold": None} if pooler == "transaction" else {}
