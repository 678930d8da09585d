"""The ``firefly-orm`` command: migrations, maintenance, export/import.

Usage::

    firefly-orm migrate --url postgresql+psycopg://admin@db/app --schema firefly_memory
    firefly-orm check            # exit 1 when migrations are pending (for CI / start-up)
    firefly-orm current | history | stamp [REV] | downgrade REV
    firefly-orm stats [--json]
    firefly-orm cleanup-expired
    firefly-orm export CONVERSATION_ID [-o FILE]     # or: export --all -o all.json
    firefly-orm import FILE
    firefly-orm demo

The database comes from ``--url``, else ``FIREFLY_AGENTIC_MEMORY_POSTGRES_URL``,
else ``FIREFLY_AGENTIC_MEMORY_SQLITE_PATH``.  On PostgreSQL the schema is
``--schema``, else ``FIREFLY_AGENTIC_MEMORY_POSTGRES_SCHEMA``, else
``firefly_memory``; ``--schema ""`` means the connection's default schema.

Only ``migrate``/``upgrade``, ``downgrade`` and ``stamp`` change the schema;
every other command needs a database at head and says so otherwise.  Errors
are reported as one line on stderr (passwords hidden) with a non-zero exit
status: 1 = not at head / not found, 2 = usage or bad input, 3 = any other error.

``import`` reads and validates the whole file (UTF-8 JSON in one of the shapes
``export`` writes) before writing anything, then writes every conversation in
one unit of work: a bad file, or a write that fails, leaves the database as
it was (exit 2 for a file that cannot be read or is invalid).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

import sqlalchemy as sa
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy.engine import URL

from firefly_orm import migrate
from firefly_orm.conversation import ConversationMemory, conversation_namespace
from firefly_orm.entry import MemoryEntry, utcnow
from firefly_orm.envnames import ENV_POSTGRES_SCHEMA as ENV_POSTGRES_SCHEMA
from firefly_orm.envnames import ENV_POSTGRES_URL as ENV_POSTGRES_URL
from firefly_orm.envnames import ENV_SQLITE_PATH as ENV_SQLITE_PATH
from firefly_orm.envnames import database_url_from_env
from firefly_orm.errors import (
    EntryValidationError,
    FireflyOrmError,
    MigrationRequiredError,
    redact_url,
    scrub_secret,
    url_secrets,
)
from firefly_orm.export_file import (
    EXPORT_FORMAT_VERSION as EXPORT_FORMAT_VERSION,
)
from firefly_orm.export_file import conversations_in, decode_export_file, export_document

__all__ = ["EXIT_ERROR", "EXIT_NOT_AT_HEAD", "EXIT_OK", "EXIT_USAGE", "Progress", "main"]

logger = logging.getLogger("firefly_orm")

EXIT_OK = 0
EXIT_NOT_AT_HEAD = 1
EXIT_USAGE = 2
EXIT_ERROR = 3

#: Namespace prefix of every conversation (what ``stats`` counts as one).
CONVERSATION_PREFIX = conversation_namespace("")


class CliError(Exception):
    """An error reported as one line with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


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


