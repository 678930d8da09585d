"""The migration commands (internal).

migrate/upgrade, downgrade, stamp, current, check and history.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from alembic.script import ScriptDirectory

from firefly_orm import migrate
from firefly_orm.cli._target import (
    EXIT_NOT_AT_HEAD,
    EXIT_OK,
    Target,
    _migration_engine,
    _require_existing_sqlite,
    _resolve_target,
)
from firefly_orm.errors import (
    MigrationRequiredError,
)

__all__: list[str] = []

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
    if args.vectors:
        with _target_engine(args) as (target, engine):
            was = migrate.vectors_current(engine, schema_name=target.schema)
            migrate.upgrade_vectors(engine, schema_name=target.schema)
            now = migrate.vectors_current(engine, schema_name=target.schema)
        state = f"already at {now}" if was == now else f"upgraded {was or '(none)'} -> {now}"
        print(f"{target.describe()}: vector tables {state}")
    return EXIT_OK


def _cmd_downgrade_vectors(args: argparse.Namespace) -> int:
    with _target_engine(args) as (target, engine):
        was = migrate.vectors_current(engine, schema_name=target.schema)
        migrate.downgrade_vectors(engine, args.revision, schema_name=target.schema)
        now = migrate.vectors_current(engine, schema_name=target.schema)
    print(f"{target.describe()}: vector tables downgraded {was or '(none)'} -> {now or '(none)'}")
    return EXIT_OK


def _cmd_downgrade(args: argparse.Namespace) -> int:
    if args.vectors:
        return _cmd_downgrade_vectors(args)
    schema_left: list[bool] = []

    def downgrade(engine: Any, schema: str | None) -> None:
        migrate.downgrade(engine, args.revision, schema_name=schema)
        if schema is not None and engine.dialect.name == "postgresql":
            with engine.connect() as conn:
                schema_left.append(sa.inspect(conn).has_schema(schema))

    target, before, after = _change_revision(args, downgrade)
    note = ""
    if after is None and schema_left:
        # At base our empty schema goes; one holding anything else stays.
        note = (
            f"; schema {target.schema} kept (not empty, or not this role's to drop)"
            if schema_left[0]
            else f"; schema {target.schema} dropped (it was empty)"
        )
    print(f"{target.describe()}: downgraded {before or '(empty)'} -> {after or '(base)'}{note}")
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
