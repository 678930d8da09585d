"""Kill -9 inside FileStore commits: the forked children of ``test_file_store_faults.py``.

* :func:`install_killer` wraps the ``os`` functions that change files (``write``,
  ``fsync``, ``replace``, ``rename``, ``ftruncate``, ``truncate``, ``unlink``,
  ``mkdir``): it records each call that succeeds and SIGKILLs the process right
  after call number ``kill_at`` (``torn``: that call is an ``os.write`` that only
  writes the first half of its bytes before the kill).  Only the library's own code
  runs in the child while the killer is armed.
* :func:`crash_point` forks a child that arms the killer and adds one turn; the
  dry run (``kill_at=None``) reports the calls made, one per crash point.
* :func:`kill_loop` keeps N forked writers (``harness.add_turns_forever``)
  running, SIGKILLs each at a random moment once it got going, and starts a
  new one.

Forking (not spawning) keeps a crash point at a few milliseconds; the
library resets its process-wide locks and caches in a forked child.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
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


@dataclass
class LoopFigures:
    """What :func:`kill_loop` did."""

    started: int = 0
    kills: int = 0
    failed: list[int] = field(default_factory=list)


def kill_loop(
    start: Callable[[int], Any],
    ready: Callable[[int], bool],
    *,
    children: int,
    seconds: float,
    rng: random.Random,
    window: tuple[float, float] = (0.02, 0.4),
) -> LoopFigures:
    """Keep ``children`` forked writers running; SIGKILL each at a random moment, restart it.

    ``start(generation)`` runs in the child and never returns.  A writer is killed
    at a random time within ``window`` once ``ready(generation)`` says it got going
    (or after 5 s).  A child that exits by itself is recorded in ``failed`` (its
    exit code) and replaced.
    """
    figures = LoopFigures()

    @dataclass
    class Slot:
        process: Any
        generation: int
        started: float
        kill_at: float | None = None

    def spawn() -> Slot:
        figures.started += 1
        process = _FORK.Process(target=start, args=(figures.started,))
        process.start()
        return Slot(process, figures.started, time.monotonic())

    slots = [spawn() for _ in range(children)]
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            for index, slot in enumerate(slots):
                now = time.monotonic()
                if not slot.process.is_alive():
                    slot.process.join()
                    figures.failed.append(slot.process.exitcode)
                    slots[index] = spawn()
                elif slot.kill_at is None:
                    if ready(slot.generation) or now - slot.started > 5.0:
                        slot.kill_at = now + rng.uniform(*window)
                elif now >= slot.kill_at:
                    os.kill(slot.process.pid, signal.SIGKILL)
                    slot.process.join()
                    figures.kills += 1
                    slots[index] = spawn()
            time.sleep(0.005)
    finally:
        for slot in slots:
            if slot.process.is_alive():
                os.kill(slot.process.pid, signal.SIGKILL)
                figures.kills += 1
            slot.process.join()
    return figures


def temporary_files(directory: Path) -> list[Path]:
    """Temporary files left in a store directory (its journal directory included)."""
    return sorted(p for p in directory.rglob(".*.tmp") if p.is_file())
