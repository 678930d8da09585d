"""``firefly-orm rotate-keys`` (internal): re-encrypt a database's rows under the current key.

The keys come from ``--keys-file`` (the text format of
:mod:`firefly_orm.privacy._keys`, the current key first), else from
``FIREFLY_AGENTIC_MEMORY_ENCRYPTION_KEYS``.  ``--prefix`` names the encrypted
namespaces (as ``Encryption(namespaces=...)``; default: every namespace),
``--searchable`` those that keep their search text in clear.  Rows are
re-encrypted ``--batch-size`` at a time, each batch one transaction: an
interrupted run leaves every row readable, and running it again finishes.
"""

from __future__ import annotations

import argparse

from firefly_orm.cli import _target
from firefly_orm.cli._target import (
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Progress,
    _resolve_target,
    print_summary,
)
from firefly_orm.privacy import (
    Encryption,
    EncryptionConfigError,
    KeyRing,
    RotationProgress,
    rotate_keys,
    store_namespaces,
)

__all__: list[str] = []


def _encryption(args: argparse.Namespace) -> Encryption:
    try:
        keys = KeyRing.from_file(args.keys_file) if args.keys_file else KeyRing.from_env()
        return Encryption(
            keys,
            namespaces=args.prefixes or None,
            searchable=args.searchable or (),
            allow_plaintext=args.allow_plaintext,
        )
    except EncryptionConfigError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def _cmd_rotate_keys(args: argparse.Namespace) -> int:
    encryption = _encryption(args)  # refused before the database is opened
    target = _resolve_target(args)
    with _target._store(target, args) as store:
        namespaces = args.namespaces or store_namespaces(store)
        progress = Progress(len(namespaces), "rotate-keys", enabled=args.progress)
        seen: set[str] = set()

        def on_batch(step: RotationProgress) -> None:
            if step.namespace not in seen:
                seen.add(step.namespace)
                progress.advance()

        report = rotate_keys(
            store,
            encryption,
            namespaces=namespaces,
            batch_size=args.batch_size,
            on_batch=on_batch,
        )
        progress.advance(progress.total)
    summary = {
        "key_id": report.key_id,
        "namespaces": report.namespaces,
        "examined": report.examined,
        "rotated": report.rotated,
        "encrypted": report.encrypted,
        "batches": report.batches,
    }
    print_summary(
        args,
        summary,
        f"{report.changed} row(s) now under key {report.key_id!r} "
        f"({report.rotated} rotated, {report.encrypted} encrypted; "
        f"{report.examined} examined in {report.namespaces} encrypted namespace(s), "
        f"{report.batches} batch(es))",
    )
    return EXIT_OK
