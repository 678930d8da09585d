"""Crash-safe units of work on MongoDB without transactions: namespace locks and a commit journal.

A standalone server has no multi-document transactions, so a unit of work's
writes cannot become visible together.  What a non-transactional
:class:`~firefly_orm.mongo.MongoDBStore` guarantees instead is that every
commit ends **all or nothing once it has been recovered**, and that nobody
reads or writes a namespace while a commit on it is unfinished.  How:

1. **Locks and journal in one ordered insert.**  The commit inserts one lock
   document per namespace it writes (``entry_id = "\\0lock:<namespace>"``; the
   unique ``entry_id`` index makes it exclusive), then, when it has more than
   one write or clears a namespace, its *journal*: every write with the entry
   documents to store, the conditional writes with their expected versions
   (``"\\0journal:<id>"``, and ``"\\0part:<id>:<n>"`` documents when it is too
   large for one document).  The journal is inserted last, so a journal that
   exists is complete.  Locks and journal name their writer (see
   :mod:`firefly_orm.mongo._owner`) and a lease.  Namespaces are locked in
   sorted order, so writers waiting for each other never deadlock.
2. **Conditional writes** (the ones with a version precondition) run one by
   one, each atomic on its document; they are the commit point.  A conflict
   undoes the ones already made (their earlier documents are in the journal)
   and releases the locks: nothing of the commit remains.
3. **Everything else** runs as one ordered bulk write: first the journal is
   marked ``committed``, then the writes, then the journal and the locks are
   deleted.  Each write marks its document with the commit id
   (:data:`~firefly_orm.mongo._document.COMMIT_FIELD`) and keeps the version of
   a document already so marked, so repeating writes is harmless.

Whoever meets a lock (a read of the namespace, a commit wanting the lock, the
sweep of ``initialize()``) waits while its writer runs, and otherwise
**recovers** it: takes the journal over (an atomic update of its owner, so one
recoverer works at a time), then rolls it forward (journal marked committed,
or every conditional write made) or rolls it back (a conditional write
missing or conflicting); no journal means nothing was written, and the locks
are dropped.  A commit whose precondition failed is never rolled forward.

**Writes run twice.**  The driver retries a write whose answer was lost (a
broken connection, a restarted server).  A server that forgot the first run
(mongod keeps it durably; a MongoDB-compatible server may not) runs it again:
a conditional write then misses the version it already bumped, and the insert
of locks and journal collides with its own documents.  Neither is a conflict:
a conditional write whose document carries this commit's mark, and a lock
naming this commit (or a journal or part, whose ids hold it), are this
commit's own, so the commit goes on instead of leaving its conditional writes
without the rest or waiting for itself until its lease ends.

The documents of this module have no ``namespace`` field and an ``entry_id``
starting with NUL (no entry id may contain NUL), so no query of entries ever
matches them; only indexed ``entry_id`` lookups and ranges find them.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from firefly_orm.entry import utcnow
from firefly_orm.mongo._document import COMMIT_FIELD, upsert_pipeline
from firefly_orm.mongo._driver import (
    AsyncClientSession,
    BulkWriteError,
    Collection,
    DeleteMany,
    DeleteOne,
    DuplicateKeyError,
    ReturnDocument,
    UpdateMany,
    UpdateOne,
    bson,
)
from firefly_orm.mongo._owner import IN_FLIGHT, current_owner, owner_state
from firefly_orm.mongo._vectors import vector_write

__all__ = ["CommitPlan", "Journal", "conditional_write", "lock_id"]

logger = logging.getLogger("firefly_orm.mongo")

Write = DeleteMany | DeleteOne | UpdateOne | UpdateMany
Outcome = Literal["forward", "undone", "dropped"]

LOCK_PREFIX = "\x00lock:"
JOURNAL_PREFIX = "\x00journal:"
PART_PREFIX = "\x00part:"
#: A journal larger than this (BSON bytes of its writes) is split into parts
#: of at most :data:`PART_BYTES` (a document holds at most 16 MiB).
INLINE_BYTES = 8 * 1024 * 1024
PART_BYTES = 4 * 1024 * 1024
#: Lease added per write of a commit (a large import takes longer).
LEASE_PER_WRITE = timedelta(milliseconds=2)
#: Rounds a read re-reads because a commit ran on its namespace before giving up.
MAX_SETTLE_ROUNDS = 100


def lock_id(namespace: str) -> str:
    """``entry_id`` of the lock document of ``namespace``."""
    return LOCK_PREFIX + namespace


def _journal_id(commit: str) -> str:
    return JOURNAL_PREFIX + commit


def _prefix_range(prefix: str) -> dict[str, str]:
    """Matches the strings starting with ``prefix`` (its last character is ASCII)."""
    return {"$gte": prefix, "$lt": prefix[:-1] + chr(ord(prefix[-1]) + 1)}


def _aware(value: datetime) -> datetime:
    """``value`` as an aware UTC datetime (a client may have ``tz_aware=False``)."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _parts_range(commit: str) -> dict[str, str]:
    return _prefix_range(f"{PART_PREFIX}{commit}:")


