"""Committing a staged unit of work's changes to a MongoDB collection.

Two ways, chosen by the store (see
:meth:`firefly_orm.mongo.MongoDBStore.unit_of_work` for what each guarantees):

* :func:`apply_changes` inside a multi-document transaction (replica sets and
  sharded clusters): every version precondition is checked against the stored
  documents; the writes that carry a precondition are applied as conditional
  updates (atomic per document, so a writer slipping in after the check is
  still caught); everything else follows as one ordered bulk write.
* :func:`apply_journaled` without transactions: the same writes, under
  namespace locks and a commit journal (:mod:`firefly_orm.mongo._journal`), so a
  crash half-way is completed or undone by whoever next touches the
  namespaces.
"""

from __future__ import annotations

import logging
from typing import Any

from firefly_orm.entry import MAX_ENTRY_VERSION, MemoryEntry, version_exhausted
from firefly_orm.errors import ConcurrencyError
from firefly_orm.mongo._document import entry_to_document, upsert_pipeline
from firefly_orm.mongo._driver import (
    AsyncClientSession,
    Collection,
    DeleteMany,
    DeleteOne,
    UpdateMany,
    UpdateOne,
)
from firefly_orm.mongo._journal import CommitPlan, Journal, conditional_write
from firefly_orm.mongo._owner import IN_FLIGHT
from firefly_orm.mongo._vectors import check_vectors, vector_namespaces, vector_specs, vector_writes
from firefly_orm.uow import StagedChanges
from firefly_orm.vector._spec import EmbeddingMismatchError

__all__ = ["apply_changes", "apply_journaled", "check_version_room"]

logger = logging.getLogger("firefly_orm.mongo")

_Conditional = tuple[str, MemoryEntry, int]
_Ordered = tuple[tuple[str, str], MemoryEntry | None]


def _split(changes: StagedChanges) -> tuple[list[_Conditional], list[_Ordered]]:
    """(conditional writes, the other writes in staging order).

    A write is conditional when it carries a precondition, its namespace is
    not cleared and its entry is not moved in this unit of work.
    """
    expected: dict[tuple[str, str], int] = {}
    for pre in changes.preconditions:
        expected.setdefault((pre.namespace, pre.entry_id), pre.expected_version)
    id_counts: dict[str, int] = {}
    for _, entry_id in changes.writes:
        id_counts[entry_id] = id_counts.get(entry_id, 0) + 1
    conditional: list[_Conditional] = []
    ordered: list[_Ordered] = []
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
    return conditional, ordered


async def apply_changes(
    col: Collection, changes: StagedChanges, session: AsyncClientSession | None
) -> None:
    """Apply staged changes (inside a transaction when ``session`` is given).

    Raises:
        ConcurrencyError: A version precondition does not hold.
    """
    await _check_preconditions(col, changes, session)
    await check_version_room(col, changes, session)
    await check_vectors(col, changes, session)
    conditional, ordered = _split(changes)
    for namespace, entry, version in conditional:
        await _conditional_write(col, namespace, entry, version, session)
    ops: list[DeleteMany | DeleteOne | UpdateMany | UpdateOne] = [
        DeleteMany({"user_id": user_id}) for user_id in sorted(changes.erased_users)
    ]
    ops.extend(DeleteMany({"namespace": ns}) for ns in sorted(changes.cleared))
    for (namespace, entry_id), staged in ordered:
        if staged is None:
            ops.append(DeleteOne({"namespace": namespace, "entry_id": entry_id}))
        else:
            doc = entry_to_document(staged, namespace)
            ops.append(UpdateOne({"entry_id": entry_id}, upsert_pipeline(doc), upsert=True))
    ops.extend(vector_writes(changes))
    if ops:
        await col.bulk_write(ops, ordered=True, session=session)