def _resolve_target(args: argparse.Namespace) -> Target:
    raw: str | None = args.url or database_url_from_env()
    if not raw:
        raise CliError(
            f"no database: pass --url or set {ENV_POSTGRES_URL} / {ENV_SQLITE_PATH}", EXIT_USAGE
        )
    url = migrate.normalize_url(raw)
    backend = url.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise CliError(
            f"unsupported database {backend!r} in {redact_url(url)} (sqlite or postgresql)",
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
            schema = args.schema or None
        else:
            schema = os.environ.get(ENV_POSTGRES_SCHEMA, migrate.DEFAULT_SCHEMA) or None
        schema = migrate.validate_schema_name(schema)
    return Target(url, schema)


def _require_existing_sqlite(target: Target) -> None:
    path = target.sqlite_path
    if path is not None and not path.exists():
        raise CliError(f"no such database file: {path} (run `firefly-orm migrate` first)")


def _open_store(target: Target, args: argparse.Namespace) -> Any:
    """A store on ``target`` that checks the schema is at head (never migrates)."""
    from firefly_orm.sql import PostgreSQLStore, SQLAlchemyStore

    _require_existing_sqlite(target)
    store: Any
    if target.is_sqlite:
        store = SQLAlchemyStore(target.url)
    else:
        store = PostgreSQLStore(
            target.url, schema_name=target.schema, pool_min_size=0, timeout=args.timeout
        )
    try:
        store.initialize(migrate=False)
    except BaseException:
        store.close()
        raise
    return store


@contextmanager
def _store(target: Target, args: argparse.Namespace) -> Iterator[Any]:
    store = _open_store(target, args)
    try:
        yield store
    finally:
        store.close()


@contextmanager
def _migration_engine(target: Target, args: argparse.Namespace) -> Iterator[Any]:
    """An engine for the migration commands (connect timeout on PostgreSQL), disposed after."""
    connect_args = {} if target.is_sqlite else {"connect_timeout": max(1, int(args.timeout))}
    try:
        engine = sa.create_engine(target.url, poolclass=sa.pool.NullPool, connect_args=connect_args)
    except ImportError as exc:
        from firefly_orm.errors import MissingExtraError

        raise MissingExtraError("PostgreSQL URLs", "postgres", exc.name) from exc
    try:
        yield engine
    finally:
        engine.dispose()


# --------------------------------------------------------------------------- migration commands


@contextmanager
def _target_engine(
    args: argparse.Namespace, *, create: bool = False
) -> Iterator[tuple[Target, Any]]:
    """The command's target and a migration engine on it.

    A missing SQLite file is created when ``create`` (``migrate``), else it is an error.
    """
    target = _resolve_target(args)
    if create and target.sqlite_path is not None:
        target.sqlite_path.parent.mkdir(parents=True, exist_ok=True)
    else:
        _require_existing_sqlite(target)
    with _migration_engine(target, args) as engine:
        yield target, engine


def _change_revision(
    args: argparse.Namespace, change: Callable[[Any, str | None], object], *, create: bool = False
) -> tuple[Target, str | None, str | None]:
    """Run ``change(engine, schema)``; the target and its revision before and after."""
    with _target_engine(args, create=create) as (target, engine):
        before = migrate.current(engine, schema_name=target.schema)
        change(engine, target.schema)
        after = migrate.current(engine, schema_name=target.schema)
    return target, before, after


def _cmd_migrate(args: argparse.Namespace) -> int:
    target, before, after = _change_revision(
        args,
        lambda engine, schema: migrate.upgrade(engine, schema_name=schema, revision=args.revision),
        create=True,
    )
    if before == after:
        print(f"{target.describe()}: already at {after}")
    else:
        print(f"{target.describe()}: upgraded {before or '(empty)'} -> {after}")
    return EXIT_OK


def _cmd_downgrade(args: argparse.Namespace) -> int:
    target, before, after = _change_revision(
        args, lambda engine, schema: migrate.downgrade(engine, args.revision, schema_name=schema)
    )
    print(f"{target.describe()}: downgraded {before or '(empty)'} -> {after or '(base)'}")
    return EXIT_OK


def _cmd_stamp(args: argparse.Namespace) -> int:
    target, _before, after = _change_revision(
        args, lambda engine, schema: migrate.stamp(engine, args.revision, schema_name=schema)
    )
    print(f"{target.describe()}: stamped {after or '(base)'}")
    return EXIT_OK


def _cmd_current(args: argparse.Namespace) -> int:
    with _target_engine(args) as (target, engine):
        at = migrate.current(engine, schema_name=target.schema)
    suffix = " (head)" if at == migrate.head() else ""
    print(f"{at or '(none: not migrated)'}{suffix}")
    return EXIT_OK


def _cmd_check(args: argparse.Namespace) -> int:
    target = _resolve_target(args)
    path = target.sqlite_path
    if path is not None and not path.exists():
        pending = [migrate.head()]  # no file yet: not migrated (and not created by us)
    else:
        with _migration_engine(target, args) as engine:
            pending = migrate.check(engine, schema_name=target.schema)
    if pending:
        print(
            f"{target.describe()}: database not at head; pending: {', '.join(pending)}",
            file=sys.stderr,
        )
        return EXIT_NOT_AT_HEAD
    print(f"{target.describe()}: at head ({migrate.head()})")
    return EXIT_OK


def _cmd_history(args: argparse.Namespace) -> int:
    script = ScriptDirectory.from_config(migrate.make_config())
    for rev in script.walk_revisions():
        labels = f" [{', '.join(sorted(rev.branch_labels))}]" if rev.branch_labels else ""
        head = " (head)" if rev.is_head else ""
        down = rev.down_revision or "<base>"
        doc = (rev.doc or "").strip().splitlines()
        print(f"{down} -> {rev.revision}{head}{labels}, {doc[0] if doc else ''}")
    return EXIT_OK


# --------------------------------------------------------------------------- data commands


def _table() -> sa.Table:
    table: sa.Table = MemoryEntry.__table__  # type: ignore[attr-defined]
    return table


def collect_stats(store: Any) -> dict[str, Any]:
    """Counts for ``firefly-orm stats`` over a SQL store (stored rows, expired included).

    Returns:
        ``{"total", "expired", "conversations", "by_scope": {scope: n},
        "by_prefix": {namespace text before the first ':': n}}``.
    """
    table = _table()
    c = table.c
    now = utcnow()
    with store.engine.connect() as conn:
        total = conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()
        expired = conn.execute(
            sa.select(sa.func.count()).select_from(table).where(c.expires_at <= now)
        ).scalar_one()
        by_scope = {
            str(scope): int(n)
            for scope, n in conn.execute(sa.select(c.scope, sa.func.count()).group_by(c.scope))
        }
        by_prefix: Counter[str] = Counter()
        conversations = 0
        for namespace, n in conn.execute(
            sa.select(c.namespace, sa.func.count()).group_by(c.namespace)
        ):
            by_prefix[str(namespace).split(":", 1)[0]] += int(n)
            if str(namespace).startswith(CONVERSATION_PREFIX):
                conversations += 1
    return {
        "total": int(total),
        "expired": int(expired),
        "conversations": conversations,
        "by_scope": dict(sorted(by_scope.items())),
        "by_prefix": dict(sorted(by_prefix.items())),
    }


def _cmd_stats(args: argparse.Namespace) -> int:
    target = _resolve_target(args)
    with _store(target, args) as store:
        stats = collect_stats(store)
    if args.json:
        print(json.dumps(stats, indent=2, sort_keys=True))
        return EXIT_OK
    print(f"database:      {target.describe()}")
    print(f"entries:       {stats['total']}")
    print(f"expired:       {stats['expired']}")
    print(f"conversations: {stats['conversations']}")
    print("by scope:")
    for scope, n in stats["by_scope"].items():
        print(f"  {scope:<16} {n}")
    print("by namespace prefix:")
    for prefix, n in stats["by_prefix"].items():
        print(f"  {prefix:<16} {n}")
    return EXIT_OK


def _cmd_cleanup(args: argparse.Namespace) -> int:
    target = _resolve_target(args)
    table = _table()
    c = table.c
    deleted = 0
    with _store(target, args) as store:
        cutoff = utcnow()
        with store.engine.connect() as conn:
            rows = conn.execute(
                sa.select(c.namespace, c.entry_id)
                .where(c.expires_at <= cutoff)
                .order_by(c.namespace, c.entry_id)
            ).all()
        progress = Progress(len(rows), "cleanup-expired", enabled=args.progress)
        for start in range(0, len(rows), args.batch_size):
            batch = rows[start : start + args.batch_size]
            by_ns: dict[str, list[str]] = {}
            for namespace, entry_id in batch:
                by_ns.setdefault(str(namespace), []).append(str(entry_id))
            with store.unit_of_work() as uow:
                for namespace, ids in by_ns.items():
                    uow.entries.delete(namespace, ids)
                uow.commit()
            deleted += len(batch)
            progress.advance(len(batch))
    print(f"deleted {deleted} expired entr{'y' if deleted == 1 else 'ies'}")
    return EXIT_OK


def _conversation_memory(store: Any) -> ConversationMemory:
    return ConversationMemory(store=store)


def _cmd_export(args: argparse.Namespace) -> int:
    if not args.all and not args.conversation_ids:
        raise CliError("give CONVERSATION_ID(s) or --all", EXIT_USAGE)
    target = _resolve_target(args)
    with _store(target, args) as store:
        conv = _conversation_memory(store)
        known = set(conv.conversation_ids)
        ids: list[str] = sorted(known) if args.all else list(args.conversation_ids)
        missing = [cid for cid in ids if cid not in known]
        if missing:
            raise CliError(f"no such conversation: {', '.join(missing)}", EXIT_NOT_AT_HEAD)
        progress = Progress(len(ids), "export", enabled=args.progress)
        exported = [conv.export_conversation(cid) for cid in progress.iterate(ids)]
    data = export_document(exported, single=not args.all)
    text = json.dumps(data, indent=2, ensure_ascii=False, sort_keys=True)
    if args.output and args.output != "-":
        out = Path(args.output)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n", encoding="utf-8")
        print(f"exported {len(exported)} conversation(s) to {out}", file=sys.stderr)
    else:
        print(text)
    return EXIT_OK


def _read_import(path: str) -> Any:
    """The decoded JSON document of an import file; :class:`CliError` (usage) when it is not."""
    try:
        raw = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}", EXIT_USAGE) from exc
    try:
        return decode_export_file(raw)
    except ValueError as exc:
        raise CliError(f"{path}: {exc}", EXIT_USAGE) from None