# --------------------------------------------------------------------------- writes


def to_write(spec: Mapping[str, Any], commit: str | None) -> Write:
    """One journal write spec -> the pymongo operation.

    Specs: ``{"erase": user_id}`` (every entry of that user), ``{"clear": ns}``,
    ``{"delete": ns, "id": entry_id}``, ``{"upsert": document}``, and the vector
    specs of :func:`~firefly_orm.mongo._vectors.vector_write`.
    """
    vector = vector_write(spec)
    if vector is not None:
        return vector
    if "erase" in spec:
        return DeleteMany({"user_id": spec["erase"]})
    if "clear" in spec:
        return DeleteMany({"namespace": spec["clear"]})
    if "delete" in spec:
        return DeleteOne({"namespace": spec["delete"], "entry_id": spec["id"]})
    doc = spec["upsert"]
    return UpdateOne({"entry_id": doc["entry_id"]}, upsert_pipeline(doc, commit), upsert=True)


async def conditional_write(
    col: Collection,
    doc: Mapping[str, Any],
    expected_version: int,
    session: AsyncClientSession | None,
    commit: str | None = None,
) -> bool:
    """Write ``doc`` only if its entry is at ``expected_version`` in its namespace.

    ``expected_version == 0``: only if no entry with that id is in the
    namespace (a copy in another namespace is moved).  Returns False on a
    conflict (nothing written).
    """
    namespace = doc["namespace"]
    pipeline = upsert_pipeline(doc, commit)
    if expected_version == 0:
        try:
            await col.update_one(
                {"entry_id": doc["entry_id"], "namespace": {"$ne": namespace}},
                pipeline,
                upsert=True,
                session=session,
            )
        except DuplicateKeyError:
            return await _made_by(col, doc, commit, session)
        return True
    result = await col.update_one(
        {"entry_id": doc["entry_id"], "namespace": namespace, "version": expected_version},
        pipeline,
        session=session,
    )
    return result.matched_count == 1 or await _made_by(col, doc, commit, session)


async def _made_by(
    col: Collection,
    doc: Mapping[str, Any],
    commit: str | None,
    session: AsyncClientSession | None,
) -> bool:
    """Whether the stored ``doc`` already is this commit's write (a conditional write that missed).

    The driver retries a write whose answer was lost (a broken connection, a
    restarted server).  A server that kept the first attempt's outcome answers
    with it; one that did not (a restart lost its retryable-write records)
    runs the write again, and the precondition it already satisfied then
    fails against the document it wrote itself.  That is no conflict: the
    document carries this commit's mark (:data:`COMMIT_FIELD`, a fresh id per
    commit), and under the commit's namespace lock nobody else wrote it since.
    """
    if commit is None:
        return False
    stored = await col.find_one(
        {"entry_id": doc["entry_id"]}, {"namespace": 1, COMMIT_FIELD: 1}, session=session
    )
    mine = (
        stored is not None
        and stored.get("namespace") == doc["namespace"]
        and stored.get(COMMIT_FIELD) == commit
    )
    if mine:
        logger.info("MongoDB commit %s: conditional write of %r ran twice", commit, doc["entry_id"])
    return mine


async def run_writes(col: Collection, writes: Sequence[Write]) -> None:
    """``writes`` as one ordered bulk write; an upsert beaten by a concurrent insert is redone."""
    start = 0
    retried: set[int] = set()
    while start < len(writes):
        try:
            await col.bulk_write(list(writes[start:]), ordered=True)
            return
        except BulkWriteError as exc:
            errors = exc.details.get("writeErrors") or []
            failed = start + int(errors[0]["index"]) if errors else -1
            if not errors or errors[0].get("code") != 11000 or failed in retried:
                raise
            if not isinstance(writes[failed], UpdateOne):
                raise
            # Two upserts inserted the same new id at once: the other one won,
            # so this one is now an update.
            retried.add(failed)
            start = failed


