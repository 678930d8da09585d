"""Moving data in and out (internal): export, import and import-upstream."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from datetime import UTC
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from firefly_orm._interop._export_file import (
    ImportDocument,
    LongTermSection,
    decode_export_file,
    export_document,
    read_import_document,
)
from firefly_orm._interop._upstream_once import mark_imported
from firefly_orm._interop._upstream_plan import ImportProgress, UpstreamSourceError
from firefly_orm._interop._upstream_run import import_upstream
from firefly_orm._interop._upstream_sources import upstream_source
from firefly_orm.bridges._steps import Transaction, retrying, run
from firefly_orm.cli import _target
from firefly_orm.cli._maintenance import _table
from firefly_orm.cli._target import (
    EXIT_NOT_AT_HEAD,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Progress,
    _resolve_target,
    _warn,
)
from firefly_orm.conversation import ConversationMemory
from firefly_orm.conversation._state import read_shared_state, write_shared_state
from firefly_orm.conversation._transfer import refresh_statistics
from firefly_orm.entry import (
    DEFAULT_SEARCH_LANGUAGE,
    MemoryScope,
    utcnow,
    validate_namespace,
)
from firefly_orm.errors import (
    EntryValidationError,
    StoreCorruptedError,
)
from firefly_orm.knowledge import KnowledgeGraph
from firefly_orm.long_term import LongTermMemory
from firefly_orm.long_term._daily import is_log_namespace
from firefly_orm.protocols import UnitOfWork
from firefly_orm.sql import SQLUnitOfWork

__all__ = [
    "long_term_namespaces",
]

# --------------------------------------------------------------------------- export


def _conversation_memory(store: Any) -> ConversationMemory:
    return ConversationMemory(store=store)


def long_term_namespaces(store: Any) -> dict[str, Counter[str | None]]:
    """Every namespace holding live ``LONG_TERM`` entries, with their search languages.

    Daily logs (:mod:`firefly_orm.long_term._daily`) are not items: left out.

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
            if is_log_namespace(str(namespace)):
                continue
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
    with _target._store(target, args) as store:
        conv = _conversation_memory(store)
        known = set(conv.conversation_ids)
        ids: list[str] = sorted(known) if args.all else list(args.conversation_ids)
        missing = [cid for cid in ids if cid not in known]
        if missing:
            raise CliError(f"no such conversation: {', '.join(missing)}", EXIT_NOT_AT_HEAD)
        progress = Progress(len(ids), "export", enabled=args.progress)
        exported = [conv.export_conversation(cid) for cid in progress.iterate(ids)]
        long_term = _export_long_term(store, args, named)
        # --all: every user's knowledge graph too (the section is left out when there is none).
        graph = KnowledgeGraph(store)
        knowledge = [graph.export_user(user) for user in graph.users()] if args.all else []
        # --all: the app's and the users' scoped state (left out when there is none).
        state = run(store, iter(Transaction.read(read_shared_state))) if args.all else None
    data = export_document(
        exported, single=not args.all, long_term=long_term, knowledge=knowledge, state=state
    )
    text = json.dumps(data, indent=2, ensure_ascii=False, sort_keys=True)
    what = f"{len(exported)} conversation(s)"
    if long_term is not None:
        items = sum(len(section.items) for section in long_term)
        what += f" and {items} long-term item(s) from {len(long_term)} namespace(s)"
    if knowledge:
        what += f" and the knowledge graphs of {len(knowledge)} user(s)"
    if state and (state["app"] or state["users"]):
        what += f" and the scoped state of the app and {len(state['users'])} user(s)"
    if args.output and args.output != "-":
        out = Path(args.output)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n", encoding="utf-8")
        print(f"exported {what} to {out}", file=sys.stderr)
    else:
        print(text)
    return EXIT_OK


# --------------------------------------------------------------------------- import


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
        graph = KnowledgeGraph(bound)
        for position, user_graph in enumerate(document.knowledge):
            try:
                graph.import_user(user_graph)
            except EntryValidationError as exc:
                raise EntryValidationError(f"knowledge[{position}]", str(exc)) from None
    if document.state is not None:  # checked when the file was read
        write_shared_state(uow, document.state)
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
    with _target._store(target, args) as store:
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
    for user_graph in document.knowledge:
        user = user_graph["user_id"]
        print(f"imported the knowledge graph of user {user!r}", file=sys.stderr)
    if document.state is not None:
        users = len(document.state["users"])
        print(f"imported the scoped state of the app and {users} user(s)", file=sys.stderr)
    return EXIT_OK


def _cmd_import_upstream(args: argparse.Namespace) -> int:
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
    with _target._store(target, args) as store:
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
        if summary.ok:  # all of it is in: the compatible stores open on it from now on
            mark_imported(store, source, summary.imported)
        run(store, refresh_statistics(summary.imported))
    print(json.dumps(summary.to_dict(), indent=2) if args.json else summary.describe())
    return EXIT_OK if summary.ok else EXIT_USAGE
