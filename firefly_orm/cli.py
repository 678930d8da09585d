"""The ``firefly-orm`` command: migrations, maintenance, export/import.

Usage::

    firefly-orm migrate --url postgresql+psycopg://admin@db/app --schema firefly_memory
    firefly-orm check            # exit 1 when migrations are pending (for CI / start-up)
    firefly-orm current | history | stamp [REV] | downgrade REV
    firefly-orm stats [--json]
    firefly-orm cleanup-expired
    firefly-orm export CONVERSATION_ID [-o FILE]     # or: export --all -o all.json
    firefly-orm export --long-term-namespace NS -o items.json
    firefly-orm import FILE
    firefly-orm import-upstream SOURCE   # Firefly framework data: dir, SQLite file, mongodb://
    firefly-orm artifacts export KEY DIR [--user USER] [--force]
    firefly-orm artifacts import DIR [--key KEY] [--user USER] [--replace]
    firefly-orm demo

The database comes from ``--url``, else ``FIREFLY_AGENTIC_MEMORY_POSTGRES_URL``,
else ``FIREFLY_AGENTIC_MEMORY_SQLITE_PATH``.  On PostgreSQL the schema is
``--schema``, else ``FIREFLY_AGENTIC_MEMORY_POSTGRES_SCHEMA``, else
``firefly_memory``; ``--schema ""`` means the connection's default schema.

Only ``migrate``/``upgrade``, ``downgrade`` and ``stamp`` change the schema;
every other command needs a database at head and says so otherwise.  Errors
are reported as one line on stderr (passwords hidden) with a non-zero exit
status: 1 = not at head / not found, 2 = usage or bad input, 3 = any other error.

``export --all`` carries every conversation and the long-term items of every
namespace that holds live ``LONG_TERM`` entries (``--long-term-namespace NS``,
repeatable, picks namespaces instead; ``--no-long-term`` leaves them out).

``import`` reads and checks the shape of the whole file (UTF-8 JSON in one of
the shapes ``export`` writes, ``firefly_orm.interop._export_file``) before it opens
the database, then writes every conversation and every long-term item in ONE
transaction: a bad item, or a write that fails, leaves the database as it was
(exit 2 for a file that cannot be read or is invalid).

``artifacts export`` writes an artifact workspace as a directory in Flyte's
layout (:mod:`firefly_orm.artifacts.flyte`), under a temporary name renamed
into place; an existing ``DIR`` must be empty, or hold an exported workspace
and ``--force`` be given.  ``artifacts import`` reads and checks the whole
directory before it opens the database and writes the workspace in one
transaction (exit 2 for a refused directory, or an existing workspace without
``--replace``; exit 1 for a workspace to export that does not exist).
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
from sqlalchemy.engine import URL, Connection
from sqlalchemy.orm import Session

from firefly_orm import migrate
from firefly_orm.bridges.steps import Transaction, retrying, run
from firefly_orm.conversation import ConversationMemory, conversation_namespace
from firefly_orm.conversation.transfer import refresh_statistics
from firefly_orm.entry import (
    DEFAULT_SEARCH_LANGUAGE,
    MemoryEntry,
    MemoryScope,
    utcnow,
    validate_namespace,
)
from firefly_orm.envnames import ENV_POSTGRES_SCHEMA as ENV_POSTGRES_SCHEMA
from firefly_orm.envnames import ENV_POSTGRES_URL as ENV_POSTGRES_URL
from firefly_orm.envnames import ENV_SQLITE_PATH as ENV_SQLITE_PATH
from firefly_orm.envnames import database_url_from_env
from firefly_orm.errors import (
    EntryValidationError,
    FireflyOrmError,
    MigrationRequiredError,
    NotFoundError,
    StoreCorruptedError,
    redact_url,
    scrub_secret,
    url_secrets,
)
from firefly_orm.interop._export_file import (
    EXPORT_FORMAT_VERSION as EXPORT_FORMAT_VERSION,
)
from firefly_orm.interop._export_file import (
    ImportDocument,
    LongTermSection,
    decode_export_file,
    export_document,
    read_import_document,
)
from firefly_orm.long_term import LongTermMemory
from firefly_orm.protocols import UnitOfWork
from firefly_orm.sql import SQLUnitOfWork

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
    """An engine for the migration commands (connect timeout on PostgreSQL, the stores'
    ``?pooler=`` applied), disposed after."""
    from firefly_orm.migrate._commands import migration_engine

    connect_args = {} if target.is_sqlite else {"connect_timeout": max(1, int(args.timeout))}
    engine = migration_engine(target.url, connect_args=connect_args)
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
        # no file yet: not migrated (and not created by us)
        advice = migrate.migrate_advice(target.url, target.schema, None)
        print(
            f"{target.describe()}: database not at head; pending: {migrate.head()}; {advice}",
            file=sys.stderr,
        )
        return EXIT_NOT_AT_HEAD
    try:
        with _migration_engine(target, args) as engine:
            migrate.require_head(engine, schema_name=target.schema)
    except MigrationRequiredError as exc:
        print(f"{target.describe()}: {exc}", file=sys.stderr)  # names the command to run
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
        "by_prefix": {namespace text before the first ':': n},
        "long_term": {"entries", "expired", "by_namespace": {namespace: n}}}``;
        ``long_term`` counts the entries of scope ``LONG_TERM`` (long-term
        memory items and any other entry of that scope).
    """
    table = _table()
    c = table.c
    now = utcnow()
    long_term = c.scope == MemoryScope.LONG_TERM.value
    with store.engine.connect() as conn:
        total = conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()
        expired = conn.execute(
            sa.select(sa.func.count()).select_from(table).where(c.expires_at <= now)
        ).scalar_one()
        long_term_expired = conn.execute(
            sa.select(sa.func.count()).select_from(table).where(long_term, c.expires_at <= now)
        ).scalar_one()
        long_term_by_namespace = {
            str(namespace): int(n)
            for namespace, n in conn.execute(
                sa.select(c.namespace, sa.func.count()).where(long_term).group_by(c.namespace)
            )
        }
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
        "long_term": {
            "entries": sum(long_term_by_namespace.values()),
            "expired": int(long_term_expired),
            "by_namespace": dict(sorted(long_term_by_namespace.items())),
        },
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
    long_term = stats["long_term"]
    print(f"long-term:     {long_term['entries']} ({long_term['expired']} expired)")
    print("by scope:")
    for scope, n in stats["by_scope"].items():
        print(f"  {scope:<16} {n}")
    print("by namespace prefix:")
    for prefix, n in stats["by_prefix"].items():
        print(f"  {prefix:<16} {n}")
    print("long-term entries by namespace:")
    for namespace, n in long_term["by_namespace"].items():
        print(f"  {namespace:<16} {n}")
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


