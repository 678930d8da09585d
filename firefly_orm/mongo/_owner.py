"""Who holds a commit journal, and whether that writer can still be running.

A non-transactional commit of :class:`~firefly_orm.mongo.MongoDBStore` (see
:mod:`firefly_orm.mongo._journal`) records its writer in its lock documents:
a random token of the writing process, the machine and PID namespace it runs
in, its PID and the PID's start time.  Another process decides from that
whether the writer is

* **alive**: same token and the commit still in flight in this process, or
  the same machine (boot id and PID namespace) and a process with that PID and
  start time exists and is not a zombie;
* **gone**: same token but no longer in flight (its commit raised), or the
  same machine and no such process (killed, exited, PID reused);
* **unknown**: another machine (or no ``/proc``): only the lease tells.

A journal whose writer is gone, or whose lease has run out, is completed or
undone by whoever meets it; one whose writer is alive is waited for.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from dataclasses import dataclass
from typing import Any

__all__ = ["IN_FLIGHT", "Owner", "current_owner", "owner_state"]

#: Journal ids whose commit (or recovery) runs in this process now.
IN_FLIGHT: set[str] = set()

_lock = threading.Lock()
_cached: tuple[int, Owner] | None = None


@dataclass(frozen=True)
class Owner:
    """The identity of a writing process, as stored in its journal documents."""

    token: str
    machine: str
    pid: int
    start: str

    def as_document(self) -> dict[str, Any]:
        """The BSON-ready form."""
        return {"token": self.token, "machine": self.machine, "pid": self.pid, "start": self.start}


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def _machine() -> str:
    """Host name, boot id and PID namespace: equal only where PIDs mean the same process."""
    boot = _read("/proc/sys/kernel/random/boot_id")
    try:
        pid_namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        pid_namespace = ""
    if not boot or not pid_namespace:
        return ""  # no way to look at other processes here: leases only
    return f"{socket.gethostname()}|{boot}|{pid_namespace}"


def _process_start(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks since boot) of ``pid``, or ``None`` if there is none."""
    stat = _read(f"/proc/{pid}/stat")
    if not stat:
        return None
    # "pid (comm) state ppid ... starttime(22nd field) ...": comm may hold spaces.
    fields = stat[stat.rfind(")") + 2 :].split()
    if len(fields) < 20:
        return None
    return fields[0], fields[19]


def current_owner() -> Owner:
    """This process's identity (a new token after a fork)."""
    global _cached
    pid = os.getpid()
    with _lock:
        if _cached is None or _cached[0] != pid:
            if _cached is not None:
                IN_FLIGHT.clear()  # a forked child runs none of its parent's commits
            started = _process_start(pid)
            _cached = (
                pid,
                Owner(uuid.uuid4().hex, _machine(), pid, started[1] if started else ""),
            )
        return _cached[1]


def owner_state(owner: Any, journal_id: str) -> bool | None:
    """Whether the writer ``owner`` (a stored owner document) runs: True, False or None."""
    if not isinstance(owner, dict):
        return False  # not written by this module: nobody to wait for
    me = current_owner()
    if owner.get("token") == me.token:
        return journal_id in IN_FLIGHT
    if not me.machine or owner.get("machine") != me.machine:
        return None
    pid = owner.get("pid")
    if not isinstance(pid, int):
        return False
    found = _process_start(pid)
    if found is None:
        return False
    state, start = found
    return state not in ("Z", "X") and start == owner.get("start")
