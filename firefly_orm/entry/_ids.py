"""Time and ids of entries: the process clock and the two kinds of entry id.

:func:`utcnow` is the clock every entry's ``created_at`` (and every expiry
check) reads; :func:`new_entry_id` gives a fresh, time-ordered id and
:func:`derived_entry_id` the one id of a ``(namespace, key)``.  All three are
re-exported from :mod:`firefly_orm.entry`, their public home.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from datetime import UTC, datetime, timedelta

__all__ = ["derived_entry_id", "new_entry_id", "utcnow"]

_clock_lock = threading.Lock()
_last_now = datetime(1970, 1, 1, tzinfo=UTC)


def utcnow() -> datetime:
    """Timezone-aware UTC now, strictly increasing within this process.

    Entries are ordered by ``(created_at, entry_id)``; a strictly increasing clock
    keeps entries created one after another in this process in creation order even
    when the system clock has coarse resolution.
    """
    global _last_now
    now = datetime.now(UTC)
    with _clock_lock:
        if now <= _last_now:
            now = _last_now + timedelta(microseconds=1)
        _last_now = now
    return now


_id_lock = threading.Lock()
_last_id_ms = 0
_id_seq = 0


def new_entry_id() -> str:
    """A new 32-hex-character id, ordered by creation time (UUIDv7-like layout).

    48 bits of milliseconds, a 16-bit per-millisecond counter, 64 random bits.
    """
    global _last_id_ms, _id_seq
    ms = time.time_ns() // 1_000_000
    with _id_lock:
        if ms <= _last_id_ms:
            ms = _last_id_ms
            _id_seq += 1
            if _id_seq > 0xFFFF:
                ms += 1
                _id_seq = 0
        else:
            _id_seq = 0
        _last_id_ms = ms
        seq = _id_seq
    return f"{ms & 0xFFFFFFFFFFFF:012x}{seq:04x}{os.urandom(8).hex()}"


def derived_entry_id(namespace: str, key: str) -> str:
    """A deterministic 32-hex-character id for the entry ``key`` of ``namespace``.

    Entries that must exist at most once per key (a working-memory fact, a
    conversation head, a turn) use it, so a plain upsert on ``entry_id`` is the
    atomic "set" on every store, and two concurrent inserts of the same key
    collide on the primary key instead of leaving duplicates.
    """
    digest = hashlib.sha256(f"{namespace}\x00{key}".encode()).hexdigest()
    return digest[:32]
