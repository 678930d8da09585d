"""The artifact workspace commands (internal).

artifacts export and artifacts import, in Flyte's directory layout
(:mod:`firefly_orm.artifacts._flyte`).
"""

from __future__ import annotations

import argparse
import sys

from firefly_orm.artifacts import Artifacts, WorkspaceExistsError
from firefly_orm.artifacts._flyte import export_directory, read_directory
from firefly_orm.cli import _target
from firefly_orm.cli._target import EXIT_NOT_AT_HEAD, EXIT_OK, EXIT_USAGE, CliError, _resolve_target
from firefly_orm.errors import (
    EntryValidationError,
    NotFoundError,
)

__all__: list[str] = []


def _cmd_artifacts_export(args: argparse.Namespace) -> int:
    target = _resolve_target(args)
    with _target._store(target, args) as store:
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
    try:
        # The whole directory is read and checked before the database is opened.
        snapshot = read_directory(args.directory, key=args.key)
    except EntryValidationError as exc:
        raise CliError(f"{args.directory}: {exc}; nothing imported", EXIT_USAGE) from None
    target = _resolve_target(args)
    with _target._store(target, args) as store:
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
