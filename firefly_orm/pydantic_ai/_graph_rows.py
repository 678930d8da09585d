"""The rows of a persisted graph run and the transactions over them.

A run ``<run_id>`` lives in the namespace ``graph:<run_id>``:

* one **run row** (key ``run``): the graph's name, the run's inputs, the next
  snapshot number and the numbers of the *open* snapshots (created, pending or
  running);
* one **snapshot row** per snapshot (key ``snapshot:<12 digits>``, in the order
  they were taken): its kind (``node``: nodes still to run; ``end``: the run's
  output), its status, the graph state when it was taken, and the claim of the
  worker running it (owner and lease).

Every change is one unit of work that saves the run row with its version as
the precondition (compare-and-set), so two workers racing for the same
snapshot cannot both win: the loser's commit raises
:class:`~firefly_orm.errors.ConcurrencyError` and nothing of it is written, on
every store.  The functions here are plain sync code over ``uow.entries``, run
sync or async by the step driver (:mod:`firefly_orm.bridges._steps`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from firefly_orm.entry import MemoryEntry, MemoryScope, derived_entry_id, utcnow
from firefly_orm.errors import (
    EntryValidationError,
    FireflyOrmError,
    NotFoundError,
)
from firefly_orm.protocols import UnitOfWork

__all__ = [
    "GRAPH_NAMESPACE_PREFIX",
    "GraphRunClaimedError",
    "GraphRunExistsError",
    "GraphRunNotFoundError",
    "PendingNode",
    "Snapshot",
    "SnapshotKind",
    "SnapshotStatus",
    "SnapshotStatusError",
    "Transition",
    "add_snapshot",
    "claim_next",
    "create_run",
    "graph_namespace",
    "read_run",
    "read_snapshots",
    "transition",
]

#: Namespaces of graph runs: ``graph:<run_id>``.
GRAPH_NAMESPACE_PREFIX = "graph:"
_RUN_KEY = "run"
_SNAPSHOT_KEY_PREFIX = "snapshot:"
_SNAPSHOT_DIGITS = 12

#: A snapshot's status: ``created`` → ``pending`` (claimed by a worker) →
#: ``running`` → ``success`` or ``error``.  End snapshots are ``success``.
SnapshotStatus = Literal["created", "pending", "running", "success", "error"]
#: ``node``: nodes still to run; ``end``: the run ended with an output.
SnapshotKind = Literal["node", "end"]

_OPEN: frozenset[str] = frozenset({"created", "pending", "running"})
_CLAIMED: frozenset[str] = frozenset({"pending", "running"})


class GraphRunNotFoundError(NotFoundError):
    """No graph run with this id is stored (nothing was written)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"no graph run {run_id!r} is stored")
        self.run_id = run_id


