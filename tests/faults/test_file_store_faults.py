"""FileStore under kill -9: every crash point of a commit, torn lines, dead writers, planted locks.

* **Every crash point of an evicting add_turn** (issue 17, item 2): with
  ``keep_evicted=True`` an ``add_turn`` that evicts moves a turn from
  ``conversation:<id>`` to ``conversation-archive:<id>``: one commit over two
  files.  A forked child adds that turn and SIGKILLs itself right after the
  k-th call that changes a file (``write``, ``fsync``, ``replace``, ...), for
  every k, and once more half-way through each ``write`` (a torn line).  After
  each crash the store is reopened and audited: no turn both archived and live,
  no acknowledged turn lost, the head's ``turn_count`` / ``total_tokens`` match
  the stored turns, no temporary file of the dead writer left, and the next
  ``add_turn`` works.  After each crash every namespace's ``.json`` must also be
  read by ``json.load`` and, with its ``.log.jsonl`` applied (by
  :mod:`helpers.file_store_files`, which knows only the documented format),
  equal what the store returns (issue 33).  Five starting points: the archive
  file does not exist yet, it exists, every write compacts first (kills land
  between a compaction's two renames), snapshots of the first versions (no
  log), and files of the previous version, each ``.json`` a log (converted
  when the killed process opens the store).
* **Writers killed at random**: forked writers add turns to two conversations
  (every write compacting first, so kills also land in compactions and
  recoveries), each SIGKILLed after 1 or 2 acknowledged turns at a random point
  of the next one, and restarted, until :data:`RANDOM_KILLS` kills landed with an
  ``add_turn`` in flight; then no acknowledged turn may be lost or duplicated,
  and the files read as JSON must equal the store.
* **A planted lock file** (a symbolic link, dangling or not) is refused with a
  ``StoreError`` naming it; nothing is written and the link's target is untouched.

Each test prints its figures.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from faults.filestore_crash import (
    compact_always,
    compacting_writer,
    crash_point,
    temporary_files,
)
from faults.harness import (
    KillLoop,
    Ledger,
    StoreSpec,
    Writer,
    WriterConfig,
    audit_conversations,
    read_ledger,
)
from helpers.file_store_files import (
    disagreements,
    read_snapshot,
    snapshots,
    write_previous_format,
)

from firefly_orm.conversation import ConversationMemory
from firefly_orm.errors import StoreError
from firefly_orm.file_store import FileStore

CID = "crash"
KEPT_TURNS = 4
TOKENS = 10
MAX_TOKENS = KEPT_TURNS * TOKENS
PROMPT = "the crashing turn"


class FlatEstimator:
    """Every turn is worth TOKENS tokens: each add_turn past the budget evicts one turn."""

    def estimate(self, text: str) -> int:
        return TOKENS


def memory(store: FileStore) -> ConversationMemory:
    return ConversationMemory(
        store=store,
        max_tokens=MAX_TOKENS,
        summarize_threshold=MAX_TOKENS,
        estimator=FlatEstimator(),  # type: ignore[arg-type]
        keep_evicted=True,
    )


@dataclass(frozen=True)
class Start:
    """A starting point of the sweep: a store directory and the turns it acknowledged."""

    name: str
    directory: Path
    acked: dict[str, int]
    compact: bool = False


def _to_legacy(directory: Path) -> None:
    """Rewrite every namespace file the way earlier versions wrote them."""
    store = FileStore(directory)
    for namespace in store.namespaces:
        entries = store.load(namespace)
        data = {e.entry_id: e.to_json_dict() for e in entries}
        store.path_for(namespace).write_text(json.dumps(data, indent=2))


def _to_previous_format(directory: Path) -> None:
    """Rewrite every namespace as the previous version did: a log in the .json file."""
    store = FileStore(directory)
    for namespace in store.namespaces:
        entries = [e.to_json_dict() for e in store.load(namespace)]
        write_previous_format(store.path_for(namespace), namespace, entries)


def _make_start(root: Path, name: str, turns: int, **options: Any) -> Start:
    directory = root / name
    mem = memory(FileStore(directory))
    acked = {f"setup {n}": mem.add_turn(CID, f"setup {n}", "ok").turn_id for n in range(turns)}
    if name == "legacy-files":
        _to_legacy(directory)
    if name == "previous-format":
        _to_previous_format(directory)
    return Start(name, directory, acked, **options)


@pytest.fixture(scope="module")
def starts(tmp_path_factory: pytest.TempPathFactory) -> list[Start]:
    root = tmp_path_factory.mktemp("starts")
    return [
        _make_start(root, "archive-absent", KEPT_TURNS),
        _make_start(root, "archive-present", KEPT_TURNS + 3),
        _make_start(root, "compacting", KEPT_TURNS + 12, compact=True),
        _make_start(root, "legacy-files", KEPT_TURNS + 3),
        _make_start(root, "previous-format", KEPT_TURNS + 3),
    ]


def _add_the_turn(directory: Path) -> None:
    memory(FileStore(directory)).add_turn(CID, PROMPT, "evicts the oldest live turn")


def _audit(directory: Path, acked: dict[str, int], attempted: set[str]) -> list[str]:
    """What is wrong with the stored turns after a crash (empty: nothing)."""
    ledger = Ledger()
    for prompt in attempted:
        ledger.attempt(prompt)
    for prompt, turn_id in acked.items():
        ledger.ack(prompt, CID, turn_id)
    store = FileStore(directory)  # opening completes a dead writer's commit
    audit = audit_conversations(store, [CID], ledger, max_tokens=MAX_TOKENS, summarized=False)
    return audit.lost + audit.duplicated + audit.phantom + audit.problems + files_differ(store)


def _not_json(directory: Path, previous_format: bool) -> list[str]:
    """The snapshots ``json.load`` cannot read, as the killed process left them.

    With ``previous_format``, a ``.json`` not converted yet may still be that
    version's log (the next open converts it).
    """
    wrong = []
    for snapshot in snapshots(directory):
        if previous_format and snapshot.read_bytes().startswith(b'{"format":'):
            continue
        try:
            read_snapshot(snapshot)
        except (AssertionError, ValueError) as exc:
            wrong.append(f"{snapshot.name} is not a JSON snapshot: {exc}")
    return wrong


def files_differ(store: FileStore) -> list[str]:
    """Where the .json files (with their logs) differ from what ``store`` returns."""

    def stored(namespace: str) -> dict[str, dict[str, Any]]:
        return {e.entry_id: e.to_json_dict() for e in store.load(namespace)}

    return disagreements(store.base_dir, stored, store.namespaces)


@dataclass
class SweepFigures:
    points: int = 0
    torn: int = 0
    inconsistent: int = 0
    littered: int = 0
    examples: dict[str, list[str]] = field(default_factory=dict)

    def record(self, where: str, wrong: list[str], litter: list[str]) -> None:
        self.inconsistent += bool(wrong)
        self.littered += bool(litter)
        for kind, found in (("inconsistent", wrong), ("temporary files", litter)):
            if found and kind not in self.examples:
                self.examples[kind] = [f"{kind}, {where}:", *found[:5]]


def _crash_once(start: Start, directory: Path, prepare: Any, kill_at: int, torn: bool) -> None:
    shutil.copytree(start.directory, directory)
    result = crash_point(
        lambda: _add_the_turn(directory), prepare=prepare, kill_at=kill_at, torn=torn
    )
    assert result.killed, f"{start.name} point {kill_at}: {result.error or 'not killed'}"


def _sweep(start: Start, work: Path, figures: SweepFigures) -> list[str]:
    """Crash one evicting add_turn at every point; return the dry run's calls."""
    prepare = compact_always if start.compact else (lambda: None)
    scratch = work / f"{start.name}-dry"
    shutil.copytree(start.directory, scratch)
    dry = crash_point(lambda: _add_the_turn(scratch), prepare=prepare)
    assert dry.error is None and not dry.killed, dry.error
    points = [(k, False) for k in range(1, len(dry.calls) + 1)]
    points += [(k, True) for k, name in enumerate(dry.calls, 1) if name == "write"]
    attempted = set(start.acked) | {PROMPT}
    for kill_at, torn in points:
        directory = work / f"{start.name}-{kill_at}{'-torn' if torn else ''}"
        call = dry.calls[kill_at - 1] + (", torn" if torn else "")
        where = f"{start.name} after call {kill_at} ({call})"
        _crash_once(start, directory, prepare, kill_at, torn)
        figures.points += 1
        figures.torn += torn
        wrong = _not_json(directory, start.name == "previous-format")  # before any reopening
        wrong += _audit(directory, start.acked, attempted)
        if not wrong:  # the store works on: one more turn, audited again
            stored = {t.user_prompt: t.turn_id for t in _all_turns(directory)}
            acked = {**start.acked, **({PROMPT: stored[PROMPT]} if PROMPT in stored else {})}
            turn = memory(FileStore(directory)).add_turn(CID, "after the crash", "ok")
            acked["after the crash"] = turn.turn_id
            wrong = _audit(directory, acked, attempted | {"after the crash"})
        litter = [f"left behind: {p.name}" for p in temporary_files(directory)]
        figures.record(where, wrong, litter)
        shutil.rmtree(directory)
    return dry.calls