def _cmd_import(args: argparse.Namespace) -> int:
    if args.conversation_id is not None and not args.conversation_id:
        raise CliError("--conversation-id must not be empty", EXIT_USAGE)
    data = _read_import(args.file)
    try:
        items = conversations_in(data, args.conversation_id)
    except ValueError as exc:
        raise CliError(f"{args.file}: {exc}; nothing imported", EXIT_USAGE) from None
    target = _resolve_target(args)
    with _store(target, args) as store:
        conv = _conversation_memory(store)
        try:
            # Every conversation is validated, then all are written in one unit of
            # work: a bad item or a failed write leaves the store as it was.
            ids = conv.import_conversations(items, conversation_id=args.conversation_id)
        except EntryValidationError as exc:
            raise CliError(f"{args.file}: {exc}; nothing imported", EXIT_USAGE) from None
    progress = Progress(len(ids), "import", enabled=args.progress)
    for cid in progress.iterate(ids):
        print(cid, flush=True)
    return EXIT_OK


def _cmd_demo(args: argparse.Namespace) -> int:
    try:
        import importlib

        demo = importlib.import_module("firefly_orm.demo")
    except ModuleNotFoundError as exc:
        if exc.name != "firefly_orm.demo":
            raise
        raise CliError("the demo is not part of this installation (firefly_orm.demo)") from exc
    result = demo.main(list(args.extra))
    return int(result) if isinstance(result, int) else EXIT_OK