async def apply_journaled(col: Collection, changes: StagedChanges, journal: Journal) -> None:
    """Apply staged changes without a transaction, all or nothing once recovered.

    Raises:
        ConcurrencyError: A version precondition does not hold (nothing is
            left written).
    """
    await check_version_room(col, changes, None)
    await check_vectors(col, changes, None)
    conditional, ordered = _split(changes)
    specs: list[dict[str, Any]] = [{"erase": user_id} for user_id in sorted(changes.erased_users)]
    specs.extend({"clear": ns} for ns in sorted(changes.cleared))
    # An erased user's namespaces are locked like written ones.
    erased_in: set[str] = set()
    for user_id in changes.erased_users:
        erased_in.update(await col.distinct("namespace", {"user_id": user_id}))
    for (namespace, entry_id), staged in ordered:
        if staged is None:
            specs.append({"delete": namespace, "id": entry_id})
        else:
            specs.append({"upsert": entry_to_document(staged, namespace)})
    specs.extend(vector_specs(changes))
    if not conditional and not specs:
        await _check_preconditions(col, changes, None)
        return
    plan = CommitPlan(
        namespaces=sorted(changes.namespaces() | erased_in | vector_namespaces(changes)),
        cond=[
            {"doc": entry_to_document(entry, ns), "expected": version}
            for ns, entry, version in conditional
        ],
        ops=specs,
    )
    checked = {(ns, entry.entry_id) for ns, entry, _ in conditional}
    loose = any((p.namespace, p.entry_id) not in checked for p in changes.preconditions)
    IN_FLIGHT.add(plan.commit)
    try:
        await journal.acquire(plan)
        applied: list[dict[str, Any]] = []
        before: dict[str, Any] | None = None
        try:
            if changes.vectors:
                # Again under the locks: a writer of another embedding model may have
                # committed to an empty namespace since the check above.
                await check_vectors(col, changes, None)
            if loose or len(conditional) > 1:
                # Under the locks no other commit changes these any more.
                before = await _check_preconditions(col, changes, None, full=True)
                if len(conditional) > 1:
                    await journal.write_before(plan, before)
            for (namespace, entry, version), spec in zip(conditional, plan.cond, strict=True):
                await _conditional_write(col, namespace, entry, version, None, plan.commit)
                applied.append(spec)
        except (ConcurrencyError, EmbeddingMismatchError):
            await journal.abandon(plan, applied, before)
            raise
        await journal.finish(plan)
    except (ConcurrencyError, EmbeddingMismatchError):
        raise
    except Exception as failure:
        if await _recovered_after(journal, plan, failure):
            return
        raise
    finally:
        IN_FLIGHT.discard(plan.commit)


async def _recovered_after(journal: Journal, plan: CommitPlan, failure: Exception) -> bool:
    """Finish or undo ``plan`` after ``failure``; True if it ended applied."""
    try:
        outcome = await journal.recover_own(plan)
    except Exception as exc:
        logger.warning(
            "MongoDB commit %s failed (%s) and could not be recovered now (%s); the next "
            "access to its namespaces or MongoDBStore.initialize() will",
            plan.commit,
            failure,
            exc,
        )
        return False
    logger.warning("MongoDB commit %s failed (%s); recovery: %s", plan.commit, failure, outcome)
    return outcome == "forward"


async def check_version_room(
    col: Collection, changes: StagedChanges, session: AsyncClientSession | None
) -> None:
    """Refuse, before anything is written, to update an entry at the largest version.

    One lookup on the unique ``entry_id`` index, the versions compared here
    (a condition on ``version`` in the query makes SecantusDB scan the
    collection instead): at most one small document per written entry.
    """
    ids = sorted({entry_id for (_, entry_id), entry in changes.writes.items() if entry})
    if not ids:
        return
    cursor = col.find(
        {"entry_id": {"$in": ids}}, {"_id": 0, "entry_id": 1, "version": 1}, session=session
    )
    async for found in cursor:
        version = found.get("version")
        if isinstance(version, int) and version >= MAX_ENTRY_VERSION:
            raise version_exhausted(found["entry_id"])


async def _check_preconditions(
    col: Collection,
    changes: StagedChanges,
    session: AsyncClientSession | None,
    *,
    full: bool = False,
) -> dict[str, Any]:
    """Check every precondition against the stored documents (one indexed query).

    Returns the stored documents of the checked entries by id (``None`` for
    the missing ones; only id, namespace and version unless ``full``).
    """
    if not changes.preconditions:
        return {}
    ids = sorted({p.entry_id for p in changes.preconditions})
    stored: dict[str, Any] = dict.fromkeys(ids)
    projection = None if full else {"entry_id": 1, "namespace": 1, "version": 1}
    async for d in col.find({"entry_id": {"$in": ids}}, projection, session=session):
        stored[d["entry_id"]] = d
    for pre in changes.preconditions:
        doc = stored.get(pre.entry_id)
        actual = 0 if doc is None or doc.get("namespace") != pre.namespace else doc["version"]
        if actual != pre.expected_version:
            raise ConcurrencyError(
                f"entry {pre.entry_id!r} in {pre.namespace!r} is at version {actual}, "
                f"expected {pre.expected_version}"
            )
    return stored


async def _conditional_write(
    col: Collection,
    namespace: str,
    entry: MemoryEntry,
    expected_version: int,
    session: AsyncClientSession | None,
    commit: str | None = None,
) -> None:
    """Write ``entry`` only if it is at ``expected_version`` (marked with ``commit`` if given)."""
    doc = entry_to_document(entry, namespace)
    if not await conditional_write(col, doc, expected_version, session, commit):
        raise ConcurrencyError(
            f"entry {entry.entry_id!r} in {namespace!r} changed concurrently "
            f"(expected version {expected_version})"
        )