class GraphRunExistsError(FireflyOrmError, ValueError):
    """A graph run with this id was already started: resume it, or pick another id."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"graph run {run_id!r} already exists: resume it or use another run id")
        self.run_id = run_id


class SnapshotStatusError(FireflyOrmError):
    """A snapshot cannot make this status change (nothing was written).

    Not a :class:`~firefly_orm.errors.ConcurrencyError`: retrying the same
    change cannot succeed (a lost race for a claim is retried inside the
    operation, and ends here only when the claim is really taken).

    Raised when a snapshot is started that is not ``created`` or ``pending``
    (it already runs, or ran), when another worker holds it, or when a worker
    finishes a snapshot whose claim it lost (its lease ran out and another
    worker took the snapshot over).
    """


class GraphRunClaimedError(SnapshotStatusError):
    """Every open snapshot of the run is claimed by a live worker.

    Attributes:
        run_id: The run.
        owner: The worker holding it.
        lease_until: When its claim lapses unless renewed.
    """

    def __init__(self, run_id: str, owner: str | None, lease_until: datetime | None) -> None:
        super().__init__(
            f"graph run {run_id!r} is being run by {owner!r} (its claim lapses at "
            f"{lease_until.isoformat() if lease_until else 'never'}); resume it then, "
            "or with take_over=True if that worker is known to be gone"
        )
        self.run_id = run_id
        self.owner = owner
        self.lease_until = lease_until


@dataclass(frozen=True)
class PendingNode:
    """A node still to run: its id in the graph and its inputs (JSON form when stored).

    For a ``BaseNode`` step the inputs are the node object itself.
    """

    node_id: str
    inputs: Any


@dataclass(frozen=True)
class Snapshot:
    """One stored snapshot of a graph run.

    Attributes:
        id: Its id within the run (12 digits, in the order snapshots were taken).
        kind: ``"node"`` (``nodes`` are still to run) or ``"end"`` (``output``).
        status: See :data:`SnapshotStatus`.
        state: The graph state when the snapshot was taken.
        nodes: The nodes still to run (``kind == "node"``).
        output: The run's output (``kind == "end"``).
        start_ts: When its nodes started running.
        duration: How long they ran, in seconds (once ``success`` or ``error``).
        error: The error its nodes raised (``status == "error"``), as text.
        owner: The worker that claimed it, if any.
        lease_until: When that claim lapses unless the worker renews it.
    """

    id: str
    kind: SnapshotKind
    status: SnapshotStatus
    state: Any
    nodes: tuple[PendingNode, ...] = ()
    output: Any = None
    start_ts: datetime | None = None
    duration: float | None = None
    error: str | None = None
    owner: str | None = None
    lease_until: datetime | None = None

    def lapsed(self, now: datetime) -> bool:
        """Whether its claim (``pending`` / ``running``) has run out at ``now``."""
        return self.lease_until is None or self.lease_until <= now


def graph_namespace(run_id: str) -> str:
    """The namespace of run ``run_id`` (checked: a non-empty string)."""
    if not isinstance(run_id, str) or not run_id:
        raise EntryValidationError("run_id", "must be a non-empty string")
    return f"{GRAPH_NAMESPACE_PREFIX}{run_id}"


def _snapshot_key(seq: int) -> str:
    return f"{_SNAPSHOT_KEY_PREFIX}{seq:0{_SNAPSHOT_DIGITS}d}"


def _time(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None


def _stamp(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _decode(row: MemoryEntry) -> Snapshot:
    body = row.content
    assert row.key is not None  # snapshot rows are keyed
    return Snapshot(
        id=row.key[len(_SNAPSHOT_KEY_PREFIX) :],
        kind=body["kind"],
        status=body["status"],
        state=body["state"],
        nodes=tuple(PendingNode(n["node_id"], n["inputs"]) for n in body.get("nodes", ())),
        output=body.get("output"),
        start_ts=_time(body.get("start_ts")),
        duration=body.get("duration"),
        error=body.get("error"),
        owner=body.get("owner"),
        lease_until=_time(body.get("lease_until")),
    )


def _encode(snapshot: Snapshot) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": snapshot.kind,
        "status": snapshot.status,
        "state": snapshot.state,
    }
    if snapshot.kind == "node":
        body["nodes"] = [{"node_id": n.node_id, "inputs": n.inputs} for n in snapshot.nodes]
    else:
        body["output"] = snapshot.output
    for name, value in (
        ("start_ts", _stamp(snapshot.start_ts)),
        ("duration", snapshot.duration),
        ("error", snapshot.error),
        ("owner", snapshot.owner),
        ("lease_until", _stamp(snapshot.lease_until)),
    ):
        if value is not None:
            body[name] = value
    return body


def _row(namespace: str, key: str, content: Any, version: int) -> MemoryEntry:
    return MemoryEntry(
        entry_id=derived_entry_id(namespace, key),
        namespace=namespace,
        scope=MemoryScope.WORKING,
        key=key,
        content=content,
        version=version,
    )


# --------------------------------------------------------------------------- transactions


def read_run(uow: UnitOfWork, namespace: str) -> MemoryEntry | None:
    """The run row of ``namespace`` (locked where the store can), or ``None``."""
    return uow.entries.get_by_key(namespace, _RUN_KEY, for_update=True)


def _require_run(uow: UnitOfWork, namespace: str) -> MemoryEntry:
    run = read_run(uow, namespace)
    if run is None:
        raise GraphRunNotFoundError(namespace[len(GRAPH_NAMESPACE_PREFIX) :])
    return run


def _read_snapshot(uow: UnitOfWork, namespace: str, seq: int) -> MemoryEntry:
    row = uow.entries.get_by_key(namespace, _snapshot_key(seq))
    if row is None:  # the run row lists it: only a hand-edited store gets here
        raise SnapshotStatusError(f"snapshot {seq} of {namespace!r} is missing")
    return row


def _save_run(uow: UnitOfWork, run: MemoryEntry, content: dict[str, Any]) -> None:
    """Save the run row with its version as the precondition: the compare-and-set."""
    assert run.key is not None
    updated = _row(run.namespace, run.key, content, run.version)
    uow.entries.save(run.namespace, updated, expected_version=run.version)


def _append(uow: UnitOfWork, namespace: str, run: dict[str, Any], snapshot: Snapshot) -> Snapshot:
    """Store ``snapshot`` as the run's next one (``run`` is updated in place)."""
    seq = run["next_seq"]
    run["next_seq"] = seq + 1
    if snapshot.status in _OPEN:
        run["open"] = [*run["open"], seq]
    stored = replace(snapshot, id=f"{seq:0{_SNAPSHOT_DIGITS}d}")
    row = _row(namespace, _snapshot_key(seq), _encode(stored), 1)
    uow.entries.save(namespace, row, expected_version=0)
    return stored


def create_run(
    uow: UnitOfWork, namespace: str, graph_name: str | None, inputs: Any, first: Snapshot
) -> Snapshot:
    """Start a run: its run row and first snapshot; an existing run is refused."""
    if read_run(uow, namespace) is not None:
        raise GraphRunExistsError(namespace[len(GRAPH_NAMESPACE_PREFIX) :])
    content: dict[str, Any] = {"graph": graph_name, "inputs": inputs, "next_seq": 1, "open": []}
    stored = _append(uow, namespace, content, first)
    uow.entries.save(namespace, _row(namespace, _RUN_KEY, content, 1), expected_version=0)
    return stored


