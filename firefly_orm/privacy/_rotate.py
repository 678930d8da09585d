"""Key rotation: re-encrypt every row under the current key, in bounded, resumable batches.

:func:`rotate_keys` (and :func:`async_rotate_keys`, ``firefly-orm rotate-keys``)
walks the encrypted namespaces of a store.  In each namespace it reads which
live rows are not under the current key (one read-only unit of work), then
re-encrypts them ``batch_size`` at a time, **each batch one unit of work**:
every row of the batch is read again, decrypted with its own key, sealed with
the current one and saved with a version check (a row a writer changed
meanwhile is retried with the batch; a writer through :func:`protect` writes
under the current key anyway).

A crash (kill -9) at any point leaves every row readable, under its old key or
the new one, because a batch commits whole or not at all; run the rotation
again and it skips the rows already under the current key.  Keep the old keys
in the key provider until a rotation has finished.  Rows of an encrypted
namespace that hold plain content (written before encryption was turned on)
are encrypted too when ``Encryption(allow_plaintext=True)``; their clear
``search_text`` is dropped unless the namespace keeps it.  Expired rows are
not rotated (they are never read again).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, cast, runtime_checkable

import sqlalchemy as sa

from firefly_orm.bridges._steps import Operation, Transaction, arun, retrying, run
from firefly_orm.bridges._threads import call_blocking
from firefly_orm.entry import TABLE_NAME, MemoryEntry, metadata, validate_namespace
from firefly_orm.errors import FireflyOrmError
from firefly_orm.privacy._encryption import Encryption, envelope_key_id
from firefly_orm.privacy._errors import EncryptionError
from firefly_orm.privacy._hook import ProtectedStore
from firefly_orm.protocols import MemoryStore, UnitOfWork, declares
from firefly_orm.sql import SQLAlchemyStore

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "MAX_BATCH_SIZE",
    "RotationProgress",
    "RotationReport",
    "async_rotate_keys",
    "rotate_keys",
    "store_namespaces",
]

logger = logging.getLogger("firefly_orm")

#: Rows re-encrypted per unit of work by default.
DEFAULT_BATCH_SIZE = 200
#: The largest batch accepted (one unit of work must stay short).
MAX_BATCH_SIZE = 10_000


@dataclass
class RotationReport:
    """What a rotation did.

    Attributes:
        key_id: The current key every row is now under.
        namespaces: Encrypted namespaces visited.
        examined: Live rows looked at.
        rotated: Rows re-encrypted from an older key.
        encrypted: Plain rows encrypted (``allow_plaintext=True`` only).
        batches: Units of work committed.
    """

    key_id: str
    namespaces: int = 0
    examined: int = 0
    rotated: int = 0
    encrypted: int = 0
    batches: int = 0

    @property
    def changed(self) -> int:
        """Rows written: ``rotated + encrypted``."""
        return self.rotated + self.encrypted


@dataclass(frozen=True)
class RotationProgress:
    """Handed to ``on_batch`` after each committed batch.

    Attributes:
        namespace: The namespace the batch was in.
        written: Rows of that namespace written so far.
        report: The rotation's report so far.
    """

    namespace: str
    written: int
    report: RotationReport


@runtime_checkable
class _ListsNamespaces(Protocol):
    @property
    def namespaces(self) -> list[str]: ...


def store_namespaces(store: MemoryStore) -> list[str]:
    """Every namespace ``store`` holds rows in, sorted (what a rotation visits by default).

    The in-memory and file stores list theirs; a SQL store on a sync engine
    is asked with one ``SELECT DISTINCT``.

    Raises:
        EncryptionError: The store cannot list its namespaces (MongoDB, a
            session-bound or async-only SQL store, your own store): pass
            ``namespaces=`` instead.
    """
    if isinstance(store, ProtectedStore):
        store = store.inner
    if declares(store, _ListsNamespaces):
        return sorted(cast(_ListsNamespaces, store).namespaces)
    if isinstance(store, SQLAlchemyStore):
        try:
            engine = store.engine
        except FireflyOrmError as exc:
            raise EncryptionError(
                f"cannot list the store's namespaces ({exc}): pass namespaces=[...]"
            ) from None
        table = metadata.tables[TABLE_NAME]
        with engine.connect() as conn:
            found = conn.execute(sa.select(table.c.namespace).distinct()).scalars().all()
        return sorted(str(ns) for ns in found)
    raise EncryptionError(
        f"{type(store).__name__} cannot list its namespaces: pass namespaces=[...] to the rotation"
    )


def _needs_rotation(encryption: Encryption, current: str, content: object) -> bool:
    kid = envelope_key_id(content)
    if kid is None:
        return encryption.allow_plaintext  # a plain row: encrypt it (else it is refused on read)
    return kid != current


def _pending(
    uow: UnitOfWork, namespace: str, encryption: Encryption, current: str
) -> tuple[list[str], int]:
    """The ids of the live rows of ``namespace`` not under the current key, and the rows read."""
    rows = uow.entries.list(namespace)
    ids = [e.entry_id for e in rows if _needs_rotation(encryption, current, e.content)]
    return ids, len(rows)


def _reencrypt(
    uow: UnitOfWork, namespace: str, ids: list[str], encryption: Encryption, current: str
) -> tuple[int, int]:
    """Re-encrypt the rows ``ids`` of ``namespace`` (one unit of work): ``(rotated, encrypted)``."""
    rotated = encrypted = 0
    keeps_search = encryption.keeps_search_text(namespace)
    for entry_id in ids:
        stored = uow.entries.get(namespace, entry_id)
        if stored is None or not _needs_rotation(encryption, current, stored.content):
            continue  # deleted, or rewritten under the current key meanwhile
        was_plain = envelope_key_id(stored.content) is None
        owner = stored.user_id
        plain = encryption.open(namespace, entry_id, stored.content, user_id=owner)
        changed: MemoryEntry = stored.copy_entry(
            content=encryption.seal(namespace, entry_id, plain, user_id=owner, key_id=current)
        )
        if not keeps_search:
            changed.search_text = changed.search_language = None
        uow.entries.save(namespace, changed, expected_version=stored.version)
        if was_plain:
            encrypted += 1
        else:
            rotated += 1
    return rotated, encrypted


def _rotation(
    encryption: Encryption,
    namespaces: list[str],
    batch_size: int,
    on_batch: Callable[[RotationProgress], None] | None,
) -> Operation[RotationReport]:
    current = encryption.current_key_id()
    encryption.keys.key(current)  # the current key must be there before anything is read
    report = RotationReport(key_id=current)
    for namespace in namespaces:
        if not encryption.encrypts(namespace):
            continue
        report.namespaces += 1
        pending, examined = yield from Transaction.read(_pending, namespace, encryption, current)
        report.examined += examined
        written = 0
        for start in range(0, len(pending), batch_size):
            batch = pending[start : start + batch_size]
            rotated, encrypted = yield from retrying(
                Transaction.write(_reencrypt, namespace, batch, encryption, current)
            )
            report.rotated += rotated
            report.encrypted += encrypted
            report.batches += 1
            written += rotated + encrypted
            if on_batch is not None:
                on_batch(RotationProgress(namespace, written, report))
        if written:
            logger.info("rotated %d row(s) of %r to key %r", written, namespace, current)
    return report


def _arguments(
    store: MemoryStore, encryption: Encryption | None, batch_size: int
) -> tuple[MemoryStore, Encryption]:
    if isinstance(store, ProtectedStore):
        if encryption is None:
            encryption = store.protection.encryption
        store = store.inner
    if encryption is None:
        raise TypeError("rotate_keys() needs encryption= (or a store built by protect(...))")
    if not isinstance(encryption, Encryption):
        raise TypeError(f"encryption must be an Encryption, got {type(encryption).__name__}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        raise TypeError(f"batch_size must be an int, got {type(batch_size).__name__}")
    if not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise ValueError(f"batch_size must be 1..{MAX_BATCH_SIZE}, got {batch_size}")
    return store, encryption


def _named(namespaces: Iterable[str]) -> list[str]:
    if isinstance(namespaces, str):
        raise TypeError("namespaces must be a list of namespaces, not one string")
    return [validate_namespace(ns) for ns in namespaces]


def rotate_keys(
    store: MemoryStore,
    encryption: Encryption | None = None,
    *,
    namespaces: Iterable[str] | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    on_batch: Callable[[RotationProgress], None] | None = None,
) -> RotationReport:
    """Re-encrypt every row of the encrypted namespaces under the current key.

    See the module docstring: bounded batches, each one unit of work,
    resumable after a crash (run it again).

    Args:
        store: The store, or the :class:`ProtectedStore` wrapping it (its
            encryption is then the default).
        encryption: The encryption (its key provider must hold the current
            key and every key a row may still name).
        namespaces: The namespaces to visit (only encrypted ones are);
            default: every namespace (:func:`store_namespaces`).
        batch_size: Rows per unit of work (1..10,000).
        on_batch: Called after each committed batch.

    Raises:
        DecryptionError: A row cannot be decrypted (stops the rotation; the
            batches already committed stay).
        UnknownKeyError: A row names a key the provider no longer has.
        EncryptionError: The store cannot list its namespaces.
    """
    inner, enc = _arguments(store, encryption, batch_size)
    names = store_namespaces(inner) if namespaces is None else _named(namespaces)
    return run(inner, _rotation(enc, names, batch_size, on_batch))


async def async_rotate_keys(
    store: MemoryStore,
    encryption: Encryption | None = None,
    *,
    namespaces: Iterable[str] | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    on_batch: Callable[[RotationProgress], None] | None = None,
) -> RotationReport:
    """Async form of :func:`rotate_keys`."""
    inner, enc = _arguments(store, encryption, batch_size)
    if namespaces is None:
        names = await call_blocking(store_namespaces, inner)
    else:
        names = _named(namespaces)
    return await arun(inner, _rotation(enc, names, batch_size, on_batch))
