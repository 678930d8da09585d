"""How a :class:`~firefly_orm.redis.RedisStore` lays entries out in Redis.

Every key starts with the store's ``prefix`` and a colon (the prefix has no
colon, so two stores with different prefixes never share a key).  Namespaces,
keys and user ids never contain NUL, so NUL separates the parts of a key name
or of a sorted-set member and no two of them can collide.

=========================  ==========================================================
key                        what it holds
=========================  ==========================================================
``P:e:<id>``               the entry body (JSON), with the entry's ``expires_at`` as
                           the key's expiry (``PXAT``): Redis drops it at that instant
``P:r:<id>``               the entry's index record (namespace, version, created_at,
                           key, user, search words, expiry): what the entry is
                           indexed under, kept until the entry is deleted (or purged
                           by ``cleanup_expired`` once expired)
``P:t:<ns>``               sorted set, by ``(created_at, entry_id)``
``P:k:<ns>``               sorted set, by ``(key, created_at, entry_id)``
``P:ut:<user>\\0<ns>``      one user's entries of ``ns``, by ``(created_at, entry_id)``
``P:uk:<user>\\0<ns>``      the same, by ``(key, created_at, entry_id)``
``P:U:<user>``             set of the user's entry ids, every namespace (``erase_user``)
``P:w:<ns>\\0<word>``       set of the entry ids whose ``search_text`` has ``word``
``P:x``                    sorted set of expiring entry ids, scored by expiry (ms)
``P:n``                    sorted set of the namespaces ever written
=========================  ==========================================================

The sorted sets are lexicographic (every score 0): a member is the sort key
as text, ``created_at`` as 20 fixed-width digits (UTC), the parts joined by
NUL and ending with the entry id.  Redis compares members byte by byte, which
for UTF-8 is code-point order: the order of the other stores.  A key-prefix
read is one range (``[prefix`` to ``(prefix\\xff``: ``0xff`` is never in UTF-8).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from firefly_orm._search import text_terms
from firefly_orm.entry import MemoryEntry
from firefly_orm.errors import EntryValidationError

__all__ = [
    "Keys",
    "as_bytes",
    "check_entry_id",
    "Record",
    "decode_entry",
    "encode_entry",
    "expiry_ms",
    "time_part",
    "validate_prefix",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_PREFIX = re.compile(r"[A-Za-z0-9_.{}-]{1,64}")


def as_bytes(value: object) -> bytes:
    """A reply of the client (which never decodes responses) as the bytes it is."""
    if not isinstance(value, bytes):
        raise TypeError(f"expected bytes from Redis, got {type(value).__name__}")
    return value


def check_entry_id(entry_id: Any) -> str:
    """``entry_id`` if it can name a key (a string without NUL), else raise."""
    if not isinstance(entry_id, str) or "\x00" in entry_id:
        raise EntryValidationError("entry_id", f"must be a string without NUL, got {entry_id!r}")
    return entry_id


def validate_prefix(prefix: Any) -> str:
    """``prefix`` if it is a usable key prefix: 1-64 letters, digits, ``_ . - { }``."""
    if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
        raise EntryValidationError(
            "prefix", f"must be 1-64 letters, digits, '_', '.', '-', '{{' or '}}', got {prefix!r}"
        )
    return prefix


def time_part(moment: datetime) -> str:
    """``moment`` in UTC as 20 digits (``YYYYMMDDhhmmssffffff``): sorts as it compares."""
    t = moment.astimezone(UTC)
    return (
        f"{t.year:04d}{t.month:02d}{t.day:02d}{t.hour:02d}{t.minute:02d}{t.second:02d}"
        f"{t.microsecond:06d}"
    )


def expiry_ms(moment: datetime) -> int:
    """The first millisecond since the epoch at or after ``moment`` (Redis ``PXAT``)."""
    micros = (moment - _EPOCH) // timedelta(microseconds=1)
    return -(-micros // 1000)


def encode_entry(entry: MemoryEntry) -> bytes:
    """The stored body of ``entry`` (ASCII JSON, datetimes as ISO-8601 with their offset)."""
    text = json.dumps(entry.to_json_dict(), ensure_ascii=True, allow_nan=False)
    return text.encode("ascii")


def decode_entry(body: bytes) -> MemoryEntry:
    """An entry from its stored body."""
    return MemoryEntry.from_dict(json.loads(body))


@dataclass(frozen=True)
class Record:
    """What an entry is indexed under: enough to remove it from every index."""

    namespace: str
    version: int
    created: str
    key: str | None
    user_id: str | None
    words: tuple[str, ...]
    expires: int | None

    @classmethod
    def of(cls, entry: MemoryEntry) -> Record:
        """The record of ``entry`` as it is about to be stored."""
        return cls(
            namespace=entry.namespace,
            version=entry.version,
            created=time_part(entry.created_at),
            key=entry.key,
            user_id=entry.user_id,
            words=tuple(sorted(text_terms(entry.search_text))),
            expires=None if entry.expires_at is None else expiry_ms(entry.expires_at),
        )

    def encode(self) -> bytes:
        """The record as stored (JSON)."""
        fields = [
            self.namespace,
            self.version,
            self.created,
            self.key,
            self.user_id,
            list(self.words),
            self.expires,
        ]
        return json.dumps(fields, ensure_ascii=True).encode("ascii")

    @classmethod
    def decode(cls, raw: bytes) -> Record:
        """A record from its stored form."""
        ns, version, created, key, user_id, words, expires = json.loads(raw)
        return cls(ns, version, created, key, user_id, tuple(words), expires)

    def stand_in(self, entry_id: str) -> MemoryEntry:
        """A bare entry with this record's id, namespace and version (for version checks)."""
        return MemoryEntry.from_dict(
            {"entry_id": entry_id, "namespace": self.namespace, "version": self.version}
        )