def _warn(message: str) -> None:
    print(f"firefly-orm: warning: {message}", file=sys.stderr)


def long_term_namespaces(store: Any) -> dict[str, Counter[str | None]]:
    """Every namespace holding live ``LONG_TERM`` entries, with their search languages.

    Returns:
        ``{namespace: Counter({search_language: entries})}`` (``None``: the
        entries are indexed with ``simple``), namespaces in sorted order.
    """
    c = _table().c
    live = sa.or_(c.expires_at.is_(None), c.expires_at > utcnow())
    query = (
        sa.select(c.namespace, c.search_language, sa.func.count())
        .where(c.scope == MemoryScope.LONG_TERM.value, live)
        .group_by(c.namespace, c.search_language)
    )
    found: dict[str, Counter[str | None]] = {}
    with store.engine.connect() as conn:
        for namespace, language, n in conn.execute(query):
            found.setdefault(str(namespace), Counter())[language] += int(n)
    return dict(sorted(found.items()))


def _section_language(namespace: str, languages: Counter[str | None]) -> str | None:
    """The search language most of a namespace's items use (a warning when they differ)."""
    ranked = sorted(languages.items(), key=lambda kv: (-kv[1], kv[0] or ""))
    language = ranked[0][0] if ranked else None
    if len(ranked) > 1:
        counts = ", ".join(f"{lang or DEFAULT_SEARCH_LANGUAGE}: {n}" for lang, n in ranked)
        _warn(
            f"long-term namespace {namespace!r} mixes search languages ({counts}); "
            f"the export records {language or DEFAULT_SEARCH_LANGUAGE!r}, and an import indexes "
            "every item of the namespace with it"
        )
    return language


