"""Shared helpers of the fault-injection suite: child writers, kill -9, audits, contention.

* :class:`StoreSpec`: how a child process (or the parent) opens a store on shared data.
* Child writers: :func:`add_turns_forever` (also ``python harness.py add-turns '<json>'``)
  adds turns until it is killed, logging each attempt and each ACKNOWLEDGED turn
  (``add_turn`` returned) to its own file, fsynced.  :func:`read_ledger` reads the logs.
* :class:`KillLoop`: keeps N writers running (forks of a fork server that imported
  the library once), SIGKILLs each after a number of acknowledged operations, at a
  random point of the next one, and restarts it (a new generation, with its own
  log); it ends after a number of kills that landed with an operation in flight.
* :func:`audit_conversations`: what the store holds against the ledger: acknowledged
  turns lost, turns duplicated (live and archived, or twice), turns nobody attempted,
  head ``turn_count`` / ``total_tokens`` / ``next_turn_id`` and the summary chain.
* Contention: :func:`run_threads` of ``add_turn`` calls, :func:`contend` in other
  processes, a :class:`Tally` of what they gave.

Servers to restart and kill are in :mod:`faults.servers`.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HARNESS = Path(__file__).resolve()

#: Chain summaries: one batch of evicted turn ids per summary made, batches joined by ";".
BATCH_SEPARATOR, ID_SEPARATOR = ";", ","


# --------------------------------------------------------------------------- stores


@dataclass(frozen=True)
class StoreSpec:
    """Where a store's data lives, so that any process can open a store on it.

    Attributes:
        kind: ``sqlite`` (``location`` = file), ``file`` (directory), ``postgres``
            (URL; ``name`` = schema) or ``mongo`` (URL; ``name`` = database).
        location: The path or URL.
        name: The schema or database of the test.
    """

    kind: str
    location: str
    name: str | None = None

    def open(self, **options: Any) -> Any:
        """A new store object on the data (``options`` go to the store's constructor)."""
        if self.kind == "sqlite":
            from firefly_orm.sql import SQLiteStore

            return SQLiteStore(self.location, **options)
        if self.kind == "file":
            from firefly_orm.file_store import FileStore

            return FileStore(self.location, **options)
        if self.kind == "postgres":
            from firefly_orm.sql import PostgreSQLStore

            options.setdefault("pool_size", 2)
            options.setdefault("pool_min_size", 0)
            return PostgreSQLStore(self.location, schema_name=self.name, **options)
        if self.kind == "mongo":
            from firefly_orm.mongo import MongoDBStore

            return MongoDBStore(self.location, database=self.name or "firefly_faults", **options)
        raise ValueError(f"unknown store kind {self.kind!r}")


def close_store(store: Any) -> None:
    """Close a store that has a ``close`` method."""
    close = getattr(store, "close", None)
    if close is not None:
        close()


# --------------------------------------------------------------------------- summaries


def chain_summarizer(turns: Sequence[Any]) -> str:
    """The previous summary (turn id -1), then a batch: the ids of the evicted turns."""
    from firefly_orm.conversation import SUMMARY_TURN_ID

    previous = [t.assistant_response for t in turns if t.turn_id == SUMMARY_TURN_ID]
    batch = ID_SEPARATOR.join(str(t.turn_id) for t in turns if t.turn_id != SUMMARY_TURN_ID)
    return BATCH_SEPARATOR.join([*previous, batch])


def summary_ids(summary: str | None) -> list[int]:
    """The turn ids a :func:`chain_summarizer` summary covers, in order."""
    if not summary:
        return []
    return [
        int(part)
        for batch in summary.split(BATCH_SEPARATOR)
        for part in batch.split(ID_SEPARATOR)
        if part
    ]


def summary_batches(summary: str | None) -> int:
    """How many summaries a :func:`chain_summarizer` summary chains (evicting commits)."""
    return summary.count(BATCH_SEPARATOR) + 1 if summary else 0


def response_for(n: int) -> str:
    """An assistant response whose length varies with ``n`` (1 to 4 words)."""
    return " ".join(["ok"] * (1 + n % 4))


# --------------------------------------------------------------------------- the ledger


@dataclass
class Ledger:
    """What writers attempted, and which turns ``add_turn`` acknowledged.

    Attributes:
        attempted: Every prompt a writer passed to ``add_turn``.
        acked: prompt -> (conversation id, turn id) for each call that returned.
    """

    attempted: set[str] = field(default_factory=set)
    acked: dict[str, tuple[str, int]] = field(default_factory=dict)

    def attempt(self, prompt: str) -> None:
        """Record that ``prompt`` is about to be added."""
        self.attempted.add(prompt)

    def ack(self, prompt: str, conversation_id: str, turn_id: int) -> None:
        """Record that the turn of ``prompt`` was acknowledged under ``turn_id``."""
        self.acked[prompt] = (conversation_id, turn_id)

    def merge(self, other: Ledger) -> None:
        """Add ``other``'s records to this ledger."""
        self.attempted |= other.attempted
        self.acked.update(other.acked)


ATTEMPT, ACK = "T", "A"


def read_ledger(paths: Iterable[Path]) -> Ledger:
    """The ledger written by child writers to ``paths`` (a torn last line is ignored)."""
    ledger = Ledger()
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            parts = line.split("\t")
            if parts[0] == ATTEMPT and len(parts) == 2:
                ledger.attempt(parts[1])
            elif parts[0] == ACK and len(parts) == 4:
                ledger.ack(parts[3], parts[1], int(parts[2]))
    return ledger


# --------------------------------------------------------------------------- child writers


@dataclass(frozen=True)
class WriterConfig:
    """What a child writer does (passed to it as JSON)."""

    store: StoreSpec
    log: str
    tag: str
    conversations: tuple[str, ...]
    max_tokens: int
    seed: int

    def to_json(self) -> str:
        """The JSON a child reads back with :meth:`from_json`."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WriterConfig:
        """The config of :meth:`to_json`."""
        raw = json.loads(text)
        raw["store"] = StoreSpec(**raw["store"])
        raw["conversations"] = tuple(raw["conversations"])
        return cls(**raw)


def conversation_memory(store: Any, max_tokens: int, summarizer: Any = chain_summarizer) -> Any:
    """The memory every writer of the suite uses: evicts, archives, chain summaries."""
    from firefly_orm.conversation import ConversationMemory

    return ConversationMemory(
        store=store,
        max_tokens=max_tokens,
        summarize_threshold=0,
        summarizer=summarizer,
        keep_evicted=True,
    )


def add_turns_forever(config: WriterConfig) -> None:
    """Add turns to the shared conversations until killed, logging attempts and acks.

    Each attempt is logged before ``add_turn`` (a plain write: it survives SIGKILL),
    each acknowledged turn after it returns, fsynced.
    """
    store = config.store.open()
    memory = conversation_memory(store, config.max_tokens)
    rng = random.Random(config.seed)
    fd = os.open(config.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    n = 0
    while True:
        conversation_id = rng.choice(config.conversations)
        prompt = f"{config.tag}:{n}"
        os.write(fd, f"{ATTEMPT}\t{prompt}\n".encode())
        turn = memory.add_turn(conversation_id, prompt, response_for(n))
        os.write(fd, f"{ACK}\t{conversation_id}\t{turn.turn_id}\t{prompt}\n".encode())
        os.fsync(fd)
        n += 1


# --------------------------------------------------------------------------- contention


class CountingSummarizer:
    """:func:`chain_summarizer`, sleeping ``sleep`` seconds first (a slow model); counts calls."""

    def __init__(self, sleep: float = 0.0) -> None:
        self.sleep = sleep
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, turns: Sequence[Any]) -> str:
        with self._lock:
            self.calls += 1
        if self.sleep:
            time.sleep(self.sleep)
        return chain_summarizer(turns)


@dataclass
class Tally:
    """What a batch of ``add_turn`` calls gave: acknowledged, refused, failed."""

    calls: int = 0
    acked: int = 0
    refused: int = 0
    errors: list[str] = field(default_factory=list)
    #: Seconds each call took.
    latencies: list[float] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, outcome: str, detail: str = "", seconds: float = 0.0) -> None:
        """Count one call's outcome: ``acked``, ``refused`` or ``error`` (with ``detail``)."""
        with self._lock:
            self.calls += 1
            self.latencies.append(seconds)
            if outcome == "acked":
                self.acked += 1
            elif outcome == "refused":
                self.refused += 1
            else:
                self.errors.append(detail)

    def merge(self, other: Tally) -> None:
        """Add ``other``'s counts."""
        with self._lock:
            self.calls += other.calls
            self.acked += other.acked
            self.refused += other.refused
            self.errors.extend(other.errors)
            self.latencies.extend(other.latencies)

    def latency(self, quantile: float) -> float:
        """The ``quantile`` (0..1) of the calls' durations, in seconds."""
        if not self.latencies:
            return 0.0
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))]


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__module__}.{type(exc).__name__}: {exc}"


