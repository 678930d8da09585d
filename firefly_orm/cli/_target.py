"""What every command stands on (internal).

Exit statuses, the one-line error, progress bars, the target database and the
store or migration engine opened on it.  The commands call :func:`_store`
through this module (``_target._store``): the one place a test replaces it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from sqlalchemy.engine import URL

from firefly_orm import migrate
from firefly_orm.envnames import (
    ENV_POSTGRES_SCHEMA,
    ENV_POSTGRES_URL,
    ENV_SQLITE_PATH,
    database_url_from_env,
    database_url_variable,
)
from firefly_orm.errors import (
    EntryValidationError,
    redact_url,
)
from firefly_orm.migrate._commands import migration_engine
from firefly_orm.sql import PostgreSQLStore, SQLAlchemyStore

__all__ = [
    "CliError",
    "EXIT_ERROR",
    "EXIT_NOT_AT_HEAD",
    "EXIT_OK",
    "EXIT_USAGE",
    "Progress",
    "Target",
    "env_database_variable",
    "print_summary",
]

EXIT_OK = 0
EXIT_NOT_AT_HEAD = 1
EXIT_USAGE = 2
EXIT_ERROR = 3


class CliError(Exception):
    """An error reported as one line with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# --------------------------------------------------------------------------- output


def print_summary(args: argparse.Namespace, summary: Mapping[str, Any], text: str) -> None:
    """Print a command's outcome: ``summary`` as one JSON line with ``--json``, else ``text``."""
    print(json.dumps(summary, sort_keys=True) if args.json else text)


# --------------------------------------------------------------------------- progress


class Progress:
    """A minimal progress bar on a stream (stderr); silent when disabled.

    Args:
        total: Number of steps.
        label: Text before the bar.
        enabled: Draw at all (the CLI enables it when stderr is a TTY or with
            ``--progress``).
        stream: Where to draw (default ``sys.stderr``).
        width: Characters of the bar.
    """

    def __init__(
        self,
        total: int,
        label: str,
        *,
        enabled: bool,
        stream: TextIO | None = None,
        width: int = 30,
    ) -> None:
        self.total = max(0, total)
        self.label = label
        self.enabled = enabled and self.total > 0
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.done = 0
        self._drawn = -1

    def advance(self, steps: int = 1) -> None:
        """Record ``steps`` more steps and redraw when the bar changed."""
        self.done = min(self.total, self.done + steps)
        if not self.enabled:
            return
        filled = self.width * self.done // self.total
        if filled == self._drawn and self.done != self.total:
            return
        self._drawn = filled
        bar = "#" * filled + "." * (self.width - filled)
        self.stream.write(f"\r{self.label} [{bar}] {self.done}/{self.total}")
        if self.done == self.total:
            self.stream.write("\n")
        self.stream.flush()

    def iterate(self, items: Iterable[Any]) -> Iterator[Any]:
        """Yield ``items``, advancing after each."""
        for item in items:
            yield item
            self.advance()


# --------------------------------------------------------------------------- target database


class Target:
    """The database and schema a command works on."""

    def __init__(self, url: URL, schema: str | None) -> None:
        self.url = url
        self.schema = schema
        #: The environment variable the URL came from (``None``: ``--url``).
        self.source: str | None = None

    @property
    def display(self) -> str:
        """The URL with its password hidden."""
        return redact_url(self.url)

    @property
    def is_sqlite(self) -> bool:
        """Whether the database is SQLite."""
        return self.url.get_backend_name() == "sqlite"

    @property
    def sqlite_path(self) -> Path | None:
        """The database file of a SQLite URL (None for in-memory)."""
        if not self.is_sqlite or self.url.database in (None, "", ":memory:"):
            return None
        return Path(str(self.url.database))

    def describe(self) -> str:
        """``<url>`` plus the schema when there is one."""
        return self.display + (f" (schema {self.schema})" if self.schema else "")


def env_database_variable(args: argparse.Namespace) -> str | None:
    """The environment variable that named this command's database (``None``: ``--url``)."""
    return None if getattr(args, "url", None) else database_url_variable()