def _export_long_term(
    store: Any, args: argparse.Namespace, named: list[str]
) -> list[LongTermSection] | None:
    """The long-term sections ``export`` writes, or ``None`` for none.

    Named namespaces (``--long-term-namespace``) must hold live long-term
    entries laid out as :class:`~firefly_orm.long_term.LongTermMemory` items
    (else an error); with ``--all``, every namespace holding live ``LONG_TERM``
    entries is exported, and one whose entries are not such items (written
    with the ``LONG_TERM`` scope by other code) is skipped with a warning.
    """
    if args.no_long_term or (not named and not args.all):
        return None
    found = long_term_namespaces(store)
    if named:
        missing = [ns for ns in named if ns not in found]
        if missing:
            raise CliError(
                f"no long-term items in namespace(s): {', '.join(map(repr, missing))}",
                EXIT_NOT_AT_HEAD,
            )
    wanted = named or list(found)
    sections: list[LongTermSection] = []
    for namespace in wanted:
        language = _section_language(namespace, found[namespace])
        memory = LongTermMemory(store=store, namespace=namespace, language=language)
        try:
            items = memory.export_items()
        except StoreCorruptedError as exc:
            if named:
                raise
            _warn(f"long-term namespace {namespace!r} not exported: {exc}")
            continue
        sections.append(LongTermSection(namespace, items, language))
    return sections


def _cmd_export(args: argparse.Namespace) -> int:
    named = list(dict.fromkeys(validate_namespace(ns) for ns in args.long_term_namespaces or ()))
    if named and args.no_long_term:
        raise CliError("--no-long-term and --long-term-namespace exclude each other", EXIT_USAGE)
    if not args.all and not args.conversation_ids and not named:
        raise CliError("give CONVERSATION_ID(s), --all or --long-term-namespace", EXIT_USAGE)
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
        long_term = _export_long_term(store, args, named)
    data = export_document(exported, single=not args.all, long_term=long_term)
    text = json.dumps(data, indent=2, ensure_ascii=False, sort_keys=True)
    what = f"{len(exported)} conversation(s)"
    if long_term is not None:
        items = sum(len(section.items) for section in long_term)
        what += f" and {items} long-term item(s) from {len(long_term)} namespace(s)"
    if args.output and args.output != "-":
        out = Path(args.output)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n", encoding="utf-8")
        print(f"exported {what} to {out}", file=sys.stderr)
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


def _import_document(
    uow: UnitOfWork, store: Any, document: ImportDocument, conversation_id: str | None
) -> tuple[list[str], list[int]]:
    """Transaction: write ``document``'s conversations and long-term items in ``uow``.

    The memory layers run on ``store.bind_session`` over a Session joined to
    the unit of work's connection, so each of their operations is a SAVEPOINT
    of this one transaction: everything the file holds is committed together,
    or (when anything raises) nothing.

    Returns:
        The conversation ids, and the number of items written per long-term section.

    Raises:
        EntryValidationError: A bad conversation or item; a long-term item is
            named ``long_term[i].items[j].<field>``.
    """
    if not isinstance(uow, SQLUnitOfWork) or not isinstance(uow.target, Connection):
        raise TypeError("an import needs a SQL store's own unit of work")
    with Session(bind=uow.target) as session:
        bound = store.bind_session(session)
        ids = _conversation_memory(bound).import_conversations(
            document.conversations, conversation_id=conversation_id
        )
        written: list[int] = []
        for position, section in enumerate(document.long_term):
            memory = LongTermMemory(
                store=bound, namespace=section.namespace, language=section.language
            )
            try:
                written.append(len(memory.import_items(section.items)))
            except EntryValidationError as exc:
                message = str(exc).removeprefix(f"{exc.field}: ")
                raise EntryValidationError(
                    f"long_term[{position}].{exc.field}",
                    f"{message} (namespace {section.namespace!r})",
                ) from None
    return ids, written


