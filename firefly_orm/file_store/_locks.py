"""Process-wide thread locks of :class:`~firefly_orm.FileStore` namespaces.

The file lock (``filelock``) keeps processes apart; these keep the threads of
one process apart, one reference-counted :class:`threading.Lock` per lock-file
path, shared by every ``FileStore`` of the process.  A forked child starts
with fresh ones (it must not inherit locks held by threads it does not have).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

from firefly_orm.errors import StoreError

__all__ = ["ThreadLocks", "renewed_after_fork", "thread_locks"]


def renewed_after_fork(namespace: dict[str, Any], name: str, factory: Callable[[], object]) -> None:
    """Have a forked child set the module global ``name`` of ``namespace`` to a new ``factory()``.

    A forked child must not use a process-wide object a thread of the parent
    was changing (a cache half updated, a lock held by a thread the child does
    not have).  ``namespace`` is the module's ``globals()``; nothing is done
    where the platform cannot fork.
    """

    def renew() -> None:
        namespace[name] = factory()

    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=renew)


class ThreadLocks:
    """Process-wide, reference-counted ``threading.Lock`` per lock-file path."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}

    @contextlib.contextmanager
    def hold(self, key: str, timeout: float) -> Iterator[None]:
        """Hold the lock of ``key`` (wait at most ``timeout`` seconds, ``-1``: forever).

        Raises:
            StoreError: The lock was not free in time.
        """
        with self._guard:
            lock, users = self._locks.get(key, (threading.Lock(), 0))
            self._locks[key] = (lock, users + 1)
        try:
            if not lock.acquire(timeout=timeout):
                raise StoreError(f"timed out after {timeout}s waiting for the lock on {key}")
            try:
                yield
            finally:
                lock.release()
        finally:
            with self._guard:
                lock, users = self._locks[key]
                if users == 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)


_thread_locks = ThreadLocks()
renewed_after_fork(globals(), "_thread_locks", ThreadLocks)


def thread_locks() -> ThreadLocks:
    """The process's :class:`ThreadLocks` (new in a forked child)."""
    return _thread_locks
