"""Committing a staged unit of work's changes to a MongoDB collection.

:func:`apply_changes` runs inside a multi-document transaction when given a
session (replica sets and sharded clusters), else on its own; see
:meth:`firefly_orm.mongo.MongoDBStore.unit_of_work` for what each mode
guarantees.  Order of work: every version precondition is checked against the
stored documents first; then the writes that carry a precondition are applied as
conditional updates (atomic per document, so a writer slipping in after the
check is still caught); then everything else as one ordered bulk write.
"""

from __future__ import annotations

from typing import Any

from firefly_orm.entry import MemoryEntry
from firefly_orm.errors import ConcurrencyError, MissingExtraError
from firefly_orm.mongo.document import entry_to_document, upsert_pipeline
from firefly_orm.uow import StagedChanges

try:
    from pymongo import DeleteMany, DeleteOne, UpdateOne
    from pymongo.asynchronous.client_session import AsyncClientSession
    from pymongo.asynchronous.collection import AsyncCollection
    from pymongo.errors import DuplicateKeyError
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("MongoDBStore", "mongo", exc.name) from exc

__all__ = ["apply_changes"]

#: The pymongo collection of a store's entries.
Collection = AsyncCollection[dict[str, Any]]


async def apply_changes(
    col: Collection, changes: StagedChanges, session: AsyncClientSession | None
) -> None:
    """Apply staged changes (inside a transaction when ``session`` is given).

    Raises:
        ConcurrencyError: A version precondition does not hold.
    """
    await _check_preconditions(col, changes, session)
    expected: dict[tuple[str, str], int] = {}
    for pre in changes.preconditions:
        expected.setdefault((pre.namespace, pre.entry_id), pre.expected_version)

    # Conditional writes (a precondition, no clear of the namespace, no move in
    # this unit of work) first: each is atomic on its document.
    id_counts: dict[str, int] = {}
    for _, entry_id in changes.writes:
        id_counts[entry_id] = id_counts.get(entry_id, 0) + 1
    conditional: list[tuple[str, MemoryEntry, int]] = []
    ordered: list[tuple[tuple[str, str], MemoryEntry | None]] = []
    for (namespace, entry_id), entry in changes.writes.items():
        version = expected.get((namespace, entry_id))
        if (
            entry is not None
            and version is not None
            and namespace not in changes.cleared
            and id_counts[entry_id] == 1
        ):
            conditional.append((namespace, entry, version))
        else:
            ordered.append(((namespace, entry_id), entry))
    for namespace, entry, version in conditional:
        await _conditional_write(col, namespace, entry, version, session)

    # Everything else, in staging order, as one ordered bulk write.
    ops: list[DeleteMany | DeleteOne | UpdateOne] = [
        DeleteMany({"namespace": ns}) for ns in sorted(changes.cleared)
    ]
    for (namespace, entry_id), entry in ordered:
        if entry is None:
            ops.append(DeleteOne({"namespace": namespace, "entry_id": entry_id}))
        else:
            doc = entry_to_document(entry, namespace)
            ops.append(UpdateOne({"entry_id": entry_id}, upsert_pipeline(doc), upsert=True))
    if ops:
        await col.bulk_write(ops, ordered=True, session=session)


async def _check_preconditions(
    col: Collection, changes: StagedChanges, session: AsyncClientSession | None
) -> None:
    """Every precondition against the state before this commit (one indexed query)."""
    if not changes.preconditions:
        return
    ids = sorted({p.entry_id for p in changes.preconditions})
    stored = {
        d["entry_id"]: d
        async for d in col.find(
            {"entry_id": {"$in": ids}},
            {"entry_id": 1, "namespace": 1, "version": 1},
            session=session,
        )
    }
    for pre in changes.preconditions:
        doc = stored.get(pre.entry_id)
        actual = 0 if doc is None or doc.get("namespace") != pre.namespace else doc["version"]
        if actual != pre.expected_version:
            raise ConcurrencyError(
                f"entry {pre.entry_id!r} in {pre.namespace!r} is at version {actual}, "
                f"expected {pre.expected_version}"
            )


async def _conditional_write(
    col: Collection,
    namespace: str,
    entry: MemoryEntry,
    expected_version: int,
    session: AsyncClientSession | None,
) -> None:
    doc = entry_to_document(entry, namespace)
    pipeline = upsert_pipeline(doc)
    conflict = ConcurrencyError(
        f"entry {entry.entry_id!r} in {namespace!r} changed concurrently "
        f"(expected version {expected_version})"
    )
    if expected_version == 0:
        # Must not exist in this namespace: an upsert that can only match a copy
        # in another namespace (a move); an existing one here makes the insert
        # fail on the unique entry_id index.
        try:
            await col.update_one(
                {"entry_id": entry.entry_id, "namespace": {"$ne": namespace}},
                pipeline,
                upsert=True,
                session=session,
            )
        except DuplicateKeyError:
            raise conflict from None
        return
    result = await col.update_one(
        {"entry_id": entry.entry_id, "namespace": namespace, "version": expected_version},
        pipeline,
        session=session,
    )
    if result.matched_count != 1:
        raise conflict