def _cmd_import(args: argparse.Namespace) -> int:
    if args.conversation_id is not None and not args.conversation_id:
        raise CliError("--conversation-id must not be empty", EXIT_USAGE)
    data = _read_import(args.file)
    try:
        document = read_import_document(data, args.conversation_id)
    except ValueError as exc:
        raise CliError(f"{args.file}: {exc}; nothing imported", EXIT_USAGE) from None
    target = _resolve_target(args)
    with _store(target, args) as store:
        try:
            # Shapes are checked; every conversation and item is validated and
            # written in one transaction: a bad item or a failed write leaves
            # the store as it was.
            ids, written = run(
                store,
                retrying(
                    Transaction.write(_import_document, store, document, args.conversation_id)
                ),
            )
        except EntryValidationError as exc:
            raise CliError(f"{args.file}: {exc}; nothing imported", EXIT_USAGE) from None
        turns = sum(len(c["turns"]) for c in document.conversations)
        run(store, refresh_statistics(turns + sum(written)))
    progress = Progress(len(ids), "import", enabled=args.progress)
    for cid in progress.iterate(ids):
        print(cid, flush=True)
    for section, n in zip(document.long_term, written, strict=True):
        print(
            f"imported {n} long-term item(s) into namespace {section.namespace!r}",
            file=sys.stderr,
        )
    return EXIT_OK


def _cmd_import_upstream(args: argparse.Namespace) -> int:
    from datetime import UTC

    from firefly_orm.upstream_import import (
        ImportProgress,
        UpstreamSourceError,
        import_upstream,
        upstream_source,
    )

    try:
        source = upstream_source(
            args.source,
            database=args.mongo_database,
            collection=args.mongo_collection,
            table=args.sqlite_table,
        )
    except (UpstreamSourceError, EntryValidationError) as exc:
        raise CliError(f"{exc}; nothing imported", EXIT_USAGE) from None

    def on_progress(progress: ImportProgress) -> None:
        if args.progress:
            print(progress.describe(), file=sys.stderr, flush=True)

    target = _resolve_target(args)
    with _store(target, args) as store:
        try:
            # One unit of work per namespace; a rerun skips what is already there.
            summary = import_upstream(
                source,
                store,
                replace_existing=args.replace_existing,
                skip_invalid=args.skip_invalid,
                assume_timezone=UTC if args.assume_utc else None,
                on_progress=on_progress,
            )
        except UpstreamSourceError as exc:
            raise CliError(f"{exc}; nothing imported", EXIT_USAGE) from None
        run(store, refresh_statistics(summary.imported))
    print(json.dumps(summary.to_dict(), indent=2) if args.json else summary.describe())
    return EXIT_OK if summary.ok else EXIT_USAGE


# --------------------------------------------------------------------------- artifact workspaces


def _cmd_artifacts_export(args: argparse.Namespace) -> int:
    from firefly_orm.artifacts import Artifacts
    from firefly_orm.artifacts.flyte import export_directory

    target = _resolve_target(args)
    with _store(target, args) as store:
        workspace = Artifacts(store=store, user_id=args.user).workspace(args.key)
        try:
            snapshot = export_directory(workspace, args.directory, overwrite=args.force)
        except NotFoundError as exc:
            raise CliError(str(exc), EXIT_NOT_AT_HEAD) from None
    print(
        f"exported artifact workspace {snapshot.key!r} to {args.directory}: "
        f"{len(snapshot.files)} file(s), {len(snapshot.audit)} audit record(s), "
        f"{len(snapshot.versions)} version(s), {len(snapshot.messages)} message(s)",
        file=sys.stderr,
    )
    return EXIT_OK


