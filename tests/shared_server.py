"""A test server started on first use and shared: nested users get the same one.

``SharedServer(start)`` calls ``start(stack, *args)`` when its first user arrives
(``use(*args)``; the ``ExitStack`` owns what was started) and closes the stack when its last user
leaves; users in between get the value ``start`` returned (a URL, say).  The
MongoDB and Redis helpers (``mongo_server.py``, ``redis_server.py``) share
their servers this way.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar, cast

T = TypeVar("T")


class SharedServer(Generic[T]):
    """Reference-counted ``start(stack)``: started by the first user, stopped by the last."""

    def __init__(self, start: Callable[..., T]) -> None:
        self._start = start
        self._lock = threading.Lock()
        self._users = 0
        self._stack: contextlib.ExitStack | None = None
        self._value: T | None = None

    @property
    def value(self) -> T | None:
        """What ``start`` returned for the current users (``None``: no server now)."""
        return self._value

    @contextlib.contextmanager
    def use(self, *args: Any) -> Iterator[T]:
        """Yield the shared value, starting the server (``start(stack, *args)``) if this
        is its first user.

        What ``start`` raises reaches the caller, and the next user tries again.
        """
        with self._lock:
            if self._stack is None:
                stack = contextlib.ExitStack()
                try:
                    self._value = self._start(stack, *args)
                except BaseException:
                    stack.close()
                    raise
                self._stack = stack
            self._users += 1
            value = cast(T, self._value)
        try:
            yield value
        finally:
            with self._lock:
                self._users -= 1
                if self._users == 0:
                    stack, self._stack, self._value = self._stack, None, None
                    if stack is not None:
                        stack.close()
