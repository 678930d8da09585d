"""The writer process killed by ``tests/faults/test_mongo_faults.py``.

The test forks it from the fault suite's fork server (:func:`run`, its lines
written to a file); ``python mongo_fault_child.py URL DATABASE CONVERSATION_ID
MODE [K]`` runs the same, its lines on stdout:

* ``MODE=loop``: print ``ready`` once the store is open, then add turns to the
  conversation until killed, printing ``ack <turn_id> <time>`` (the
  ``time.monotonic()`` of this machine, which the parent shares) after each
  ``add_turn`` returned;
* ``MODE=kill-after K``: add ONE turn with every collection write counted one
  document operation at a time (an ``insert_many`` of n documents or a
  ``bulk_write`` of n operations is n steps), and SIGKILL this process right
  after step ``K`` (a multi-operation call is cut after its first operations,
  which is what a crash in the middle of an ordered batch leaves).  Prints
  ``ack <turn_id>`` and ``steps <n>`` when the turn was added without reaching
  step ``K``.

The store is a non-transactional :class:`~firefly_orm.mongo.MongoDBStore`
(``transactions=False``), the memory evicts with ``keep_evicted=True`` (see
:func:`fault_memory`, shared with the test).
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from pymongo.asynchronous.collection import AsyncCollection

from firefly_orm.conversation import ConversationMemory
from firefly_orm.mongo import MongoDBStore

#: Token budget of the fault conversations: a turn of :func:`turn_text` is 12
#: tokens, so about 8 turns are kept and each new one evicts the oldest.
MAX_TOKENS = 100


def fault_store(url: str, database: str) -> MongoDBStore:
    """The standalone-mode store every process of the fault test uses."""
    return MongoDBStore(url, database=database, transactions=False)


def fault_memory(store: MongoDBStore) -> ConversationMemory:
    """Evicting, archiving conversation memory over ``store``."""
    return ConversationMemory(
        store=store, max_tokens=MAX_TOKENS, summarize_threshold=0, keep_evicted=True
    )


def turn_text(n: int, words: int = 5) -> tuple[str, str]:
    """A user prompt and a response (``words`` words each)."""
    return " ".join(f"q{n}" for _ in range(words)), " ".join(f"a{n}" for _ in range(words))


class StepKiller:
    """Counts collection writes one document operation at a time; SIGKILLs after step ``k``."""

    def __init__(self, kill_after: int | None) -> None:
        self.kill_after = kill_after
        self.steps = 0

    def room(self) -> int | None:
        """How many more steps may run before the kill (``None``: no limit)."""
        return None if self.kill_after is None else self.kill_after - self.steps

    def done(self, n: int) -> None:
        self.steps += n
        if self.kill_after is not None and self.steps >= self.kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    def install(self) -> None:
        """Wrap the write methods of pymongo's async collection (this process only)."""
        for name in (
            "insert_one",
            "update_one",
            "update_many",
            "replace_one",
            "delete_one",
            "delete_many",
            "find_one_and_update",
            "find_one_and_replace",
            "find_one_and_delete",
        ):
            setattr(AsyncCollection, name, self._single(getattr(AsyncCollection, name)))
        AsyncCollection.insert_many = self._batch(AsyncCollection.insert_many)  # type: ignore[method-assign]
        AsyncCollection.bulk_write = self._batch(AsyncCollection.bulk_write)  # type: ignore[method-assign]

    def _single(self, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        async def wrapper(col: Any, *args: Any, **kwargs: Any) -> Any:
            result = await method(col, *args, **kwargs)
            self.done(1)
            return result

        return wrapper

    def _batch(self, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        async def wrapper(col: Any, items: Any, *args: Any, **kwargs: Any) -> Any:
            items = list(items)
            room = self.room()
            if room is not None and room < len(items):
                # The crash lands inside this batch: only its first `room` items run.
                if room > 0:
                    await method(col, items[:room], *args, **kwargs)
                self.done(max(room, 0))
            result = await method(col, items, *args, **kwargs)
            self.done(len(items))
            return result

        return wrapper


def run(url: str, database: str, conversation_id: str, mode: str, k: int, out: int) -> None:
    """Do ``mode`` on the conversation, writing the lines to file descriptor ``out``."""

    def say(line: str) -> None:
        os.write(out, (line + "\n").encode())

    store = fault_store(url, database)
    store.initialize()
    memory = fault_memory(store)
    if mode == "loop":
        say("ready")
        for n in range(100_000):
            turn = memory.add_turn(conversation_id, *turn_text(n))
            say(f"ack {turn.turn_id} {time.monotonic()}")
        return
    killer = StepKiller(k)
    killer.install()
    turn = memory.add_turn(conversation_id, *turn_text(999, words=12))
    say(f"ack {turn.turn_id}")
    say(f"steps {killer.steps}")
    store.close()


def run_to_file(
    url: str, database: str, conversation_id: str, mode: str, k: int, path: str
) -> None:
    """:func:`run`, its lines appended to the file ``path`` (a forked child's entry point)."""
    out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        run(url, database, conversation_id, mode, k, out)
    finally:
        os.close(out)


def main(argv: list[str]) -> None:
    url, database, conversation_id, mode, *rest = argv
    run(url, database, conversation_id, mode, int(rest[0]) if rest else 0, sys.stdout.fileno())


if __name__ == "__main__":
    main(sys.argv[1:])