def _cmd_artifacts_import(args: argparse.Namespace) -> int:
    from firefly_orm.artifacts import Artifacts, WorkspaceExistsError
    from firefly_orm.artifacts.flyte import read_directory

    try:
        # The whole directory is read and checked before the database is opened.
        snapshot = read_directory(args.directory, key=args.key)
    except EntryValidationError as exc:
        raise CliError(f"{args.directory}: {exc}; nothing imported", EXIT_USAGE) from None
    target = _resolve_target(args)
    with _store(target, args) as store:
        artifacts = Artifacts(store=store, user_id=args.user)
        try:
            workspace = artifacts.import_snapshot(snapshot, replace=args.replace)
        except WorkspaceExistsError:
            raise CliError(
                f"artifact workspace {snapshot.key!r} already exists; "
                "pass --replace to replace it (nothing imported)",
                EXIT_USAGE,
            ) from None
        except EntryValidationError as exc:
            raise CliError(f"{args.directory}: {exc}; nothing imported", EXIT_USAGE) from None
    print(workspace.key)
    print(
        f"imported artifact workspace {workspace.key!r} from {args.directory}: "
        f"{len(snapshot.files)} file(s), {len(snapshot.audit)} audit record(s), "
        f"{len(snapshot.versions)} version(s), {len(snapshot.messages)} message(s)",
        file=sys.stderr,
    )
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
    p = add(
        "stats",
        "entries per scope and namespace prefix, expired, conversations, long-term entries",
        _cmd_stats,
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p = add("export", "export conversations and long-term items as JSON", _cmd_export)
    p.add_argument("conversation_ids", nargs="*", metavar="CONVERSATION_ID")
    p.add_argument(
        "--all",
        action="store_true",
        help="every conversation, and the long-term items of every namespace holding some",
    )
    p.add_argument(
        "--long-term-namespace",
        dest="long_term_namespaces",
        action="append",
        metavar="NAMESPACE",
        help="export this namespace's long-term items (repeatable; instead of every namespace)",
    )
    p.add_argument("--no-long-term", action="store_true", help="leave long-term items out of --all")
    p.add_argument("-o", "--output", help="file to write (default: stdout)")
    p = add(
        "import",
        "import conversations and long-term items from an export file ('-' = stdin)",
        _cmd_import,
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument("--conversation-id", help="import under this id (one conversation only)")
    p = add(
        "import-upstream",
        "import the Firefly framework memory module's data "
        "(a FileStore directory, a SQLiteStore file or a mongodb:// URL)",
        _cmd_import_upstream,
    )
    p.add_argument("source", metavar="SOURCE", help="directory, SQLite file or mongodb:// URL")
    p.add_argument("--mongo-database", help="upstream MongoDB database (default firefly_memory)")
    p.add_argument("--mongo-collection", help="upstream MongoDB collection (default entries)")
    p.add_argument("--sqlite-table", help="upstream SQLite table (default firefly_memory)")
    p.add_argument(
        "--replace-existing",
        action="store_true",
        help="overwrite entries the database already holds (default: keep them)",
    )
    p.add_argument(
        "--skip-invalid",
        action="store_true",
        help="import a namespace's valid entries even when some of its records are invalid",
    )
    p.add_argument(
        "--assume-utc", action="store_true", help="read date-times without a UTC offset as UTC"
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p = add("artifacts", "export or import an artifact workspace (Flyte's directory layout)", None)
    actions = p.add_subparsers(dest="artifacts_command", required=True, metavar="ACTION")
    owner_help = "the workspace's owner (default: a shared workspace)"
    p = actions.add_parser("export", help="write workspace KEY to directory DIR", parents=[common])
    p.set_defaults(func=_cmd_artifacts_export)
    p.add_argument("key", metavar="KEY")
    p.add_argument("directory", metavar="DIR")
    p.add_argument("--user", help=owner_help)
    p.add_argument(
        "--force", action="store_true", help="replace DIR when it holds an exported workspace"
    )
    p = actions.add_parser("import", help="import directory DIR as a workspace", parents=[common])
    p.set_defaults(func=_cmd_artifacts_import)
    p.add_argument("directory", metavar="DIR")
    p.add_argument("--key", help="the workspace key (default: the one DIR records, else its name)")
    p.add_argument("--user", help=owner_help)
    p.add_argument("--replace", action="store_true", help="replace the workspace if it exists")
    add("demo", "run the demo (firefly_orm.demo; other arguments go to it)", _cmd_demo)
    return parser


# --------------------------------------------------------------------------- main


def _one_line(exc: BaseException, args: argparse.Namespace | None) -> str:
    text = str(exc).strip() or type(exc).__name__
    return scrub_secret(text.splitlines()[0], _secrets(args))


def _secrets(args: argparse.Namespace | None) -> list[str]:
    """Every secret in the URLs this command may have used."""
    urls = (
        getattr(args, "url", None),
        getattr(args, "source", None),
        os.environ.get(ENV_POSTGRES_URL),
    )
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
