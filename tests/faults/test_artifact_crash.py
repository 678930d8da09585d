"""kill -9 during artifact writes: no part of a write is ever left half done (issue 12).

Several child processes (``artifact_writer.py``) write, delete and promote
files of one workspace (``keep_versions=True``), logging each attempt and
each acknowledged operation (fsynced).  The parent SIGKILLs each after 1 to 6
acknowledged operations, at a random point of the next one
(:class:`~faults.harness.KillLoop`), and starts a new one, until
:data:`IN_FLIGHT_KILLS` kills have landed with an operation in flight and the
writers acknowledged :data:`MIN_ACKED` changes (the same work on a slow or a
fast machine); then it reads everything the workspace holds and checks that
the four parts of every write (file row, its metadata, audit row, version
snapshot) agree:

* every audit row of a write or promotion has its version snapshot (same
  path, sha and time) and every snapshot its audit row: none without the other;
* per path, the audit rows form one chain (each ``old_sha`` is the previous
  ``new_sha``, from ``""``) ending at the file's current sha (``""`` once
  deleted), and the file row's version counts the writes since it was created;
* every file's bytes hash to the sha its metadata records;
* every acknowledged write, delete and promotion is in the audit log, and
  every audit row comes from an operation some writer attempted.

Figures printed per store: operations attempted / acknowledged / kills (in
flight) / audit rows / versions.  ``FIREFLY_FAULTS_KILLS`` changes the kills in
flight per store (default 8).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from faults import artifact_writer
from faults.harness import KillFigures, KillLoop, StoreSpec, Writer, close_store

from firefly_orm.artifacts import Artifacts

#: Kills that must land with an operation in flight (its attempt logged, no ack yet).
IN_FLIGHT_KILLS = int(os.environ.get("FIREFLY_FAULTS_KILLS", "8"))
CHILDREN = 3
WORKSPACE = "crash"
#: A child is killed after this many (uniform) acknowledged changes, in the next operation.
ACKS_PER_KILL = (1, 6)
#: Changes the writers must get acknowledged, all kills together.
MIN_ACKED = 20


@pytest.fixture(
    params=[
        "sqlite",
        "file",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mongo", marks=pytest.mark.mongo),
    ]
)
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreSpec]:
    """The shared store, initialised, with the workspace created before the children start."""
    name = "t_" + os.urandom(5).hex()
    kind = str(request.param)
    if kind == "sqlite":
        spec = StoreSpec(kind, str(tmp_path / "shared.sqlite3"))
    elif kind == "file":
        spec = StoreSpec(kind, str(tmp_path / "files"))
    elif kind == "postgres":
        spec = StoreSpec(kind, str(request.getfixturevalue("postgres_url")), name)
    else:  # a server of its own: killed writers leave open transactions behind
        spec = StoreSpec(kind, str(request.getfixturevalue("dedicated_mongo_url")), name)
    store = spec.open()
    try:
        if hasattr(store, "initialize"):
            store.initialize()
        Artifacts(store=store).create(WORKSPACE, keep_versions=True)
    finally:
        close_store(store)
    try:
        yield spec
    finally:
        if kind == "postgres":
            from dbutil import drop_schema

            drop_schema(spec.location, name)
        elif kind == "mongo" and os.environ.get("FIREFLY_ORM_TEST_MONGO_URL"):
            from dbutil import drop_mongo_database

            drop_mongo_database(spec.location, name)


# --------------------------------------------------------------------------- the kill loop


def _changed(line: bytes) -> bool:
    """An acknowledged operation that changed something (``A`` line not ending in ``-``)."""
    return line.startswith(b"A\t") and not line.endswith(b"\t-")


def kill_loop(spec: StoreSpec, workdir: Path, rng: random.Random) -> KillFigures:
    """``CHILDREN`` writers, each SIGKILLed after a few acknowledged operations, restarted."""

    def writer(slot: int, generation: int, log: Path) -> Writer:
        config = {
            "store": json.dumps(spec.__dict__),
            "log": str(log),
            "tag": f"w{slot}g{generation}",
            "seed": str(rng.randrange(2**32)),
        }
        return Writer(artifact_writer.run, (config,), log)

    loop = KillLoop(
        writer,
        workdir,
        children=CHILDREN,
        in_flight=IN_FLIGHT_KILLS,
        min_acks=MIN_ACKED,
        acks_per_kill=ACKS_PER_KILL,
        rng=rng,
        counts=_changed,
    )
    return loop.run()


# --------------------------------------------------------------------------- the audit


@dataclass
class Ledger:
    attempted: set[str] = field(default_factory=set)
    #: (tag, op, path, sha) of every acknowledged operation that changed something
    acked: list[tuple[str, str, str, str]] = field(default_factory=list)


def read_ledger(logs: list[Path]) -> Ledger:
    ledger = Ledger()
    for log in logs:
        if not log.exists():
            continue
        for line in log.read_text(encoding="utf-8").splitlines():
            parts = line.split("\t")
            if parts[0] == "T" and len(parts) == 4:
                ledger.attempted.add(parts[1])
            elif parts[0] == "A" and len(parts) == 5 and parts[4] != "-":
                ledger.acked.append((parts[1], parts[2], parts[3], parts[4]))
    return ledger


def check_workspace(store: Any, ledger: Ledger) -> tuple[list[str], dict[str, int]]:
    """Every disagreement between the parts of the workspace, and its row counts."""
    ws = Artifacts(store=store).open(WORKSPACE, keep_versions=True)
    snapshot = ws.export_snapshot()
    problems: list[str] = []
    files = {f.path: f for f in snapshot.files}
    for file in snapshot.files:
        if hashlib.sha256(file.data).hexdigest() != file.info.sha256:
            problems.append(f"{file.path}: bytes do not hash to the recorded sha")
    # audit rows of writes <-> version snapshots, one to one
    written = [r for r in snapshot.audit if r.op != "delete"]
    audit_keys = sorted((r.path, r.new_sha, r.at) for r in written)
    version_keys = sorted((v.path, v.info.sha256, v.info.updated_at) for v in snapshot.versions)
    if audit_keys != version_keys:
        only_audit = sorted(set(audit_keys) - set(version_keys))[:5]
        only_versions = sorted(set(version_keys) - set(audit_keys))[:5]
        problems.append(
            f"audit rows and versions disagree: only audited {only_audit}, "
            f"only versioned {only_versions}"
        )
    # one chain per path, ending at the file
    by_path: dict[str, list[Any]] = defaultdict(list)
    for record in snapshot.audit:
        by_path[record.path].append(record)
    for path in sorted(set(by_path) | set(files)):
        previous, writes_since_create = "", 0
        for record in by_path[path]:
            if record.old_sha != previous:
                problems.append(
                    f"{path}: audit chain broken at {record.op} by {record.actor} "
                    f"(old {record.old_sha[:8]} after {previous[:8]})"
                )
            previous = record.new_sha
            writes_since_create = 0 if record.op == "delete" else writes_since_create + 1
        current = files[path].info.sha256 if path in files else ""
        if previous != current:
            problems.append(
                f"{path}: the audit log ends at {previous[:8]}, the file is {current[:8]}"
            )
        if path in files and files[path].info.version != writes_since_create:
            problems.append(
                f"{path}: version {files[path].info.version}, {writes_since_create} audited writes"
            )
    # acknowledged operations are audited; audit rows come from attempted operations
    audited = {(r.actor, r.op if r.op != "promote" else "promote") for r in snapshot.audit}
    for tag, op, path, sha in ledger.acked:
        wanted = {"write": ("create", "update"), "delete": ("delete",), "promote": ("promote",)}
        if not any((tag, one) in audited for one in wanted[op]):
            problems.append(f"acknowledged {op} {tag} of {path} ({sha[:8]}) is not audited")
    for record in snapshot.audit:
        if record.actor not in ledger.attempted:
            problems.append(f"audit row by {record.actor}, which nobody attempted")
    counts = {
        "files": len(snapshot.files),
        "audit": len(snapshot.audit),
        "versions": len(snapshot.versions),
    }
    return problems, counts


def test_kill_9_leaves_no_write_half_done(spec: StoreSpec, tmp_path: Path) -> None:
    rng = random.Random()
    logs = tmp_path / "logs"
    logs.mkdir()
    figures = kill_loop(spec, logs, rng)
    ledger = read_ledger(figures.logs)
    store = spec.open()
    try:
        problems, counts = check_workspace(store, ledger)
    finally:
        close_store(store)
    print(
        f"\n[kill -9 artifacts / {spec.kind}] attempted={len(ledger.attempted)} "
        f"acknowledged-changes={len(ledger.acked)} {figures.describe()} "
        f"audit rows={counts['audit']} versions={counts['versions']} files={counts['files']} "
        f"problems={len(problems)} writer-errors={len(figures.crashed)}"
    )
    assert not figures.crashed, "a writer failed by itself:\n" + "\n".join(
        f"{log} exit {code}:\n{tail}" for log, code, tail in figures.crashed[:3]
    )
    assert not figures.timed_out, f"safety timeout: {figures.describe()}"
    assert figures.in_flight >= IN_FLIGHT_KILLS, f"too few kills in flight: {figures.describe()}"
    assert len(ledger.acked) >= MIN_ACKED, "too few acknowledged operations to mean anything"
    assert not problems, "\n".join(problems[:20])


def test_the_check_finds_a_missing_part(tmp_path: Path) -> None:
    """The audit above is not vacuous: remove one part of one write and it reports it."""
    spec = StoreSpec("sqlite", str(tmp_path / "check.sqlite3"))
    store = spec.open()
    try:
        ws = Artifacts(store=store).create(WORKSPACE, keep_versions=True)
        ledger = Ledger()
        for n in range(3):
            tag = f"w0g0:{n}"
            ledger.attempted.add(tag)
            info = ws.write_text("f0.txt", f"{tag} text", actor=tag)
            ledger.acked.append((tag, "write", "f0.txt", info.sha256))
        assert check_workspace(store, ledger)[0] == []
        version = store.load(ws.layout.versions)[1]
        store.delete(ws.layout.versions, version.entry_id)
        problems = check_workspace(store, ledger)[0]
        assert any("audit rows and versions disagree" in p for p in problems), problems
        audit = store.load(ws.layout.audit)[1]
        store.delete(ws.layout.audit, audit.entry_id)
        problems = check_workspace(store, ledger)[0]
        assert any("audit chain broken" in p for p in problems), problems
        assert any("is not audited" in p for p in problems), problems
    finally:
        store.close()
