"""Applying a staged unit of work to Redis: optimistic, all or nothing (``WATCH``/``MULTI``).

One commit:

1. ``WATCH`` the index record of every entry it writes or checks, the id set
   of every user it erases and the time index of every namespace it clears;
2. read those records (and the ids of the erased users and cleared namespaces,
   whose records are watched too), check the version preconditions
   (:func:`~firefly_orm.uow.check_preconditions`, the rules every staged store
   shares) and work out, in Python, what each touched entry becomes;
3. send every change in one ``MULTI``/``EXEC``: Redis applies all of it or,
   when a watched key changed since step 1, none of it.  Then the commit starts
   again from step 1 (preconditions checked again), at most
   :data:`MAX_ATTEMPTS` times.

Nothing is locked: a writer that commits between another's read and its
``EXEC`` makes the other retry.  A failed precondition raises
:class:`~firefly_orm.errors.ConcurrencyError` before anything is sent.
"""

from __future__ import annotations

import logging
from typing import Any

from redis import Redis
from redis.client import Pipeline
from redis.exceptions import WatchError

from firefly_orm.entry import MemoryEntry, utcnow
from firefly_orm.errors import ConcurrencyError
from firefly_orm.protocols import StagedChanges
from firefly_orm.redis._layout import (
    Keys,
    Record,
    as_bytes,
    check_entry_id,
    encode_entry,
    expiry_ms,
)
from firefly_orm.uow import apply_version, check_preconditions

__all__ = ["MAX_ATTEMPTS", "commit"]

logger = logging.getLogger("firefly_orm")

#: How many times a commit starts again after a concurrent writer changed what it read.
MAX_ATTEMPTS = 64


def commit(client: Redis, keys: Keys, changes: StagedChanges) -> None:
    """Check the preconditions of ``changes`` and apply them atomically (see the module).

    Raises:
        ConcurrencyError: A version precondition fails, or the commit lost
            :data:`MAX_ATTEMPTS` races in a row (nothing is written).
        EntryValidationError: A write would update an entry at the largest version,
            or an id is not a string (nothing is written).
    """
    if not (changes.writes or changes.cleared or changes.erased_users or changes.preconditions):
        return
    for _, entry_id in changes.writes:
        check_entry_id(entry_id)
    with client.pipeline(transaction=True) as pipe:
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                _attempt(pipe, keys, changes)
                return
            except WatchError:
                logger.debug("redis commit: a watched key changed, attempt %d", attempt)
                pipe.reset()
    raise ConcurrencyError(
        f"the commit lost {MAX_ATTEMPTS} races with concurrent writers in a row; "
        "nothing was written"
    )


def _attempt(pipe: Pipeline, keys: Keys, changes: StagedChanges) -> None:
    ids = {entry_id for _, entry_id in changes.writes}
    ids.update(p.entry_id for p in changes.preconditions)
    watched = [keys.record(i) for i in ids]
    watched += [keys.user_ids(u) for u in changes.erased_users]
    watched += [keys.by_time(ns) for ns in changes.cleared]
    pipe.watch(*watched)  # type: ignore[no-untyped-call]
    erased: set[str] = set()
    for user in changes.erased_users:
        erased.update(as_bytes(m).decode() for m in pipe.smembers(keys.user_ids(user)))
    cleared: set[str] = set()
    for ns in changes.cleared:
        cleared.update(Keys.id_of(as_bytes(m)) for m in pipe.zrange(keys.by_time(ns), 0, -1))
    more = sorted((erased | cleared) - ids)
    if more:
        pipe.watch(*(keys.record(i) for i in more))  # type: ignore[no-untyped-call]
    touched = sorted(ids) + more
    raw = pipe.mget([keys.record(i) for i in touched]) if touched else []
    before = {
        i: Record.decode(as_bytes(r)) for i, r in zip(touched, raw, strict=True) if r is not None
    }

    def current(namespace: str, entry_id: str) -> MemoryEntry | None:
        record = before.get(entry_id)
        return None if record is None else record.stand_in(entry_id)

    check_preconditions(changes, current)
    after: dict[str, Record | None] = dict(before)
    bodies: dict[str, MemoryEntry | None] = {}
    for entry_id in erased:
        record = after.get(entry_id)
        if record is not None and record.user_id in changes.erased_users:
            after[entry_id] = bodies[entry_id] = None
    for entry_id in cleared:
        record = after.get(entry_id)
        if record is not None and record.namespace in changes.cleared:
            after[entry_id] = bodies[entry_id] = None
    for (namespace, entry_id), entry in changes.writes.items():
        record = after.get(entry_id)
        if entry is None:
            if record is not None and record.namespace == namespace:
                after[entry_id] = bodies[entry_id] = None
            continue
        stored = entry.copy_entry()
        apply_version(stored, None if record is None else record.stand_in(entry_id))
        after[entry_id] = Record.of(stored)
        bodies[entry_id] = stored
    pipe.multi()
    now_ms = expiry_ms(utcnow())
    for entry_id in bodies:
        _queue(
            pipe, keys, entry_id, before.get(entry_id), after[entry_id], bodies[entry_id], now_ms
        )
    pipe.execute()


def _queue(
    pipe: Pipeline,
    keys: Keys,
    entry_id: str,
    old: Record | None,
    new: Record | None,
    entry: MemoryEntry | None,
    now_ms: int,
) -> None:
    """Queue the commands that turn ``old`` (its indexes, its body) into ``new``."""
    gone = set() if old is None else set(keys.index_commands(old, entry_id))
    kept = set() if new is None else set(keys.index_commands(new, entry_id))
    for kind, key, member in gone - kept:
        if key == keys.namespaces:
            continue  # the namespace list only grows (``RedisStore.namespaces`` filters)
        if kind == "z":
            pipe.zrem(key, member)
        else:
            pipe.srem(key, member)
    for kind, key, member in kept - gone:
        if kind == "z":
            pipe.zadd(key, {member: 0})
        else:
            pipe.sadd(key, member)
    if new is None or entry is None:
        pipe.delete(keys.body(entry_id), keys.record(entry_id))
        pipe.zrem(keys.expiring, entry_id)
        return
    pipe.set(keys.record(entry_id), new.encode())
    body: Any = encode_entry(entry)
    if new.expires is None:
        pipe.set(keys.body(entry_id), body)
        pipe.zrem(keys.expiring, entry_id)
        return
    pipe.zadd(keys.expiring, {entry_id: new.expires})
    if new.expires <= now_ms:
        pipe.delete(keys.body(entry_id))  # expired already: only its record is kept
    else:
        pipe.set(keys.body(entry_id), body, pxat=new.expires)