def _resolve_target(args: argparse.Namespace) -> Target:
    raw: str | None = args.url or database_url_from_env()
    if not raw:
        raise CliError(
            f"no database: pass --url or set {ENV_POSTGRES_URL} / {ENV_SQLITE_PATH}", EXIT_USAGE
        )
    source = env_database_variable(args)
    url = migrate.normalize_url(raw)
    backend = url.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise CliError(
            (f"{source}: " if source else "")
            + f"unsupported database {backend!r} in {redact_url(url)} (sqlite or postgresql)",
            EXIT_USAGE,
        )
    schema: str | None
    if backend == "sqlite":
        if args.schema:
            raise CliError(
                "--schema applies to PostgreSQL only (SQLite has no schemas)", EXIT_USAGE
            )
        schema = None
    else:
        if args.schema is not None:
            schema = migrate.validate_schema_name(args.schema or None)
        else:
            schema = os.environ.get(ENV_POSTGRES_SCHEMA, migrate.DEFAULT_SCHEMA) or None
            try:
                schema = migrate.validate_schema_name(schema)
            except EntryValidationError as exc:
                raise CliError(
                    f"{ENV_POSTGRES_SCHEMA}: {str(exc).removeprefix(f'{exc.field}: ')}", EXIT_USAGE
                ) from None
    target = Target(url, schema)
    target.source = source
    return target


def _require_existing_sqlite(target: Target) -> None:
    path = target.sqlite_path
    if path is not None and not path.exists():
        where = f"{target.source}: " if target.source else ""
        raise CliError(f"{where}no such database file: {path} (run `firefly-orm migrate` first)")


def _open_store(target: Target, args: argparse.Namespace, *, vectors: bool = False) -> Any:
    """A store on ``target`` that checks the schema is at head (never migrates).

    ``vectors``: the store's vector tables too (built with ``vectors=True``).
    """
    _require_existing_sqlite(target)
    store: Any
    if target.is_sqlite:
        store = SQLAlchemyStore(target.url, vectors=vectors)
    else:
        store = PostgreSQLStore(
            target.url,
            schema_name=target.schema,
            pool_min_size=0,
            timeout=args.timeout,
            vectors=vectors,
        )
    try:
        store.initialize(migrate=False)
    except BaseException:
        store.close()
        raise
    return store


@contextmanager
def _store(target: Target, args: argparse.Namespace, *, vectors: bool = False) -> Iterator[Any]:
    store = _open_store(target, args, vectors=vectors)
    try:
        yield store
    finally:
        store.close()


@contextmanager
def _migration_engine(target: Target, args: argparse.Namespace) -> Iterator[Any]:
    """An engine for the migration commands (connect timeout on PostgreSQL, the stores'
    ``?pooler=`` applied), disposed after."""
    connect_args = {} if target.is_sqlite else {"connect_timeout": max(1, int(args.timeout))}
    engine = migration_engine(target.url, connect_args=connect_args)
    try:
        yield engine
    finally:
        engine.dispose()


def _model_or_factory(
    model: str | None,
    factory: str | None,
    factory_option: str,
    kinds: Callable[[], tuple[type[Any], ...]],
    kind_name: str,
) -> Any:
    """``--model``'s name, or the object ``factory_option MODULE:NAME`` imports.

    The object may be one of ``kinds()`` or a callable returning one (called
    once); ``kinds`` is called only for a factory, so ``--model`` imports no
    model library here.  Refused with :data:`EXIT_USAGE` before the database is
    opened: neither or both given, a spec that is not ``MODULE:NAME``, a failed
    import, an object that is not (and does not make) ``kind_name``.
    """
    if bool(model) == bool(factory):
        raise CliError(f"give either --model or {factory_option}", EXIT_USAGE)
    if model:
        return model
    module_name, _, attribute = str(factory).partition(":")
    if not module_name or not attribute:
        raise CliError(f"{factory_option}: expected MODULE:NAME", EXIT_USAGE)
    try:
        found: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise CliError(f"{factory_option} {factory}: {exc}", EXIT_USAGE) from None
    wanted = kinds()
    if not isinstance(found, wanted) and callable(found):
        found = found()
    if not isinstance(found, wanted):
        raise CliError(
            f"{factory_option} {factory}: not {kind_name} (got {type(found).__name__})",
            EXIT_USAGE,
        )
    return found


def _warn(message: str) -> None:
    print(f"firefly-orm: warning: {message}", file=sys.stderr)
