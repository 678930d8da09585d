"""The Redis store: :class:`RedisStore`."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, Unpack

from firefly_orm._search import SearchHit, SearchRequest
from firefly_orm.bridges._threads import call_blocking
from firefly_orm.bridges.twins import AsyncTwins
from firefly_orm.entry import (
    MemoryEntry,
    utcnow,
    validate_entry,
    validate_key,
    validate_namespace,
    validate_user_id,
)
from firefly_orm.errors import (
    ConcurrencyError,
    DatabaseConnectionError,
    EntryValidationError,
    MissingExtraError,
    StoreError,
    redact_url,
    scrub_secret,
    url_secrets,
)
from firefly_orm.protocols import ListOptions, Precondition, SearchOptions, StagedChanges
from firefly_orm.uow import OpensOnEnter, StagedUnitOfWork, select_entries

try:
    from redis import Redis
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import RedisError
    from redis.exceptions import TimeoutError as RedisTimeoutError
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("RedisStore", "redis", exc.name) from exc

from firefly_orm.redis._commit import commit
from firefly_orm.redis._layout import Keys, Record, as_bytes, check_entry_id, expiry_ms
from firefly_orm.redis._reads import Reader

__all__ = ["MIN_REDIS_VERSION", "PURGE_EVERY", "RedisStore"]

logger = logging.getLogger("firefly_orm")
T = TypeVar("T")
P = ParamSpec("P")

#: The oldest Redis server the store runs on (``SET ... PXAT`` and ``ZUNION``).
MIN_REDIS_VERSION = (6, 2)
#: One commit in this many (per store object) also purges a batch of expired entries.
PURGE_EVERY = 64
#: The options of a list read (:class:`~firefly_orm.protocols.ListOptions`).
_LIST_OPTIONS = frozenset(ListOptions.__annotations__)
#: Expired entries one ``cleanup_expired`` round removes (one commit each).
_CLEANUP_BATCH = 500


class RedisStore(OpensOnEnter, AsyncTwins):
    """A :class:`~firefly_orm.protocols.MemoryStore` on a Redis server (redis-py).

    Args:
        url: A Redis URL (``redis://``, ``rediss://`` or ``unix://``; a password
            in it is never shown in messages).  Optional when ``client`` is given.
        prefix: The first part of every key the store writes (1-64 letters,
            digits, ``_ . - { }``): several stores share a server by prefix.
        client: A ``redis.Redis`` to use instead of creating one; it must not
            decode responses (``decode_responses=False``, the default).  The
            store never closes it.
        socket_timeout: Seconds a command may wait for the server (``None``: forever).

    Entries live in plain Redis structures (:mod:`firefly_orm.redis._layout`):
    each body is a key that expires at the entry's ``expires_at``, and sorted
    sets index every namespace by time and by key, and each user's entries, so
    a read by id, by key, by key prefix with a limit or by user fetches what it
    returns and little more.  Units of work are
    :class:`~firefly_orm.uow.StagedUnitOfWork`: their reads go to the server,
    their writes are applied on commit in one ``MULTI``/``EXEC`` guarded by
    ``WATCH`` (:mod:`firefly_orm.redis._commit`): all or nothing, version
    preconditions checked against what the transaction saw.

    The ``async_*`` methods run the sync ones in a worker thread
    (:class:`~firefly_orm.bridges.twins.AsyncTwins`): one code path for both.

    Raises:
        EntryValidationError: A bad ``prefix``, ``url`` or ``socket_timeout``.
    """

    #: The server deletes expired entries itself (each body expires at ``expires_at``).
    ttl_index = True

    def __init__(
        self,
        url: str | None = None,
        *,
        prefix: str = "firefly",
        client: Redis | None = None,
        socket_timeout: float | None = 30.0,
    ) -> None:
        if url is None and client is None:
            raise EntryValidationError("url", "give a Redis URL or a client")
        if url is not None and (
            not isinstance(url, str)
            or not url.lower().startswith(("redis://", "rediss://", "unix://"))
        ):
            raise EntryValidationError(
                "url", "must be a string beginning with redis://, rediss:// or unix://"
            )
        if socket_timeout is not None and (
            isinstance(socket_timeout, bool)
            or not isinstance(socket_timeout, int | float)
            or not 0 < socket_timeout < 10**6
        ):
            raise EntryValidationError("socket_timeout", "must be None or seconds in (0, 1e6)")
        self._keys = Keys(prefix)
        self._url = url
        self._secrets = url_secrets(url)
        self._owns_client = client is None
        if client is None:
            assert url is not None
            try:
                client = Redis.from_url(
                    url, socket_timeout=socket_timeout, socket_connect_timeout=socket_timeout
                )
            except ValueError as exc:
                raise EntryValidationError(
                    "url", f"not a usable Redis URL: {scrub_secret(str(exc), self._secrets)}"
                ) from None
        elif client.get_connection_kwargs().get("decode_responses"):
            raise EntryValidationError("client", "must not decode responses (decode_responses)")
        self._client: Redis = client
        self._reader = Reader(client, self._keys)
        self._checked = False
        self._commits = itertools.count(1)

    # ------------------------------------------------------------------ properties
    @property
    def prefix(self) -> str:
        """The prefix of every key the store writes."""
        return self._keys.prefix

    @property
    def client(self) -> Redis:
        """The ``redis.Redis`` client the store uses."""
        return self._client

    @property
    def namespaces(self) -> list[str]:
        """Namespaces that currently hold at least one entry (live or expired, not purged)."""
        names = self._run(lambda: self._client.zrange(self._keys.namespaces, 0, -1))
        if not names:
            return []
        decoded = [as_bytes(n).decode() for n in names]
        counts = self._run(lambda: _cards(self._client, [self._keys.by_time(n) for n in decoded]))
        return [n for n, count in zip(decoded, counts, strict=True) if count]

    def __repr__(self) -> str:
        where = redact_url(self._url) if self._url is not None else "<client>"
        return f"RedisStore({where!r}, prefix={self.prefix!r})"

    # ------------------------------------------------------------------ lifecycle
    def initialize(self) -> None:
        """Check that the server answers and is Redis 6.2 or newer (idempotent).

        Raises:
            DatabaseConnectionError: The server cannot be reached.
            StoreError: The server is older than 6.2.
        """
        if self._checked:
            return
        info: dict[str, Any] = self._run(lambda: self._client.info("server"))
        raw = str(info.get("redis_version", "0"))
        version = tuple(int(p) for p in raw.split(".")[:2] if p.isdigit())
        if version < MIN_REDIS_VERSION:
            raise StoreError(f"RedisStore needs Redis 6.2 or newer; the server is {raw}")
        self._checked = True

    async def async_initialize(self) -> None:
        """Async form of :meth:`initialize`."""
        await call_blocking(self.initialize)

    def close(self) -> None:
        """Release the connections of the client the store created (idempotent)."""
        if self._owns_client:
            self._client.close()

    async def async_close(self) -> None:
        """Async form of :meth:`close`."""
        await call_blocking(self.close)

    # ------------------------------------------------------------------ protocol
    def save(self, namespace: str, entry: MemoryEntry) -> None:
        """Insert or replace ``entry`` (by ``entry_id``; an id saved elsewhere moves here).

        Raises:
            EntryValidationError: The entry is invalid (nothing is written).
            StoreError: The server failed.
        """
        validate_entry(entry, namespace)
        changes = StagedChanges()
        changes.writes[(namespace, entry.entry_id)] = entry.copy_entry(namespace=namespace)
        self.apply_changes(changes)

    def load(self, namespace: str) -> list[MemoryEntry]:
        """Non-expired entries of ``namespace`` in ``(created_at, entry_id)`` order."""
        return self.read_list(namespace)

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """The newest non-expired entry of ``namespace`` with ``key``, or ``None``."""
        validate_namespace(namespace)
        validate_key(key)
        lo, hi = Keys.exact_key_range(key)
        index = self._keys.by_key(namespace)
        found = self._run(lambda: self._reader.window(index, lo, hi, newest_first=True, limit=1))
        return found[0] if found else None

    def delete(self, namespace: str, entry_id: str) -> None:
        """Remove one entry of ``namespace``; no error if it does not exist."""
        validate_namespace(namespace)
        changes = StagedChanges()
        changes.writes[(namespace, entry_id)] = None
        self.apply_changes(changes)

    def clear(self, namespace: str) -> None:
        """Remove every entry of ``namespace``."""
        validate_namespace(namespace)
        self.apply_changes(StagedChanges(cleared={namespace}))

    def cleanup_expired(self) -> int:
        """Remove the expired entries' index records in every namespace; how many.

        Redis drops each body at its ``expires_at`` by itself, and no read
        returns an expired entry; what stays behind is the small record that
        indexes it (and keeps its version) until this runs, or until a commit
        purges it (one commit in :data:`PURGE_EVERY` removes a batch).
        """
        removed = 0
        while True:
            found = self._run(self._cleanup_round, expiry_ms(utcnow()))
            if found is None:
                return removed
            removed += found

    def _cleanup_round(self, cutoff: int) -> int | None:
        """One batch of expired entries removed: how many (``None``: none were left)."""
        client, keys = self._client, self._keys
        raw_ids = client.zrangebyscore(keys.expiring, "-inf", cutoff, start=0, num=_CLEANUP_BATCH)
        if not raw_ids:
            return None
        ids = [as_bytes(i).decode() for i in raw_ids]
        changes = StagedChanges()
        for entry_id, raw in zip(ids, client.mget([keys.record(i) for i in ids]), strict=True):
            if raw is None:
                client.zrem(keys.expiring, entry_id)
                continue
            record = Record.decode(as_bytes(raw))
            if record.expires is None or record.expires > cutoff:
                continue
            changes.writes[(record.namespace, entry_id)] = None
            changes.preconditions.append(Precondition(record.namespace, entry_id, record.version))
        if not changes.writes:
            return 0
        try:
            commit(client, keys, changes)
        except ConcurrencyError:
            return 0  # one of them was written meanwhile: the next round looks again
        return len(changes.writes)

    def unit_of_work(self, *, read_only: bool = False) -> StagedUnitOfWork:
        """A unit of work over this store (see the class docstring).

        ``read_only`` is accepted for the common signature; it changes nothing here.
        """
        return StagedUnitOfWork(self)

    # ------------------------------------------------------------------ staged backend
    def read_entry(self, namespace: str, entry_id: str) -> MemoryEntry | None:
        """The live entry with this id in ``namespace``, or ``None``."""
        validate_namespace(namespace)
        check_entry_id(entry_id)
        return self._run(lambda: self._reader.entry(namespace, entry_id))

    def read_by_key(self, namespace: str, key: str) -> list[MemoryEntry]:
        """Every live entry of ``namespace`` with ``key``."""
        validate_namespace(namespace)
        validate_key(key)
        lo, hi = Keys.exact_key_range(key)
        index = self._keys.by_key(namespace)
        return self._run(lambda: self._reader.window(index, lo, hi, newest_first=False, limit=None))

    def read_list(self, namespace: str, **options: Unpack[ListOptions]) -> list[MemoryEntry]:
        """Live entries of ``namespace``, ordered and limited: one index range, read in pages."""
        validate_namespace(namespace)
        unknown = sorted(set(options) - _LIST_OPTIONS)
        if unknown:
            raise TypeError(f"read_list() got an unexpected keyword argument {unknown[0]!r}")
        key_prefix = options.get("key_prefix")
        user_id = options.get("user_id")
        limit = options.get("limit")
        newest_first = bool(options.get("newest_first", False))
        if user_id is not None:
            validate_user_id(user_id)
        if key_prefix is not None:
            validate_key(key_prefix)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise EntryValidationError("limit", f"must be an integer or None, got {limit!r}")
        keys = self._keys
        if key_prefix is None:
            index = (
                keys.by_time(namespace)
                if user_id is None
                else keys.user_by_time(user_id, namespace)
            )
            lo, hi = b"-", b"+"
        else:
            index = (
                keys.by_key(namespace) if user_id is None else keys.user_by_key(user_id, namespace)
            )
            lo, hi = Keys.key_range(key_prefix)
        rows = self._run(
            lambda: self._reader.window(index, lo, hi, newest_first=newest_first, limit=limit)
        )
        # The index is the order already; this only re-checks (cheap, no sort cost to speak of).
        return select_entries(
            rows, key_prefix=key_prefix, limit=limit, newest_first=newest_first, user_id=user_id
        )

    def read_search(
        self, namespace: str, query: str, **options: Unpack[SearchOptions]
    ) -> list[SearchHit]:
        """The committed matches of ``query``, best first (:mod:`firefly_orm._search`)."""
        request = SearchRequest.build(namespace, query, **options)
        if request.finds_nothing:
            return []
        return self._run(lambda: self._reader.search(request))

    def apply_changes(self, changes: StagedChanges) -> None:
        """Check the version preconditions, then apply ``changes`` in one ``MULTI``/``EXEC``.

        Every :data:`PURGE_EVERY`-th commit of this store object then also
        removes one batch of expired entries' records (as ``cleanup_expired``
        does), so a store nobody cleans does not keep them forever; a failure
        there is logged, never raised (the commit itself succeeded).
        """
        self._run(lambda: commit(self._client, self._keys, changes))
        if next(self._commits) % PURGE_EVERY == 0:
            try:
                self._run(self._cleanup_round, expiry_ms(utcnow()))
            except StoreError as exc:
                logger.warning("RedisStore: purging expired entries failed: %s", exc)

    # ------------------------------------------------------------------ errors
    def _run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)``, with redis-py's errors as ours (URL secrets scrubbed)."""
        try:
            return fn(*args, **kwargs)
        except (RedisConnectionError, RedisTimeoutError) as exc:
            raise DatabaseConnectionError(
                f"cannot reach Redis at {self._where()}: {self._scrub(exc)}"
            ) from None
        except RedisError as exc:
            raise StoreError(f"Redis failed ({type(exc).__name__}): {self._scrub(exc)}") from None

    def _where(self) -> str:
        return redact_url(self._url) if self._url is not None else "the given client"

    def _scrub(self, exc: BaseException) -> str:
        return scrub_secret(str(exc), self._secrets)


def _cards(client: Redis, keys: list[bytes]) -> list[int]:
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.zcard(key)
    return [int(n) for n in pipe.execute()]