def _all_turns(directory: Path) -> list[Any]:
    mem = memory(FileStore(directory))
    return mem.get_archived_turns(CID) + mem.get_turns(CID)


def test_kill_at_every_step_of_an_evicting_add_turn(starts: list[Start], tmp_path: Path) -> None:
    figures = SweepFigures()
    for start in starts:
        calls = _sweep(start, tmp_path, figures)
        print(f"\n[FileStore crash sweep] {start.name}: {len(calls)} calls: {' '.join(calls)}")
    print(
        f"[FileStore crash sweep] crash points tried={figures.points} "
        f"(torn writes={figures.torn}) inconsistent={figures.inconsistent} "
        f"temporary-files-left={figures.littered}"
    )
    problems = [line for example in figures.examples.values() for line in example]
    assert figures.inconsistent == figures.littered == 0, "\n".join(problems)
    assert figures.points >= 40


# --------------------------------------------------------------------------- random kills


CONVERSATIONS = ("kill-a", "kill-b")
#: Kills that must land with an add_turn in flight (about what 8 s of kills made before).
RANDOM_KILLS = 40


def test_writers_killed_at_random_lose_no_acknowledged_turn(tmp_path: Path) -> None:
    spec = StoreSpec("file", str(tmp_path / "files"))
    logs = tmp_path / "logs"
    logs.mkdir()
    rng = random.Random()

    def writer(slot: int, generation: int, log: Path) -> Writer:
        config = WriterConfig(
            store=spec,
            log=str(log),
            tag=f"g{generation}",
            conversations=CONVERSATIONS,
            max_tokens=20,
            seed=rng.randrange(2**32),
        )
        return Writer(compacting_writer, (config,), log)

    loop = KillLoop(
        writer, logs, children=3, in_flight=RANDOM_KILLS, min_acks=20, acks_per_kill=(1, 2), rng=rng
    )
    figures = loop.run()
    ledger = read_ledger(figures.logs)
    store = spec.open()
    audit = audit_conversations(store, CONVERSATIONS, ledger, max_tokens=20)
    assert isinstance(store, FileStore)
    assert files_differ(store) == []
    left = temporary_files(Path(spec.location))
    print(
        f"\n[FileStore kill -9 loop] {figures.describe()} attempts={len(ledger.attempted)} "
        f"lost={len(audit.lost)} duplicated={len(audit.duplicated)} stored={audit.stored} "
        f"inconsistencies={len(audit.problems)} temporary-files-left={len(left)} "
        f"writer-errors={len(figures.crashed)}"
    )
    assert not figures.crashed, "a writer failed by itself:\n" + "\n".join(
        f"{log} exit {code}:\n{tail}" for log, code, tail in figures.crashed[:3]
    )
    assert not figures.timed_out, f"safety timeout: {figures.describe()}"
    assert figures.in_flight >= RANDOM_KILLS and len(ledger.acked) >= 20, figures.describe()
    audit.assert_clean()
    assert left == []