def add_snapshot(uow: UnitOfWork, namespace: str, snapshot: Snapshot) -> Snapshot:
    """Append ``snapshot`` to an existing run (its number is the run's next)."""
    run = _require_run(uow, namespace)
    content = dict(run.content)
    stored = _append(uow, namespace, content, snapshot)
    _save_run(uow, run, content)
    return stored


def read_snapshots(uow: UnitOfWork, namespace: str) -> list[Snapshot]:
    """Every snapshot of the run, oldest first (``[]`` for an unknown run)."""
    rows = uow.entries.list(namespace, key_prefix=_SNAPSHOT_KEY_PREFIX)
    return [_decode(row) for row in rows]


def claim_next(
    uow: UnitOfWork,
    namespace: str,
    owner: str,
    lease: timedelta,
    *,
    take_over: bool = False,
) -> Snapshot | None:
    """Claim the run's oldest open node snapshot that is free; ``None`` if there is none.

    Free: ``created``, or claimed by a worker whose lease has lapsed (or any
    claim, with ``take_over``).  The claimed snapshot becomes ``pending``,
    owned by ``owner`` until ``now + lease``.  Raises
    :class:`GraphRunNotFoundError` for an unknown run.
    """
    run = _require_run(uow, namespace)
    now = utcnow()
    for seq in run.content["open"]:
        row = _read_snapshot(uow, namespace, seq)
        snap = _decode(row)
        if snap.kind != "node":
            continue
        if snap.status in _CLAIMED and not (take_over or snap.lapsed(now)):
            continue
        claimed = replace(snap, status="pending", owner=owner, lease_until=now + lease)
        _save_snapshot(uow, row, claimed)
        _save_run(uow, run, dict(run.content))  # serialises claims of this run
        return claimed
    return None


@dataclass(frozen=True)
class Transition:
    """A status change of one snapshot by one worker.

    ``to``: ``"running"`` (start it), ``"success"`` / ``"error"`` (finish it),
    or ``"renew"`` (extend the claim; the status stays).  ``then``: a snapshot
    appended in the same unit of work (the next nodes, or the end).
    """

    snapshot_id: str
    owner: str
    to: Literal["running", "success", "error", "renew"]
    lease: timedelta
    error: str | None = None
    then: Snapshot | None = None


def _check(snap: Snapshot, change: Transition, namespace: str, now: datetime) -> None:
    """Refuse a status change the snapshot cannot make (:class:`SnapshotStatusError`)."""
    mine = snap.owner == change.owner
    where = f"snapshot {snap.id} of {namespace!r}"
    if change.to == "running":
        if snap.status == "created" or (snap.status == "pending" and (mine or snap.lapsed(now))):
            return
        if snap.status == "pending":
            raise SnapshotStatusError(f"{where} is claimed by {snap.owner!r}")
        raise SnapshotStatusError(
            f"{where} is {snap.status!r}: only a created or pending snapshot can run"
        )
    wanted = ("pending", "running") if change.to == "renew" else ("running",)
    if snap.status not in wanted or not mine:
        raise SnapshotStatusError(
            f"{where} is {snap.status!r} and held by {snap.owner!r}, not running for "
            f"{change.owner!r}: its claim was lost (another worker took it over)"
        )


def transition(uow: UnitOfWork, namespace: str, change: Transition) -> Snapshot | None:
    """Apply ``change`` (checked first); returns the appended ``then`` snapshot, if any."""
    run = _require_run(uow, namespace)
    content = dict(run.content)
    seq = int(change.snapshot_id) if change.snapshot_id.isdigit() else -1
    if seq not in content["open"]:
        known = 0 < seq < content["next_seq"]
        raise SnapshotStatusError(
            f"snapshot {change.snapshot_id!r} of {namespace!r} "
            + ("has already run" if known else "does not exist")
        )
    row = _read_snapshot(uow, namespace, seq)
    snap = _decode(row)
    now = utcnow()
    _check(snap, change, namespace, now)
    fields: dict[str, Any] = {"lease_until": now + change.lease}
    if change.to == "running":
        fields.update(status="running", owner=change.owner, start_ts=now)
    elif change.to != "renew":
        started = snap.start_ts or now
        fields = {
            "status": change.to,
            "duration": (now - started).total_seconds(),
            "error": change.error,
        }
        content["open"] = [s for s in content["open"] if s != seq]
    _save_snapshot(uow, row, replace(snap, **fields))
    appended = None
    if change.then is not None:
        then = change.then
        if then.status == "pending":  # handed on to the same worker: its claim starts now
            then = replace(then, owner=change.owner, lease_until=now + change.lease)
        appended = _append(uow, namespace, content, then)
    _save_run(uow, run, content)
    return appended


def _save_snapshot(uow: UnitOfWork, row: MemoryEntry, snapshot: Snapshot) -> None:
    assert row.key is not None
    updated = _row(row.namespace, row.key, _encode(snapshot), row.version)
    uow.entries.save(row.namespace, updated, expected_version=row.version)