def add_turn_calls(
    memory: Any, conversation_id: str, tag: str, calls: int, ledger: Ledger, tally: Tally
) -> None:
    """``calls`` sync ``add_turn`` calls with prompts ``<tag>:<n>``, recorded."""
    from firefly_orm.errors import ConcurrencyError

    for n in range(calls):
        prompt = f"{tag}:{n}"
        ledger.attempt(prompt)
        started = time.monotonic()
        try:
            turn = memory.add_turn(conversation_id, prompt, response_for(n))
        except ConcurrencyError:
            tally.count("refused", seconds=time.monotonic() - started)
            continue
        except Exception as exc:
            tally.count("error", _describe(exc), time.monotonic() - started)
            continue
        ledger.ack(prompt, conversation_id, turn.turn_id)
        tally.count("acked", seconds=time.monotonic() - started)


async def async_add_turn_calls(
    memory: Any, conversation_id: str, tag: str, calls: int, ledger: Ledger, tally: Tally
) -> None:
    """The async form of :func:`add_turn_calls` (``async_add_turn``)."""
    from firefly_orm.errors import ConcurrencyError

    for n in range(calls):
        prompt = f"{tag}:{n}"
        ledger.attempt(prompt)
        started = time.monotonic()
        try:
            turn = await memory.async_add_turn(conversation_id, prompt, response_for(n))
        except ConcurrencyError:
            tally.count("refused", seconds=time.monotonic() - started)
            continue
        except Exception as exc:
            tally.count("error", _describe(exc), time.monotonic() - started)
            continue
        ledger.ack(prompt, conversation_id, turn.turn_id)
        tally.count("acked", seconds=time.monotonic() - started)