# --------------------------------------------------------------------------- planted lock files


@pytest.fixture
def planted(tmp_path: Path) -> Iterator[tuple[FileStore, Path]]:
    store = FileStore(tmp_path / "store")
    store.save("ns", _entry())
    yield store, tmp_path


def _entry() -> Any:
    from firefly_orm.entry import MemoryEntry

    return MemoryEntry(key="k", content="v")


@pytest.mark.parametrize("dangling", [False, True])
def test_a_symlinked_lock_file_is_refused_with_a_clear_error(
    planted: tuple[FileStore, Path], dangling: bool
) -> None:
    store, root = planted
    target = root / "victim.txt"
    if not dangling:
        target.write_text("precious")
    lock = Path(str(store.path_for("ns")) + ".lock")
    lock.unlink()
    os.symlink(target, lock)
    data = store.path_for("ns").read_bytes()
    refused = 0
    for call in (
        lambda: store.load("ns"),
        lambda: store.save("ns", _entry()),
        lambda: store.delete("ns", "x"),
        lambda: store.clear("ns"),
        lambda: store.namespaces,
    ):
        with pytest.raises(StoreError) as info:
            call()
        assert str(lock) in str(info.value) and "symbolic link" in str(info.value)
        refused += 1
    print(f"\n[FileStore planted lock, dangling={dangling}] refused={refused} of 5 calls")
    assert store.path_for("ns").read_bytes() == data
    assert target.exists() == (not dangling)
    if not dangling:
        assert target.read_text() == "precious"