class Keys:
    """The Redis key names and sorted-set members of one store (see the module docstring)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = validate_prefix(prefix)
        self._p = prefix.encode("ascii") + b":"
        #: The body key of an id is this plus the id.
        self.body_prefix = self._p + b"e:"
        self.expiring = self._p + b"x"
        self.namespaces = self._p + b"n"

    def pattern(self) -> bytes:
        """A ``SCAN MATCH`` pattern of every key of this store."""
        return re.sub(rb"([*?\[\]\\])", rb"\\\1", self._p) + b"*"

    def body(self, entry_id: str) -> bytes:
        return self.body_prefix + entry_id.encode()

    def record(self, entry_id: str) -> bytes:
        return self._p + b"r:" + entry_id.encode()

    def by_time(self, namespace: str) -> bytes:
        return self._p + b"t:" + namespace.encode()

    def by_key(self, namespace: str) -> bytes:
        return self._p + b"k:" + namespace.encode()

    def user_by_time(self, user_id: str, namespace: str) -> bytes:
        return self._p + b"ut:" + user_id.encode() + b"\0" + namespace.encode()

    def user_by_key(self, user_id: str, namespace: str) -> bytes:
        return self._p + b"uk:" + user_id.encode() + b"\0" + namespace.encode()

    def user_ids(self, user_id: str) -> bytes:
        return self._p + b"U:" + user_id.encode()

    def word(self, namespace: str, word: str) -> bytes:
        return self._p + b"w:" + namespace.encode() + b"\0" + word.encode()

    # ------------------------------------------------------------------ members
    @staticmethod
    def time_member(record: Record, entry_id: str) -> bytes:
        return record.created.encode("ascii") + b"\0" + entry_id.encode()

    @staticmethod
    def key_member(record: Record, entry_id: str) -> bytes:
        assert record.key is not None
        return (
            record.key.encode() + b"\0" + record.created.encode("ascii") + b"\0" + entry_id.encode()
        )

    @staticmethod
    def id_of(member: bytes) -> str:
        """The entry id at the end of a member."""
        return member.rpartition(b"\0")[2].decode()

    @staticmethod
    def key_range(key_prefix: str) -> tuple[bytes, bytes]:
        """``(min, max)`` lexicographic bounds of the members whose key starts with it."""
        raw = key_prefix.encode()
        return b"[" + raw, b"(" + raw + b"\xff"

    @staticmethod
    def exact_key_range(key: str) -> tuple[bytes, bytes]:
        """``(min, max)`` bounds of the members whose key is exactly ``key``."""
        raw = key.encode()
        return b"[" + raw + b"\0", b"(" + raw + b"\x01"

    def index_commands(self, record: Record, entry_id: str) -> list[tuple[str, bytes, bytes]]:
        """``(kind, key, member)`` of every index ``record`` is in: kind ``z`` or ``s``."""
        ns = record.namespace
        ident = entry_id.encode()
        out: list[tuple[str, bytes, bytes]] = [
            ("z", self.by_time(ns), self.time_member(record, entry_id)),
            ("z", self.namespaces, ns.encode()),
        ]
        if record.key is not None:
            out.append(("z", self.by_key(ns), self.key_member(record, entry_id)))
        if record.user_id is not None:
            user = record.user_id
            out.append(("z", self.user_by_time(user, ns), self.time_member(record, entry_id)))
            out.append(("s", self.user_ids(user), ident))
            if record.key is not None:
                out.append(("z", self.user_by_key(user, ns), self.key_member(record, entry_id)))
        out.extend(("s", self.word(ns, word), ident) for word in record.words)
        return out