def run_threads(
    memory: Any, conversation_id: str, tag: str, threads: int, calls: int, ledger: Ledger
) -> Tally:
    """``threads`` threads each making ``calls`` :func:`add_turn_calls`; their tally."""
    tally = Tally()
    workers = [
        threading.Thread(
            target=add_turn_calls,
            args=(memory, conversation_id, f"{tag}t{i}", calls, ledger, tally),
            daemon=True,  # a test that times out must not hang on them
        )
        for i in range(threads)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return tally


@dataclass(frozen=True)
class ContendConfig:
    """What a contending child process does (JSON on its command line)."""

    store: StoreSpec
    result: str
    tag: str
    conversation_id: str
    max_tokens: int
    threads: int
    calls: int
    summary_sleep: float
    go: str

    def to_json(self) -> str:
        """The JSON :meth:`from_json` reads."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ContendConfig:
        """The config of :meth:`to_json`."""
        raw = json.loads(text)
        raw["store"] = StoreSpec(**raw["store"])
        return cls(**raw)


def contend(config: ContendConfig) -> None:
    """A contending child: open the store, say ready, wait for ``go``, run, write the result."""
    store = config.store.open()
    try:
        if hasattr(store, "initialize"):
            store.initialize()
        summarizer = CountingSummarizer(config.summary_sleep)
        memory = conversation_memory(store, config.max_tokens, summarizer)
        Path(config.result + ".ready").touch()
        while not Path(config.go).exists():
            time.sleep(0.002)
        ledger = Ledger()
        tally = run_threads(
            memory, config.conversation_id, config.tag, config.threads, config.calls, ledger
        )
        result = {
            "attempted": sorted(ledger.attempted),
            "acked": {p: list(where) for p, where in ledger.acked.items()},
            "calls": tally.calls,
            "refused": tally.refused,
            "errors": tally.errors,
            "latencies": tally.latencies,
            "summaries": summarizer.calls,
        }
        Path(config.result).write_text(json.dumps(result), encoding="utf-8")
    finally:
        close_store(store)


def read_contend_result(path: Path, ledger: Ledger, tally: Tally) -> int:
    """Merge a contending child's result into ``ledger`` and ``tally``; its summarizer calls."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    for prompt in raw["attempted"]:
        ledger.attempt(prompt)
    for prompt, (cid, turn_id) in raw["acked"].items():
        ledger.ack(prompt, cid, int(turn_id))
    tally.merge(
        Tally(
            calls=raw["calls"],
            acked=len(raw["acked"]),
            refused=raw["refused"],
            errors=list(raw["errors"]),
            latencies=list(raw["latencies"]),
        )
    )
    return int(raw["summaries"])


def spawn_contenders(configs: Sequence[ContendConfig]) -> list[subprocess.Popen[bytes]]:
    """Start one child per config and return once every one is ready (waiting for go)."""
    processes = [
        subprocess.Popen([sys.executable, str(HARNESS), "contend", c.to_json()]) for c in configs
    ]
    deadline = time.monotonic() + 60
    while not all(Path(c.result + ".ready").exists() for c in configs):
        dead = [p.returncode for p in processes if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            for p in processes:
                p.kill()
            raise RuntimeError(f"contending children did not get ready (exit codes {dead})")
        time.sleep(0.01)
    return processes


# --------------------------------------------------------------------------- kill -9


def fork_server() -> Any:
    """The ``forkserver`` multiprocessing context of the suite (``tests/forked.py``).

    Its server process is a fresh interpreter (not a fork of pytest's, which holds
    connections and threads) that imports the library once; each writer is a fork
    of it, with no store, connection or thread of its own until it opens one.
    (Imported here: this file also runs as a script, where ``tests/`` is not on the path.)
    """
    import forked

    return forked.context()


def run_writer(stderr: str, target: Callable[..., None], args: tuple[Any, ...]) -> None:
    """A forked writer's entry point: stderr to its file, stdout away, then ``target(*args)``."""
    err = os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(err, 2)
    os.dup2(null, 1)
    os.close(err)
    os.close(null)
    target(*args)


@dataclass(frozen=True)
class Writer:
    """What one generation of a slot runs: ``target(*args)``, logging to ``log``.

    ``target`` is a module-level function (it is pickled to the fork server) that
    writes until it is killed, and logs ``T<TAB>...`` before each operation and
    ``A<TAB>...`` once it is acknowledged (:func:`add_turns_forever`,
    ``artifact_writer.run``).
    """

    target: Callable[..., None]
    args: tuple[Any, ...]
    log: Path


@dataclass
class Child:
    """One running writer (one generation of a slot) and what the parent saw of its log."""

    process: Any
    log: Path
    stderr: Path
    #: Kill it once it has acknowledged this many operations ...
    kill_after_acks: int
    #: ... and then after this fraction of one of its operations (random phase).
    phase: float
    acks: int = 0
    #: Kind of the last complete line of its log (``T``: an operation in flight).
    last: str = ""
    #: (monotonic time, acks) when the parent first saw an ack of it.
    first_seen: tuple[float, int] | None = None
    kill_at: float | None = None
    #: Whether a log line (without its newline) is an acknowledged operation to count.
    counts: Callable[[bytes], bool] = field(default=lambda line: line.startswith(b"A\t"))
    _offset: int = 0
    _partial: bytes = b""

    def read_log(self, now: float) -> None:
        """Count the acknowledged operations logged since the last look."""
        try:
            with open(self.log, "rb") as file:
                file.seek(self._offset)
                data = file.read()
        except FileNotFoundError:
            return
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            self.last = line.split(b"\t", 1)[0].decode(errors="replace")
            self.acks += self.counts(line)
        if self.acks and self.first_seen is None:
            self.first_seen = (now, self.acks)

    def seconds_per_operation(self, now: float) -> float | None:
        """How long one of its operations takes, as the parent saw it (``None``: unknown yet)."""
        if self.first_seen is None or self.acks <= self.first_seen[1]:
            return None
        seen_at, seen_acks = self.first_seen
        return (now - seen_at) / (self.acks - seen_acks)


@dataclass
class KillFigures:
    """What a :class:`KillLoop` did."""

    started: int = 0
    #: Kills the loop made (each after the child's planned number of acknowledged operations).
    kills: int = 0
    #: Of those, kills that landed with an operation in flight (logged, not acknowledged).
    in_flight: int = 0
    #: Children still running at the end, SIGKILLed too (not counted above).
    final_kills: int = 0
    #: Operations acknowledged by all writers (as counted from their logs).
    acks: int = 0
    seconds: float = 0.0
    #: The safety timeout ended the loop (a hung or very slow machine), not the counts.
    timed_out: bool = False
    #: Children that ended by themselves (an error in a writer): (log, exit code, stderr).
    crashed: list[tuple[str, int, str]] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    def describe(self) -> str:
        """One line for the test's output."""
        return (
            f"kills={self.kills} (in flight {self.in_flight}, +{self.final_kills} at the end) "
            f"writers={self.started} acknowledged={self.acks} seconds={self.seconds:.1f}"
            + (" SAFETY TIMEOUT" if self.timed_out else "")
        )


class KillLoop:
    """SIGKILLs writers a fixed number of times, each after a number of acknowledged operations.

    ``children`` writers run at once (forks of :func:`fork_server`).  Each
    generation is given a number of operations to get acknowledged (uniform in
    ``acks_per_kill``); once its log shows them, it is SIGKILLed after a random
    fraction (``phase``, uniform in 0..1) of one of its own operations as the
    parent measures it, so the kill lands at a random point of the next
    operation, then replaced by a new generation.  A kill with an operation in
    flight (its log ends with an attempt, not an acknowledgement) counts toward
    ``in_flight``.

    The loop ends by itself once ``in_flight`` kills landed in flight and the
    writers acknowledged ``min_acks`` operations: the same work on a slow or a
    fast machine.  ``max_kills`` bounds the kills (kills that missed included),
    ``safety_timeout`` the seconds: only a hung or broken run meets either, and
    the test then fails on the figures; so does a run whose writers fail by
    themselves (the loop stops after ``children`` such failures).  At the end
    every child is SIGKILLed.

    Args:
        make_writer: ``(slot, generation, log path) -> Writer``.
        workdir: Where the logs go.
        counts: Whether a log line (without its newline) is an acknowledged
            operation toward ``min_acks`` and ``acks_per_kill`` (default: every
            ``A`` line).
    """

    def __init__(
        self,
        make_writer: Callable[[int, int, Path], Writer],
        workdir: Path,
        *,
        children: int,
        in_flight: int,
        min_acks: int,
        acks_per_kill: tuple[int, int] = (1, 4),
        max_kills: int | None = None,
        safety_timeout: float = 120.0,
        rng: random.Random | None = None,
        counts: Callable[[bytes], bool] | None = None,
    ) -> None:
        self.make_writer = make_writer
        self.workdir = workdir
        self.children = children
        self.want_in_flight = in_flight
        self.min_acks = min_acks
        self.acks_per_kill = acks_per_kill
        self.max_kills = max_kills if max_kills is not None else 4 * in_flight
        self.safety_timeout = safety_timeout
        self.rng = rng or random.Random()
        self.counts = counts
        self.figures = KillFigures()
        self._generation = 0
        self._context = fork_server()
        #: Seconds per operation of the generations killed so far (the estimate until
        #: a new child has shown its own pace).
        self._pace: list[float] = []

    def _spawn(self, slot: int) -> Child:
        self._generation += 1
        stderr = self.workdir / f"writer-{slot}-{self._generation}.err"
        log = self.workdir / f"writer-{slot}-{self._generation}.log"
        writer = self.make_writer(slot, self._generation, log)
        process = self._context.Process(
            target=run_writer, args=(str(stderr), writer.target, writer.args), daemon=True
        )
        process.start()
        self.figures.started += 1
        self.figures.logs.append(writer.log)
        child = Child(
            process,
            writer.log,
            stderr,
            kill_after_acks=self.rng.randint(*self.acks_per_kill),
            phase=self.rng.random(),
        )
        if self.counts is not None:
            child.counts = self.counts
        return child

    def _kill(self, child: Child, now: float) -> None:
        child.process.kill()
        child.process.join()
        child.read_log(now)
        pace = child.seconds_per_operation(now)
        if pace is not None:
            self._pace.append(pace)
        self.figures.acks += child.acks

    def _crashed(self, child: Child, code: int) -> None:
        child.read_log(time.monotonic())
        self.figures.acks += child.acks
        tail = child.stderr.read_text(errors="replace")[-3000:]
        self.figures.crashed.append((child.log.name, code, tail))

    def _pace_of(self, child: Child, now: float) -> float:
        own = child.seconds_per_operation(now)
        if own is not None:
            return own
        if self._pace:
            return sorted(self._pace)[len(self._pace) // 2]
        return 0.05

    def _done(self, slots: list[Child]) -> bool:
        figures = self.figures
        acks = figures.acks + sum(child.acks for child in slots)
        return figures.in_flight >= self.want_in_flight and acks >= self.min_acks

    def run(self) -> KillFigures:
        """Run the loop; return its figures (the children are all dead afterwards)."""
        figures = self.figures
        started = time.monotonic()
        slots = [self._spawn(slot) for slot in range(self.children)]
        try:
            while (
                not self._done(slots)
                and figures.kills < self.max_kills
                and len(figures.crashed) < self.children  # writers fail: the test will too
            ):
                now = time.monotonic()
                if now - started > self.safety_timeout:
                    figures.timed_out = True
                    break
                for slot, child in enumerate(slots):
                    child.read_log(now)
                    code = child.process.exitcode
                    if code is not None:  # ended by itself: a writer error
                        self._crashed(child, code)
                        slots[slot] = self._spawn(slot)
                    elif child.kill_at is None:
                        if child.acks >= child.kill_after_acks:
                            child.kill_at = now + child.phase * self._pace_of(child, now)
                    elif now >= child.kill_at:
                        self._kill(child, now)
                        figures.kills += 1
                        figures.in_flight += child.last == ATTEMPT
                        slots[slot] = self._spawn(slot)
                time.sleep(0.002)  # a poll of the logs, not a wait for anything in particular
        finally:
            now = time.monotonic()
            for child in slots:
                if child.process.exitcode is None:
                    self._kill(child, now)
                    figures.final_kills += 1
                else:
                    self._crashed(child, child.process.exitcode)
            figures.seconds = time.monotonic() - started
        return figures


# --------------------------------------------------------------------------- audit


@dataclass
class Audit:
    """What the store holds, checked against a :class:`Ledger`.

    Attributes:
        stored: Turns stored (live and archived) over the audited conversations.
        lost: Acknowledged prompts not stored under their conversation and turn id.
        duplicated: Turn ids or prompts stored more than once.
        phantom: Stored prompts no writer attempted.
        unacked_stored: Attempted but unacknowledged turns that are stored
            (committed, then the writer died or the connection broke before it knew).
        problems: Inconsistencies of the heads, orders and summaries.
    """

    stored: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    phantom: list[str] = field(default_factory=list)
    unacked_stored: int = 0
    problems: list[str] = field(default_factory=list)

    def assert_clean(self) -> None:
        """Fail on any loss, duplicate, phantom turn or inconsistency."""
        assert not self.lost, f"{len(self.lost)} acknowledged turn(s) lost: {self.lost[:10]}"
        assert not self.duplicated, f"duplicated: {self.duplicated[:10]}"
        assert not self.phantom, f"turns nobody attempted: {self.phantom[:10]}"
        assert not self.problems, "\n".join(self.problems[:20])


def audit_conversations(
    store: Any,
    conversation_ids: Iterable[str],
    ledger: Ledger,
    *,
    max_tokens: int,
    summarized: bool = True,
) -> Audit:
    """Check what ``store`` holds for ``conversation_ids`` against ``ledger``."""
    from firefly_orm.conversation._rows import HEAD_KEY, conversation_namespace, head_from_entry

    audit = Audit()
    memory = conversation_memory(store, max_tokens)
    found: dict[str, tuple[str, int]] = {}
    for cid in conversation_ids:
        live = memory.get_turns(cid)
        archived = memory.get_archived_turns(cid)
        head = head_from_entry(store.load_by_key(conversation_namespace(cid), HEAD_KEY))
        everything = archived + live
        audit.stored += len(everything)
        live_ids = [t.turn_id for t in live]
        archived_ids = [t.turn_id for t in archived]
        for turn_id, count in Counter(archived_ids + live_ids).items():
            if count > 1:
                audit.duplicated.append(f"{cid}: turn id {turn_id} stored {count} times")
        for prompt, count in Counter(t.user_prompt for t in everything).items():
            if count > 1:
                audit.duplicated.append(f"{cid}: prompt {prompt!r} stored {count} times")
        for turn in everything:
            found.setdefault(turn.user_prompt, (cid, turn.turn_id))
        if live_ids != sorted(set(live_ids)) or archived_ids != sorted(set(archived_ids)):
            audit.problems.append(f"{cid}: turn ids out of order")
        if live_ids and archived_ids and max(archived_ids) >= min(live_ids):
            audit.problems.append(f"{cid}: an archived turn is newer than a live one")
        tokens = sum(t.token_estimate for t in live)
        if (head.turn_count, head.total_tokens) != (len(live), tokens):
            audit.problems.append(
                f"{cid}: head says {head.turn_count} turns / {head.total_tokens} tokens, "
                f"{len(live)} turns / {tokens} tokens are stored"
            )
        if everything and head.next_turn_id <= max(archived_ids + live_ids):
            audit.problems.append(f"{cid}: head next_turn_id {head.next_turn_id} already used")
        if len(live) > 1 and tokens > max_tokens:
            audit.problems.append(f"{cid}: {tokens} live tokens exceed the budget {max_tokens}")
        if summarized and summary_ids(head.summary) != archived_ids:
            audit.problems.append(
                f"{cid}: the summary covers {len(summary_ids(head.summary))} turns, "
                f"{len(archived_ids)} are archived (or in another order)"
            )
    for prompt, where in ledger.acked.items():
        if found.get(prompt) != where:
            audit.lost.append(f"{prompt} (acked as {where}, stored as {found.get(prompt)})")
    audit.phantom = sorted(p for p in found if p not in ledger.attempted)
    audit.unacked_stored = sum(1 for p in found if p not in ledger.acked)
    return audit


# --------------------------------------------------------------------------- child entry point


def main(argv: list[str]) -> int:
    """The suite's child writers.

    ``harness.py add-turns '<WriterConfig JSON>'``: a writer that runs until killed;
    ``harness.py contend '<ContendConfig JSON>'``: a contending process.
    """
    if len(argv) == 2 and argv[0] == "add-turns":
        add_turns_forever(WriterConfig.from_json(argv[1]))
        return 0
    if len(argv) == 2 and argv[0] == "contend":
        contend(ContendConfig.from_json(argv[1]))
        return 0
    print(f"usage: {HARNESS.name} add-turns|contend CONFIG_JSON", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