# --------------------------------------------------------------------------- parser


def _add_common(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    default: Any = argparse.SUPPRESS if suppress else None
    parser.add_argument(
        "--url",
        default=default,
        help=f"database URL (default: ${ENV_POSTGRES_URL}, else sqlite:///${ENV_SQLITE_PATH})",
    )
    parser.add_argument(
        "--schema",
        default=default,
        help=(
            f"PostgreSQL schema (default: ${ENV_POSTGRES_SCHEMA} or {migrate.DEFAULT_SCHEMA}; "
            "'' = the connection's default schema)"
        ),
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=argparse.SUPPRESS if suppress else 10.0,
        help="seconds to wait for a PostgreSQL connection (default 10)",
    )
    parser.add_argument(
        "--progress",
        action="store_true",
        default=argparse.SUPPRESS if suppress else None,
        help="draw progress bars on stderr even when it is not a terminal",
    )
    parser.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        default=argparse.SUPPRESS,
        help="never draw progress bars",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS if suppress else False,
        help="log what happens (firefly_orm and alembic loggers) on stderr",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``firefly-orm``."""
    parser = argparse.ArgumentParser(
        prog="firefly-orm",
        description="firefly_orm: migrations and maintenance of a memory database.",
    )
    _add_common(parser, suppress=False)
    common = argparse.ArgumentParser(add_help=False)
    _add_common(common, suppress=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, help_: str, func: Any, aliases: Sequence[str] = ()) -> Any:
        p = sub.add_parser(name, help=help_, parents=[common], aliases=list(aliases))
        p.set_defaults(func=func)
        return p

    p = add("migrate", "upgrade the schema (default: to head)", _cmd_migrate, ["upgrade"])
    p.add_argument("revision", nargs="?", default="head", help="target revision (default head)")
    p = add("downgrade", "downgrade the schema ('base' drops our tables)", _cmd_downgrade)
    p.add_argument("revision", help="target revision, e.g. base or -1")
    add("current", "print the revision the database is at", _cmd_current)
    add("history", "list the migrations", _cmd_history)
    add("check", "exit 1 unless the database is at head", _cmd_check)
    p = add("stamp", "record a revision without running migrations", _cmd_stamp)
    p.add_argument("revision", nargs="?", default="head")
    p = add("cleanup-expired", "delete expired entries", _cmd_cleanup)
    p.add_argument("--batch-size", type=int, default=500, help="entries per transaction")
    p = add("stats", "entries per scope and namespace prefix, expired, conversations", _cmd_stats)
    p.add_argument("--json", action="store_true", help="print JSON")
    p = add("export", "export conversations as JSON", _cmd_export)
    p.add_argument("conversation_ids", nargs="*", metavar="CONVERSATION_ID")
    p.add_argument("--all", action="store_true", help="every conversation")
    p.add_argument("-o", "--output", help="file to write (default: stdout)")
    p = add("import", "import conversations from an export file ('-' = stdin)", _cmd_import)
    p.add_argument("file", metavar="FILE")
    p.add_argument("--conversation-id", help="import under this id (one conversation only)")
    add("demo", "run the demo (firefly_orm.demo; other arguments go to it)", _cmd_demo)
    return parser


# --------------------------------------------------------------------------- main


def _one_line(exc: BaseException, args: argparse.Namespace | None) -> str:
    text = str(exc).strip() or type(exc).__name__
    return scrub_secret(text.splitlines()[0], _secrets(args))


def _secrets(args: argparse.Namespace | None) -> list[str]:
    """Every secret in the URLs this command may have used."""
    urls = (getattr(args, "url", None), os.environ.get(ENV_POSTGRES_URL))
    return [secret for raw in urls if raw for secret in url_secrets(raw)]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``firefly-orm``; returns the exit status."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "demo":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    if args.progress is None:
        args.progress = sys.stderr.isatty()
    if getattr(args, "batch_size", 1) < 1:
        parser.error("--batch-size must be at least 1")
    if args.verbose:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s [%(name)s] %(message)s"))
        for name in ("firefly_orm", "alembic"):
            log = logging.getLogger(name)
            log.addHandler(handler)
            log.setLevel(logging.INFO)
    try:
        return int(args.func(args))
    except CliError as exc:
        print(f"firefly-orm: {_one_line(exc, args)}", file=sys.stderr)
        return exc.exit_code
    except MigrationRequiredError as exc:
        print(f"firefly-orm: {_one_line(exc, args)}", file=sys.stderr)
        return EXIT_NOT_AT_HEAD
    except EntryValidationError as exc:
        print(f"firefly-orm: {_one_line(exc, args)}", file=sys.stderr)
        return EXIT_USAGE
    except CommandError as exc:  # Alembic: a revision it cannot find or cannot go to
        print(f"firefly-orm: {_one_line(exc, args)}", file=sys.stderr)
        return EXIT_USAGE
    except (FireflyOrmError, ImportError, OSError, sa.exc.SQLAlchemyError) as exc:
        print(f"firefly-orm: {type(exc).__name__}: {_one_line(exc, args)}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("firefly-orm: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
