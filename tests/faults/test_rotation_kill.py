"""kill -9 in the middle of a key rotation: every row stays readable, a rerun finishes.

A store holds a conversation and a working fact encrypted under key ``k1``.
A child process (``rotation_child.py``) rotates it to ``k2`` four rows per
unit of work and is SIGKILLed mid-rotation:

* SQLite: on a key fetch in the middle of the second batch of the
  conversation (two rows of the batch already saved, uncommitted);
* FileStore: on a file-system call in the middle of that batch's commit (the
  call found by a dry run on a copy of the data).

Then, with both keys: every row decrypts to what was written (old key or new),
the rows under ``k2`` are exactly the committed batches (whole batches, nothing
of the killed one on SQLite), and a rotation run again moves the rest and
leaves every row under ``k2``, readable with ``k2`` alone.

Figures printed: rows, rows under k2 after the kill, rows the rerun rotated.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from firefly_orm.conversation import ConversationMemory
from firefly_orm.file_store import FileStore
from firefly_orm.privacy import (
    Encryption,
    KeyRing,
    envelope_key_id,
    generate_key,
    protect,
    rotate_keys,
    store_namespaces,
)
from firefly_orm.sql import SQLiteStore
from firefly_orm.working import WorkingMemory

CHILD = Path(__file__).resolve().parent / "rotation_child.py"
K1, K2 = generate_key(), generate_key()
TURNS = 10  # + the head, the conversation index and the fact: 13 rows
BATCH = 4
#: The fetch that kills: 1 for the current key, 2 per row; the index row (1 row,
#: its own namespace, sorted first) takes fetches 2-3, the conversation's first
#: batch 4-11, the second batch 12-19: fetch 16 is its third row's opening.
KILL_AT_FETCH = 16
#: Rows under k2 once the kill landed: the index row and the first batch.
COMMITTED = 1 + BATCH


def _open(kind: str, location: str) -> Any:
    return SQLiteStore(location) if kind == "sqlite" else FileStore(location)


def _child(config: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHILD), json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _contents(store: Any, *ring: str) -> dict[str, Any]:
    keys = {"k1": K1, "k2": K2}
    protected = protect(store, encryption=Encryption(KeyRing({k: keys[k] for k in ring})))
    return {e.entry_id: e.content for ns in store_namespaces(store) for e in protected.load(ns)}


def _kids(store: Any) -> list[str | None]:
    return [envelope_key_id(e.content) for ns in store_namespaces(store) for e in store.load(ns)]


@pytest.mark.parametrize("kind", ["sqlite", "file"])
def test_rotation_killed_mid_batch_leaves_every_row_readable(kind: str, tmp_path: Path) -> None:
    location = str(tmp_path / ("memory.sqlite3" if kind == "sqlite" else "files"))
    store = _open(kind, location)
    if kind == "sqlite":
        store.initialize()
    protected = protect(store, encryption=Encryption(KeyRing({"k1": K1})))
    conversation = ConversationMemory(store=protected, max_tokens=10_000)
    for i in range(TURNS):
        conversation.add_turn("c", f"question {i}", f"answer {i}")
    WorkingMemory(store=protected, scope_id="s").set("fact", {"value": 42})
    written = _contents(store, "k1")
    assert len(written) == TURNS + 3 and set(_kids(store)) == {"k1"}
    if kind == "sqlite":
        store.close()

    config: dict[str, Any] = {
        "kind": kind,
        "location": location,
        "k1": K1,
        "k2": K2,
        "batch_size": BATCH,
    }
    if kind == "sqlite":
        config["kill_at_fetch"] = KILL_AT_FETCH
    else:  # a dry run on a copy finds the file-system calls of each batch's commit
        copy = str(tmp_path / "dry-run")
        shutil.copytree(location, copy)
        dry = _child({**config, "location": copy, "count_fs_calls": True})
        assert dry.returncode == 0, dry.stderr
        ends = [json.loads(line)["fs_calls"] for line in dry.stdout.splitlines()[:-1]]
        # The conversation's second batch (the third commit): a call inside its commit.
        config["kill_at_fs_call"] = (ends[1] + ends[2]) // 2 + 1
    killed = _child(config)
    assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stderr)

    store = _open(kind, location)
    try:
        assert _contents(store, "k1", "k2") == written  # every row, old key or new
        kids = _kids(store)
        under_k2 = kids.count("k2")
        assert set(kids) == {"k1", "k2"}
        if kind == "sqlite":
            assert under_k2 == COMMITTED  # whole batches; the killed one rolled back
        else:  # the killed commit is undone or completed by the next access, whole
            assert under_k2 in {COMMITTED, COMMITTED + BATCH}

        report = rotate_keys(store, Encryption(KeyRing({"k2": K2, "k1": K1})), batch_size=BATCH)
        assert report.rotated == len(written) - under_k2
        assert set(_kids(store)) == {"k2"}
        assert _contents(store, "k2") == written
        print(
            f"\n{kind}: rows={len(written)} under_k2_after_kill={under_k2} rerun={report.rotated}"
        )
    finally:
        if kind == "sqlite":
            store.close()
