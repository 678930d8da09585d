"""FileStore's files read the way outside tooling would: ``json`` and ``hashlib`` only.

:func:`read_namespace` follows the on-disk layout the guide documents
(``docs/guide/stores.md``, FileStore): the snapshot ``<name>.json`` is one JSON
object ``{entry_id: entry}``; the log ``<name>.log.jsonl`` beside it, if its
header names the snapshot's SHA-256, holds the commits since, one JSON record a
line (``clear``, then ``del``, then ``put``), its last line possibly torn by a
crash.  It never imports firefly_orm, so the tests that compare it with what
the store returns check the documented format, not the library against itself.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = [
    "disagreements",
    "live",
    "log_of",
    "read_namespace",
    "read_snapshot",
    "snapshots",
    "write_previous_format",
]

Entries = dict[str, dict[str, Any]]


def log_of(snapshot: Path) -> Path:
    """The log beside ``snapshot`` (``x.json`` -> ``x.log.jsonl``)."""
    return snapshot.with_name(snapshot.name.removesuffix(".json") + ".log.jsonl")


def snapshots(directory: Path) -> list[Path]:
    """Every namespace snapshot in a FileStore directory."""
    return sorted(p for p in directory.glob("*.json") if p.is_file())


def read_snapshot(snapshot: Path) -> Entries:
    """``json.load`` of the snapshot, checked to be an object of entry objects."""
    with open(snapshot, encoding="utf-8") as handle:
        document = json.load(handle)
    assert isinstance(document, dict), f"{snapshot.name} is not a JSON object"
    for entry_id, entry in document.items():
        assert isinstance(entry, dict) and entry["entry_id"] == entry_id, snapshot.name
    return document


def read_namespace(snapshot: Path) -> Entries:
    """The entries of a namespace: the snapshot with its log's records applied."""
    entries = read_snapshot(snapshot)
    log = log_of(snapshot)
    if not log.exists():
        return entries
    data = log.read_bytes()
    *complete, _torn_or_empty = data.split(b"\n")  # a last line without newline: not committed
    header = json.loads(complete[0])
    assert header["format"] == "firefly_orm.file_log" and header["version"] == 2, header
    if header["snapshot"]["sha256"] != hashlib.sha256(snapshot.read_bytes()).hexdigest():
        return entries  # a log of an earlier snapshot (a compaction stopped half-way)
    for number, line in enumerate(complete[1:], 1):
        try:
            record = json.loads(line)
        except ValueError:
            assert number == len(complete) - 1, f"{log.name}: line {number} is not JSON"
            break  # the last line, torn by a crash
        if record.get("clear"):
            entries.clear()
        for entry_id in record.get("del", []):
            entries.pop(entry_id, None)
        for entry in record.get("put", []):
            entries[entry["entry_id"]] = entry
    return entries


def live(entries: Entries) -> Entries:
    """The entries not expired now (what a store's ``load`` returns), by id."""
    now = datetime.now(UTC)
    return {
        i: e
        for i, e in entries.items()
        if e["expires_at"] is None or datetime.fromisoformat(e["expires_at"]) > now
    }


def disagreements(
    directory: Path, stored: Callable[[str], Entries], namespaces: list[str]
) -> list[str]:
    """Where the files of ``directory`` differ from the store (empty: nowhere).

    Every snapshot must be read by ``json.load`` and, with its log applied, hold
    the live entries ``stored(namespace)`` returns; the namespaces on disk must be
    ``namespaces`` (the store's list).
    """
    wrong = []
    on_disk = []
    for snapshot in snapshots(directory):
        try:
            entries = read_namespace(snapshot)
        except (AssertionError, ValueError) as exc:
            wrong.append(f"{snapshot.name}: {exc}")
            continue
        if not entries:
            wrong.append(f"{snapshot.name}: an empty namespace keeps no files")
            continue
        namespace = next(iter(entries.values()))["namespace"]
        on_disk.append(namespace)
        if live(entries) != stored(namespace):
            wrong.append(f"{namespace}: the files differ from what the store returns")
    if sorted(on_disk) != sorted(namespaces):
        wrong.append(f"namespaces on disk {sorted(on_disk)} != {sorted(namespaces)}")
    return wrong


def write_previous_format(snapshot: Path, namespace: str, entries: list[dict[str, Any]]) -> None:
    """Write a namespace as the previous version did: a JSON-lines log in the ``.json`` file.

    A header line, then two records (the first entry, then the rest); any log
    beside it is removed (that version had none).
    """
    header = {
        "format": "firefly_orm.file_log",
        "version": 1,
        "namespace": namespace,
        "generation": hashlib.sha256(namespace.encode()).hexdigest()[:32],
        "base": None,
        "snapshot": 0,
    }
    lines = [header, {"id": None, "put": entries[:1]}, {"id": "1" * 32, "put": entries[1:]}]
    log_of(snapshot).unlink(missing_ok=True)
    snapshot.write_text("".join(json.dumps(line) + "\n" for line in lines))
