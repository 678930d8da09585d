"""Kill -9 inside FileStore commits: the forked children of ``test_file_store_faults.py``.

* :func:`install_killer` wraps the ``os`` functions that change files (``write``,
  ``fsync``, ``replace``, ``rename``, ``ftruncate``, ``truncate``, ``unlink``,
  ``mkdir``): it records each call that succeeds and SIGKILLs the process right
  after call number ``kill_at`` (``torn``: that call is an ``os.write`` that only
  writes the first half of its bytes before the kill).  Only the library's own code
  runs in the child while the killer is armed.
* :func:`crash_point` forks a child that arms the killer and adds one turn; the
  dry run (``kill_at=None``) reports the calls made, one per crash point.
* :func:`compacting_writer`: the writer of the random-kill test
  (``harness.add_turns_forever``, every write compacting first), run by
  :class:`faults.harness.KillLoop`.

Forking (not spawning) keeps a crash point at a few milliseconds; the
library resets its process-wide locks and caches in a forked child.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HOOKED = ("write", "fsync", "replace", "rename", "ftruncate", "truncate", "unlink", "mkdir")
_FORK = multiprocessing.get_context("fork")


def install_killer(kill_at: int | None, torn: bool, calls: list[str]) -> None:
    """Record every hooked call in ``calls``; die by SIGKILL after call ``kill_at`` (1-based)."""
    for name in HOOKED:
        real = getattr(os, name)

        def hooked(*args: Any, _name: str = name, _real: Any = real) -> Any:
            if kill_at is not None and len(calls) + 1 == kill_at and torn and _name == "write":
                fd, data = args[0], bytes(args[1])
                _real(fd, data[: max(1, len(data) // 2)])
                os.kill(os.getpid(), signal.SIGKILL)
            result = _real(*args)  # a call that fails changes nothing: not a crash point
            calls.append(_name)
            if kill_at is not None and len(calls) == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return result

        setattr(os, name, hooked)


def compact_always() -> None:
    """Make every write compact its file first (a library knob; absent before the log format)."""
    try:
        from firefly_orm.file_store import _log as file_log
    except ImportError:
        return
    file_log.COMPACT_MIN_BYTES = 0


def _child(
    write_fd: int,
    action: Callable[[], None],
    prepare: Callable[[], None],
    kill_at: int | None,
    torn: bool,
) -> None:
    calls: list[str] = []
    try:
        prepare()
        install_killer(kill_at, torn, calls)
        action()
    except BaseException as exc:  # reported, then a distinct exit code
        os.write(write_fd, f"error {type(exc).__name__}: {exc}".encode())
        os._exit(3)
    os.write(write_fd, " ".join(calls).encode())
    os._exit(0)


@dataclass
class ChildResult:
    """How a crash-point child ended: killed, or finished with the calls it made."""

    killed: bool
    calls: list[str] = field(default_factory=list)
    error: str | None = None


def crash_point(
    action: Callable[[], None],
    *,
    prepare: Callable[[], None] = lambda: None,
    kill_at: int | None = None,
    torn: bool = False,
) -> ChildResult:
    """Run ``action`` in a forked child armed to die after hooked call ``kill_at``."""
    read_fd, write_fd = os.pipe()
    process = _FORK.Process(target=_child, args=(write_fd, action, prepare, kill_at, torn))
    process.start()
    os.close(write_fd)
    chunks = []
    while chunk := os.read(read_fd, 65536):
        chunks.append(chunk)
    os.close(read_fd)
    process.join(60)
    text = b"".join(chunks).decode()
    if process.exitcode == -signal.SIGKILL:
        return ChildResult(killed=True)
    if process.exitcode == 0:
        return ChildResult(killed=False, calls=text.split())
    return ChildResult(killed=False, error=text or f"exit code {process.exitcode}")


def compacting_writer(config: Any) -> None:
    """:func:`faults.harness.add_turns_forever` with every write compacting first (a kill
    loop's writer: module level, so the fork server can run it)."""
    from faults.harness import add_turns_forever

    compact_always()
    add_turns_forever(config)


def temporary_files(directory: Path) -> list[Path]:
    """Temporary files left in a store directory (its journal directory included)."""
    return sorted(p for p in directory.rglob(".*.tmp") if p.is_file())
