"""Redis backend: :class:`RedisStore`, entries in plain Redis structures (redis-py).

* :mod:`firefly_orm.redis._layout`: the key names, the sorted-set members that
  order entries, the entry body and its index record;
* :mod:`firefly_orm.redis._reads`: the reads, each page one Lua script (an
  atomic snapshot, one round trip), and full-text search over per-word id sets;
* :mod:`firefly_orm.redis._commit`: a staged unit of work applied with
  ``WATCH``/``MULTI``/``EXEC`` (all or nothing, retried on a concurrent write);
* :mod:`firefly_orm.redis._store`: :class:`RedisStore` itself.

Requires the ``redis`` extra (``pip install 'firefly-orm[redis]'``) and a Redis
server 6.2 or newer (a standalone server, with or without replicas: the read
scripts reach keys they compute, which Redis Cluster does not allow).
"""

from __future__ import annotations

from firefly_orm.redis._store import MIN_REDIS_VERSION, RedisStore

__all__ = ["MIN_REDIS_VERSION", "RedisStore"]