# --------------------------------------------------------------------------- a commit


@dataclass
class CommitPlan:
    """What one non-transactional commit writes, as journal specs."""

    #: Namespaces written or cleared (locked, in sorted order).
    namespaces: list[str]
    #: Conditional writes: ``{"doc": document, "expected": version}``.
    cond: list[dict[str, Any]]
    #: The other writes, in order (see :func:`to_write`).
    ops: list[dict[str, Any]]
    commit: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def journaled(self) -> bool:
        """Whether a crash could leave part of it: more than one write, a clear or an erase."""
        return len(self.cond) + len(self.ops) > 1 or any(
            "clear" in s or "erase" in s for s in self.ops
        )


def _split(ops: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The writes in one list, or in parts of at most :data:`PART_BYTES` when large."""
    sizes = [len(bson.encode({"o": spec})) for spec in ops]
    if sum(sizes) <= INLINE_BYTES:
        return [ops]
    parts: list[list[dict[str, Any]]] = [[]]
    used = 0
    for spec, size in zip(ops, sizes, strict=True):
        if parts[-1] and used + size > PART_BYTES:
            parts.append([])
            used = 0
        parts[-1].append(spec)
        used += size
    return parts


class Journal:
    """Locks, journal and recovery of one collection (see the module docstring).

    Args:
        col: The entries collection.
        lease: Seconds a writer on another machine is trusted to be running.
    """

    def __init__(self, col: Collection, lease: float) -> None:
        self.col = col
        self.lease = timedelta(seconds=lease)

    # ------------------------------------------------------------------ writer
    async def acquire(self, plan: CommitPlan) -> None:
        """Insert the locks (and the journal), waiting for or recovering their holders."""
        owner = current_owner().as_document()
        lease_until = utcnow() + self.lease + LEASE_PER_WRITE * (len(plan.ops) + len(plan.cond))
        locks: list[dict[str, Any]] = [
            {
                "entry_id": lock_id(ns),
                "commit": plan.commit,
                "owner": owner,
                "lease_until": lease_until,
            }
            for ns in plan.namespaces
        ]
        docs: list[dict[str, Any]] = list(locks)
        if plan.journaled:
            parts = _split(plan.ops)
            if len(parts) > 1:
                docs += [
                    {"entry_id": f"{PART_PREFIX}{plan.commit}:{n:06d}", "ops": part}
                    for n, part in enumerate(parts)
                ]
            docs.append(
                {
                    "entry_id": _journal_id(plan.commit),
                    "commit": plan.commit,
                    "owner": owner,
                    "lease_until": lease_until,
                    "state": "pending",
                    "namespaces": plan.namespaces,
                    "cond": plan.cond,
                    "ops": plan.ops if len(parts) == 1 else [],
                    "parts": len(parts) if len(parts) > 1 else 0,
                }
            )
        start = 0

        async def heartbeat() -> None:
            # Keep the locks already held fresh while waiting for another one.
            nonlocal lease_until
            now = utcnow()
            if start and lease_until - now < self.lease / 2:
                lease_until = now + self.lease
                for doc in docs:
                    doc["lease_until"] = lease_until
                await self.col.update_many(
                    {"entry_id": {"$in": [d["entry_id"] for d in docs[:start]]}},
                    {"$set": {"lease_until": lease_until}},
                )

        # A failure leaves what was inserted: the writer's recovery (or a later
        # one) drops locks and parts that no complete journal follows.
        while start < len(docs):
            try:
                await self.col.insert_many(docs[start:], ordered=True)
                return
            except BulkWriteError as exc:
                start += int(exc.details.get("nInserted", 0))
                errors = exc.details.get("writeErrors") or []
                if not errors or errors[0].get("code") != 11000:
                    raise
                if await self._inserted_already(plan, docs[start]["entry_id"]):
                    start += 1
                    continue
                if start >= len(locks):
                    raise
                await self.resolve(locks[start]["entry_id"], wait=True, heartbeat=heartbeat)

    async def _inserted_already(self, plan: CommitPlan, entry_id: str) -> bool:
        """Whether document ``entry_id`` of ``plan``'s insert is stored already, by this commit.

        The driver retries an insert whose answer was lost (a broken
        connection, a restarted server); a server that lost the first attempt's
        outcome runs it again, and it collides with the documents the first
        attempt stored.  Those are this commit's own: waiting for them would
        wait for this very writer until its lease ran out.  A journal or part
        id holds the commit's fresh id (only this commit inserts it); a lock
        names its commit.
        """
        if not entry_id.startswith(LOCK_PREFIX):
            return True
        held = await self.col.find_one({"entry_id": entry_id}, {"commit": 1})
        mine = held is not None and held.get("commit") == plan.commit
        if mine:
            logger.info("MongoDB commit %s: insert of its locks ran twice", plan.commit)
        return mine

    async def write_before(self, plan: CommitPlan, before: Mapping[str, Any]) -> None:
        """Record the stored documents the conditional writes replace (for an undo)."""
        images = [
            {"id": c["doc"]["entry_id"], "doc": before.get(c["doc"]["entry_id"])} for c in plan.cond
        ]
        await self.col.update_one(
            {"entry_id": _journal_id(plan.commit)}, {"$set": {"before": images}}
        )

    async def finish(self, plan: CommitPlan) -> None:
        """Apply the other writes and drop the journal and the locks (one ordered bulk write)."""
        if not plan.journaled:
            writes = [to_write(spec, None) for spec in plan.ops]
            writes.append(self._unlock(plan.commit, plan.namespaces))
            await run_writes(self.col, writes)
            return
        await self._roll_forward(plan.commit, plan.namespaces, plan.ops, 0, mark=True)

    async def abandon(
        self,
        plan: CommitPlan,
        applied: Sequence[Mapping[str, Any]],
        before: Mapping[str, Any] | None,
    ) -> None:
        """Undo the conditional writes made so far and drop the journal and the locks."""
        await self._undo(plan.commit, applied, before)
        await self._drop(plan.commit, plan.namespaces)

    async def recover_own(self, plan: CommitPlan) -> Outcome:
        """Finish or undo this process's own commit after it failed half-way."""
        journal = await self.col.find_one({"entry_id": _journal_id(plan.commit)})
        if journal is None:
            await self._drop(plan.commit, plan.namespaces)
            return "dropped"
        return await self._recover(journal)

    # ------------------------------------------------------------------ readers
    async def settle(self, namespaces: Iterable[str]) -> bool:
        """Wait for or recover the commits locking ``namespaces``; True if there were any."""
        ids = [lock_id(ns) for ns in namespaces]
        locks = [d async for d in self.col.find({"entry_id": {"$in": ids}}, {"entry_id": 1})]
        for lock in locks:
            await self.resolve(lock["entry_id"], wait=True)
        return bool(locks)

    async def sweep(self) -> int:
        """Recover every commit whose writer is gone or whose lease ran out; return how many."""
        locks = [
            d
            async for d in self.col.find(
                {"entry_id": _prefix_range(LOCK_PREFIX)}, {"entry_id": 1, "commit": 1}
            )
        ]
        seen: set[Any] = set()
        for lock in locks:
            if lock.get("commit") not in seen:
                seen.add(lock.get("commit"))
                if await self.resolve(lock["entry_id"], wait=False):
                    logger.warning("recovered an unfinished MongoDB commit %s", lock.get("commit"))
        return len(seen)

    async def resolve(
        self,
        lock: str,
        *,
        wait: bool,
        heartbeat: Callable[[], Awaitable[None]] | None = None,
    ) -> bool:
        """Wait until lock document ``lock`` is gone, recovering its commit when it is stale.

        Without ``wait`` a running commit is left alone.  Returns True when
        this call recovered a commit.
        """
        delay = 0.002
        recovered = False
        while True:
            held = await self.col.find_one({"entry_id": lock})
            if held is None:
                return recovered
            if not isinstance(held.get("commit"), str):  # not written by this module
                await self.col.delete_one({"_id": held["_id"]})
                continue
            commit = str(held["commit"])
            journal = await self.col.find_one({"entry_id": _journal_id(commit)})
            holder = journal if journal is not None else held
            running = owner_state(holder.get("owner"), commit)
            lease_until = holder.get("lease_until")
            expired = not isinstance(lease_until, datetime) or _aware(lease_until) <= utcnow()
            if running is not False and not expired:
                if not wait:
                    return recovered
                if heartbeat is not None:
                    await heartbeat()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.05)
                continue
            if journal is None:
                # No journal: the commit had one write (made or not, either is
                # whole), or died before its journal was complete (it wrote
                # nothing else), or is complete: only its locks are left.
                await self._drop(commit, None)
                recovered = True
                continue
            claimed = await self.col.find_one_and_update(
                {
                    "entry_id": _journal_id(commit),
                    "owner.token": (holder.get("owner") or {}).get("token"),
                    "lease_until": lease_until,
                },
                {
                    "$set": {
                        "owner": current_owner().as_document(),
                        "lease_until": utcnow() + self.lease,
                    }
                },
                return_document=ReturnDocument.AFTER,
            )
            if claimed is None:
                continue  # another process took it over (or it finished): look again
            IN_FLIGHT.add(commit)
            try:
                outcome = await self._recover(claimed)
            finally:
                IN_FLIGHT.discard(commit)
            logger.info("MongoDB commit %s recovered: %s", commit, outcome)
            recovered = True

    # ------------------------------------------------------------------ recovery
    async def _recover(self, journal: Mapping[str, Any]) -> Outcome:
        commit = str(journal["commit"])
        namespaces = list(journal.get("namespaces") or [])
        parts = int(journal.get("parts") or 0)
        ops = list(journal.get("ops") or [])
        if parts:
            found = self.col.find({"entry_id": _parts_range(commit)}).sort("entry_id", 1)
            ops = [spec async for part in found for spec in part["ops"]]
        if journal.get("state") == "committed":
            await self._roll_forward(commit, namespaces, ops, parts, mark=False)
            return "forward"
        cond = list(journal.get("cond") or [])
        ids = [c["doc"]["entry_id"] for c in cond]
        stored = {d["entry_id"]: d async for d in self.col.find({"entry_id": {"$in": ids}})}
        applied = [
            c for c in cond if (stored.get(c["doc"]["entry_id"]) or {}).get(COMMIT_FIELD) == commit
        ]
        pending = [c for c in cond if c not in applied]
        if not applied:
            # Nothing visible was written: the commit never happened.
            await self._drop(commit, namespaces)
            return "dropped"
        before = (
            {b["id"]: b["doc"] for b in journal.get("before") or []}
            if "before" in journal
            else None
        )
        for c in pending:
            if not await conditional_write(self.col, c["doc"], int(c["expected"]), None, commit):
                await self._undo(commit, applied, before)
                await self._drop(commit, namespaces)
                return "undone"
            applied.append(c)
        await self._roll_forward(commit, namespaces, ops, parts, mark=True)
        return "forward"

    async def _roll_forward(
        self,
        commit: str,
        namespaces: list[str],
        ops: Sequence[Mapping[str, Any]],
        parts: int,
        *,
        mark: bool,
    ) -> None:
        writes: list[Write] = []
        if mark:
            writes.append(
                UpdateOne({"entry_id": _journal_id(commit)}, {"$set": {"state": "committed"}})
            )
        writes += [to_write(spec, commit) for spec in ops]
        writes += self._release(commit, namespaces, parts=parts)
        await run_writes(self.col, writes)

    async def _undo(
        self, commit: str, applied: Sequence[Mapping[str, Any]], before: Mapping[str, Any] | None
    ) -> None:
        for c in applied:
            entry_id = c["doc"]["entry_id"]
            if before is None or entry_id not in before:
                logger.error(
                    "MongoDB commit %s: no earlier copy of %r to restore", commit, entry_id
                )
                continue
            mine = {"entry_id": entry_id, COMMIT_FIELD: commit}
            earlier = before[entry_id]
            if earlier is None:
                await self.col.delete_one(mine)
            else:
                await self.col.replace_one(mine, {k: v for k, v in earlier.items() if k != "_id"})

    def _release(self, commit: str, namespaces: list[str] | None, *, parts: int) -> list[Write]:
        writes: list[Write] = []
        if parts:
            writes.append(DeleteMany({"entry_id": _parts_range(commit)}))
        writes.append(DeleteOne({"entry_id": _journal_id(commit)}))
        writes.append(self._unlock(commit, namespaces))
        return writes

    def _unlock(self, commit: str, namespaces: list[str] | None) -> DeleteMany:
        where: Any = (
            _prefix_range(LOCK_PREFIX)
            if namespaces is None
            else {"$in": [lock_id(ns) for ns in namespaces]}
        )
        return DeleteMany({"entry_id": where, "commit": commit})

    async def _drop(self, commit: str, namespaces: list[str] | None) -> None:
        """Delete the journal (parts first) and then the locks of ``commit``."""
        await self.col.bulk_write(self._release(commit, namespaces, parts=1), ordered=True)
