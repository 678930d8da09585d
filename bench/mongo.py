"""MongoDB rows: W1-W3, W5/W5b, W6 (recall) and W7 (artifact CAS writes) against pymongo.

The server: ``--mongo-url``, else ``$FIREFLY_ORM_TEST_MONGO_URL``, else a SecantusDB
server (the MongoDB wire-protocol server the test suite uses here) started as a
subprocess on a free loopback port and stopped at the end; without any of them
the rows are skipped and the reason printed.  Each workload gets its own
databases (``ffbench_<run>_<workload>`` for the library, ``..._raw`` for the
baseline), dropped at the end, also on failure (a SecantusDB subprocess takes
its storage with it instead).

The baseline (:class:`RawMongo`) is a strong hand-written pymongo design storing
the same logical data: a head document per conversation (``_id`` = the
conversation id: next turn id, running token total, turn count, version) and one
document per turn (prompt, response, raw messages, timestamp, token estimate)
under a unique ``(conversation, turn)`` index.  ``add_turn`` is one transaction
when the server supports them (the library detects the same and uses them too),
else plain writes: read the head, insert the turn, evict the oldest turns FIFO
while over budget (reading them in batches of 8), write the head.  Both sides
keep the driver's default write concern.

Besides time, both clients count the documents the server hands back (``find``,
``aggregate`` and ``getMore`` batches, through pymongo command monitoring), so
W5 also reports the documents read per ``add_turn`` early and late in a long
conversation.  On SecantusDB only single-field equality queries use an index
(every other query scans), so latency growth there says more about the server
than about the client; the documents-read figures do not depend on it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from importlib.metadata import version
from typing import Any

from bench.cells import LAST_N
from bench.common import (
    UNLIMITED,
    W5_KEPT_TURNS,
    Row,
    Sizes,
    Skip,
    TextPool,
    budget_for_turns,
    estimate_tokens,
    median,
)
from bench.ours import Ours
from bench.workloads import _check_same, _new_ids, _pair_call, growth_row
from firefly_orm.testing._secantus import answers_ping

#: Where a MongoDB URL is looked up when ``--mongo-url`` is not given.
MONGO_URL_VAR = "FIREFLY_ORM_TEST_MONGO_URL"
_EVICT_BATCH = 8
#: Where the server came from when the bench started one (its storage dies with it).
_SUBPROCESS = "SecantusDB subprocess"

Turn = tuple[str, str, list[dict[str, str]]]


# --------------------------------------------------------------------------- counting


def documents_listener() -> Any:
    """A pymongo command listener whose ``count`` is the documents read so far."""
    from firefly_orm.testing._mongo_reads import DocumentsRead

    return DocumentsRead()


# --------------------------------------------------------------------------- the server


@contextlib.contextmanager
def _secantus() -> Iterator[str]:
    """A SecantusDB server for this run; :class:`Skip` when it does not start."""
    from firefly_orm.testing._secantus import ServerDidNotStart, secantus_server

    with contextlib.ExitStack() as stack:
        try:
            url = stack.enter_context(secantus_server())
        except ServerDidNotStart as exc:
            raise Skip(str(exc)[-500:]) from None
        yield url


@contextlib.contextmanager
def mongo_server(url: str | None) -> Iterator[tuple[str, str]]:
    """Yield ``(url, where it came from)``; raise :class:`Skip` when there is none."""
    from firefly_orm.errors import redact_url

    source = "--mongo-url"
    if not url:
        url, source = os.environ.get(MONGO_URL_VAR, "").strip(), f"${MONGO_URL_VAR}"
    if url:
        error = answers_ping(url, 3000)
        if error is not None:
            raise Skip(f"MongoDB at {redact_url(url)} ({source}) does not answer: {error}")
        yield url, source
        return
    if importlib.util.find_spec("secantus") is None:
        raise Skip(
            f"no MongoDB server: pass --mongo-url, set ${MONGO_URL_VAR} or install "
            "SecantusDB (the dev extra)"
        )
    with _secantus() as started:
        yield started, _SUBPROCESS


# --------------------------------------------------------------------------- the baseline


class RawMongo:
    """Raw pymongo (sync): head document + turn documents, one transaction per turn."""

    name = "pymongo"

    def __init__(self, url: str, database: str, *, max_tokens: int = UNLIMITED) -> None:
        from pymongo import ASCENDING, MongoClient

        self.reads = documents_listener()
        self.client: Any = MongoClient(url, tz_aware=True, event_listeners=[self.reads])
        self.db = self.client[database]
        self.max_tokens = max_tokens
        self.db.turns.create_index(
            [("conversation", ASCENDING), ("turn", ASCENDING)], name="ux_turn", unique=True
        )
        hello = self.client.admin.command("hello")
        self.transactions = "logicalSessionTimeoutMinutes" in hello and (
            "setName" in hello or hello.get("msg") == "isdbgrid"
        )

    def _in_transaction(self, fn: Callable[[Any], None]) -> None:
        if not self.transactions:
            fn(None)
            return
        with self.client.start_session() as session:
            session.with_transaction(fn)

    def add_turn(self, cid: str, user: str, assistant: str, messages: list[dict[str, str]]) -> None:
        estimate = estimate_tokens(user, assistant)
        now = datetime.now(UTC)

        def body(session: Any) -> None:
            head = self.db.heads.find_one({"_id": cid}, session=session)
            turn, total, count, version = (
                (head["next_turn"], head["total_tokens"], head["turn_count"], head["version"])
                if head
                else (0, 0, 0, 0)
            )
            self.db.turns.insert_one(
                {
                    "conversation": cid,
                    "turn": turn,
                    "token_estimate": estimate,
                    "created_at": now,
                    "user_prompt": user,
                    "assistant_response": assistant,
                    "raw_messages": messages,
                },
                session=session,
            )
            total += estimate
            count += 1
            evicted: list[int] = []
            while total > self.max_tokens and count > 1:
                oldest = list(
                    self.db.turns.find(
                        {"conversation": cid, "turn": {"$gt": evicted[-1] if evicted else -1}},
                        {"turn": 1, "token_estimate": 1},
                        session=session,
                    )
                    .sort("turn", 1)
                    .limit(_EVICT_BATCH)
                )
                if not oldest:
                    break
                for doc in oldest:
                    if total <= self.max_tokens or count <= 1:
                        break
                    evicted.append(doc["turn"])
                    total -= doc["token_estimate"]
                    count -= 1
            if evicted:
                self.db.turns.delete_many(
                    {"conversation": cid, "turn": {"$gte": evicted[0], "$lte": evicted[-1]}},
                    session=session,
                )
            fields = {"next_turn": turn + 1, "total_tokens": total, "turn_count": count}
            self.db.heads.update_one(
                {"_id": cid, "version": version} if head else {"_id": cid},
                {"$set": fields, "$inc": {"version": 1}},
                upsert=head is None,
                session=session,
            )

        self._in_transaction(body)

    def history(self, cid: str, budget: int | None) -> list[Any]:
        """Raw messages of the whole history, or of the newest turns within ``budget``."""
        projection = {"raw_messages": 1, "token_estimate": 1, "_id": 0}
        if budget is None:
            docs = list(self.db.turns.find({"conversation": cid}, projection).sort("turn", 1))
        else:
            docs = []
            running = 0
            with self.db.turns.find({"conversation": cid}, projection).sort("turn", -1) as cur:
                for doc in cur:
                    running += doc["token_estimate"]
                    if running > budget:
                        break
                    docs.append(doc)
            docs.reverse()
        return [m for doc in docs for m in doc["raw_messages"]]

    def wm_set(self, scope: str, key: str, value: Any) -> None:
        """Upsert one working-memory fact (value, importance, update time)."""
        self.db.facts.update_one(
            {"_id": _fact_id(scope, key)},
            {"$set": {"value": value, "importance": 0.5, "updated_at": datetime.now(UTC)}},
            upsert=True,
        )

    def wm_get(self, scope: str, key: str) -> Any:
        doc = self.db.facts.find_one({"_id": _fact_id(scope, key)}, {"value": 1})
        return None if doc is None else doc["value"]

    def wm_delete(self, scope: str, key: str) -> None:
        self.db.facts.delete_one({"_id": _fact_id(scope, key)})

    def fill(self, cid: str, turns: list[Turn]) -> None:
        """Untimed: store ``turns`` as the whole conversation in one go."""
        now = datetime.now(UTC)
        rows = [
            {
                "conversation": cid,
                "turn": n,
                "token_estimate": estimate_tokens(user, assistant),
                "created_at": now,
                "user_prompt": user,
                "assistant_response": assistant,
                "raw_messages": messages,
            }
            for n, (user, assistant, messages) in enumerate(turns)
        ]
        self.db.turns.insert_many(rows)
        self.db.heads.insert_one(
            {
                "_id": cid,
                "next_turn": len(rows),
                "total_tokens": sum(r["token_estimate"] for r in rows),
                "turn_count": len(rows),
                "version": 1,
            }
        )

    def durability(self) -> dict[str, Any]:
        return {"write_concern": self.db.write_concern.document, "transactions": self.transactions}

    def close(self) -> None:
        self.client.close()


def _fact_id(scope: str, key: str) -> dict[str, str]:
    """A working-memory fact's ``_id`` (both baselines): namespace and key."""
    return {"namespace": f"working:{scope}", "key": key}


class MinimalMongo:
    """Minimal hand-written pymongo: one document per message, one per key.

    Appending a turn is one ``insert_many`` of its messages; reading sorts by
    ``_id`` (ObjectIds increase within a client) under a ``(conversation, _id)``
    index, the last ``n`` with ``sort(-1).limit(n)``; a key is one document
    whose ``_id`` is (namespace, key): ``replace_one(upsert=True)``,
    ``find_one``, ``delete_one``.  The driver's default write concern.
    """

    name = "pymongo"

    def __init__(self, url: str, database: str) -> None:
        from pymongo import ASCENDING, MongoClient

        self.client: Any = MongoClient(url, tz_aware=True)
        self.db = self.client[database]
        self.db.messages.create_index([("conversation", ASCENDING), ("_id", ASCENDING)])

    def append(self, cid: str, user: str, assistant: str, messages: list[dict[str, Any]]) -> None:
        self.db.messages.insert_many([{"conversation": cid, "message": m} for m in messages])

    def read_all(self, cid: str) -> list[Any]:
        cursor = self.db.messages.find({"conversation": cid}, {"message": 1}).sort("_id", 1)
        return [doc["message"] for doc in cursor]

    def read_last(self, cid: str, n: int) -> list[Any]:
        cursor = (
            self.db.messages.find({"conversation": cid}, {"message": 1}).sort("_id", -1).limit(n)
        )
        return [doc["message"] for doc in reversed(list(cursor))]

    def kv_set(self, scope: str, key: str, value: Any) -> None:
        self.db.kv.replace_one({"_id": _fact_id(scope, key)}, {"value": value}, upsert=True)

    def kv_get(self, scope: str, key: str) -> Any:
        doc = self.db.kv.find_one({"_id": _fact_id(scope, key)})
        return None if doc is None else doc["value"]

    def kv_delete(self, scope: str, key: str) -> None:
        self.db.kv.delete_one({"_id": _fact_id(scope, key)})

    def close(self) -> None:
        self.client.close()


# --------------------------------------------------------------------------- the library


class MongoOurs(Ours):
    """The library on :class:`~firefly_orm.mongo.MongoDBStore`, its client counting reads."""

    def __init__(self, url: str, database: str, *, max_tokens: int | None = None) -> None:
        from pymongo import AsyncMongoClient

        from firefly_orm.bridges._loop_thread import shared_loop
        from firefly_orm.mongo import MongoDBStore

        self.reads = documents_listener()

        async def new_client() -> Any:  # born on the loop the store runs its I/O on
            return AsyncMongoClient(url, tz_aware=True, event_listeners=[self.reads])

        self.client = shared_loop().call(new_client())
        super().__init__(MongoDBStore(client=self.client, database=database), max_tokens=max_tokens)

    def fill(self, cid: str, turns: list[Turn]) -> None:
        """Untimed: store ``turns`` as the whole conversation (one import transaction)."""
        data = {
            "turns": [
                {"turn_id": n, "user_prompt": u, "assistant_response": a, "raw_messages": m}
                for n, (u, a, m) in enumerate(turns)
            ]
        }
        self.writer.import_conversation(data, conversation_id=cid)

    def durability(self) -> dict[str, Any]:
        store = self.store
        store.initialize()
        return {
            "write_concern": self.client[store.database_name].write_concern.document,
            "transactions": store.uses_transactions,
        }

    def close(self) -> None:
        from firefly_orm.bridges._loop_thread import shared_loop

        try:
            self.store.close()
        finally:
            shared_loop().call(self.client.close())


# --------------------------------------------------------------------------- workloads


def warm_up(ours: MongoOurs, base: RawMongo, pool: TextPool) -> None:
    """Connect, create the indexes, run each conversation operation once (untimed)."""
    cid = "warmup-" + uuid.uuid4().hex
    for _ in range(3):
        user, assistant, messages = pool.turn()
        ours.add_turn(cid, user, assistant, messages)
        base.add_turn(cid, user, assistant, messages)
    ours.history(cid, None)
    base.history(cid, None)


def w5_mongo(
    make_pair: Callable[..., tuple[MongoOurs, RawMongo]],
    sizes: Sizes,
    pool: TextPool,
    *,
    evict: bool,
) -> Row:
    """W5 / W5b on MongoDB: add_turn at turn 10 vs the late turn, and documents read.

    The long conversation is grown to ``long_turn - 10`` turns in one untimed
    step on each side (the library's ``import_conversation``, a bulk insert for
    the baseline; with eviction one untimed ``add_turn`` then trims both to the
    budget), then measured exactly like the SQL W5: 22 turns of it interleaved
    with turns 5-15 of two fresh conversations.
    """
    budget = budget_for_turns(pool.turn_tokens, W5_KEPT_TURNS) if evict else None
    ours, base = make_pair("w5" if evict else "w5b", max_tokens=budget)
    try:
        warm_up(ours, base, pool)
        cid = uuid.uuid4().hex
        grown = [pool.turn() for _ in range(sizes.long_turn - 10)]
        ours.fill(cid, grown)
        base.fill(cid, grown)
        if evict:  # untimed: the first turn trims the imported history to the budget
            user, assistant, messages = pool.turn()
            ours.add_turn(cid, user, assistant, messages)
            base.add_turn(cid, user, assistant, messages)
        fresh = _new_ids(2)
        for short in fresh:  # untimed: turns 0..4 of two fresh conversations
            for _ in range(5):
                user, assistant, messages = pool.turn()
                ours.add_turn(short, user, assistant, messages)
                base.add_turn(short, user, assistant, messages)
        times: dict[str, list[float]] = {k: [] for k in ("eo", "eb", "lo", "lb")}
        docs: dict[str, list[int]] = {k: [] for k in ("eo", "eb", "lo", "lb")}

        def timed_turn(step: int, conversation: str, late: bool) -> None:
            user, assistant, messages = pool.turn()
            ours_before, base_before = ours.reads.count, base.reads.count
            o, b, _, _ = _pair_call(
                step, ours.add_turn, base.add_turn, conversation, user, assistant, messages
            )
            side = "l" if late else "e"
            times[side + "o"].append(o)
            times[side + "b"].append(b)
            docs[side + "o"].append(ours.reads.count - ours_before)
            docs[side + "b"].append(base.reads.count - base_before)

        for step in range(22):
            timed_turn(step, cid, late=True)
            timed_turn(step + 1, fresh[step // 11], late=False)
        stored = len(grown) + (1 if evict else 0) + 22
        kept = len(ours.history(cid, None)) // 2
        expected = W5_KEPT_TURNS if evict else stored
        _check_same("W5 mongo", ours.history(cid, None), base.history(cid, None), 2 * expected)
        return growth_row(
            "mongo",
            sizes,
            evict,
            (times["eo"], times["lo"]),
            (times["eb"], times["lb"]),
            ours_docs_read_turn10=median([float(n) for n in docs["eo"]]),
            **{
                f"ours_docs_read_turn{sizes.long_turn}": median([float(n) for n in docs["lo"]]),
                f"baseline_docs_read_turn{sizes.long_turn}": median([float(n) for n in docs["lb"]]),
            },
            baseline_docs_read_turn10=median([float(n) for n in docs["eb"]]),
            ours_docs_read_max=max(docs["eo"] + docs["lo"]),
            turns_kept=kept,
        )
    finally:
        ours.close()
        base.close()


# --------------------------------------------------------------------------- the rows


def _w5_row(
    runner: Any,
    make_pair: Callable[..., tuple[MongoOurs, RawMongo]],
    sizes: Sizes,
    pool: TextPool,
    evict: bool,
) -> None:
    what = "W5 long conversation" + ("" if evict else " without eviction")
    row = runner.attempt(f"mongo: {what}", lambda: w5_mongo(make_pair, sizes, pool, evict=evict))
    if row is None:
        return
    late = sizes.long_turn
    runner.log(
        f"  documents read per add_turn (median, turn 10 -> turn {late}): ours "
        f"{row.detail['ours_docs_read_turn10']:g} -> {row.detail[f'ours_docs_read_turn{late}']:g}"
        f", pymongo {row.detail['baseline_docs_read_turn10']:g} -> "
        f"{row.detail[f'baseline_docs_read_turn{late}']:g}"
    )


def mongo_entries(url: str, database: str, databases: list[str]) -> list[Any]:
    """The W1-W3 implementations on MongoDB: minimal pymongo, same-work pymongo, ours.

    Each gets its own database named after ``database`` (appended to
    ``databases``, which the caller drops).
    """
    from bench.cells import CELLS, MINIMAL, OURS, SAME_WORK, OursCells, SameWork, entry

    every = frozenset(CELLS)
    budget = budget_for_turns(TextPool(0).turn_tokens, LAST_N // 2)

    def named(suffix: str) -> str:
        databases.append(f"{database}{suffix}")
        return databases[-1]

    return [
        entry(
            "raw minimal (pymongo)", MINIMAL, every, lambda: MinimalMongo(url, named("_minimal"))
        ),
        entry(
            "raw same-work (pymongo)",
            SAME_WORK,
            every,
            lambda: SameWork(RawMongo(url, named("_raw")), budget),
        ),
        entry("firefly_orm", OURS, every, lambda: OursCells(MongoOurs(url, named("")), budget)),
    ]


def _cells(runner: Any, server: str, run_id: str, databases: list[str]) -> None:
    """W1-W3 on MongoDB (sync): every implementation of :func:`mongo_entries`, compared."""
    from bench.cells import OURS, SAME_WORK, Comparison, close_sync, run_sync

    entries = runner.attempt(
        "mongo: set-up W1-W3", lambda: mongo_entries(server, f"ffbench_{run_id}_cells", databases)
    )
    if entries is None:
        return
    try:
        impls = {e.role: e.impl.impl for e in entries if e.role in (OURS, SAME_WORK) and e.impl}
        if len(impls) == 2:
            runner.meta.setdefault("durability", {})["mongo"] = runner.attempt(
                "mongo: durability settings",
                lambda: {
                    "ours": impls[OURS].durability(),
                    "baseline": impls[SAME_WORK].durability(),
                },
            )
        comparison = Comparison("mongo", "sync", entries, runner.sizes, runner.seed, runner.log)
        results = runner.attempt(
            f"mongo: W1-W3 ({len(entries)} implementations, {runner.sizes.rounds} rounds)",
            lambda: run_sync(comparison),
        )
        runner.cells.extend(results or [])
        runner.errors.extend(comparison.errors)
    finally:
        close_sync(entries, runner.log)


def _w6_rows(runner: Any, server: str, run_id: str, databases: list[str]) -> None:
    """W6 on MongoDB: selective queries only.

    W6b is left out: on SecantusDB a query whose words are in most documents
    takes seconds on either side (raw pymongo, measured: 2 s at 10k entries,
    37 s at 100k).
    """
    from bench.recall import MongoRecallOurs, RawMongoRecall, w6_recall

    def make_recall_pair(label: str) -> tuple[MongoRecallOurs, RawMongoRecall]:
        name = f"ffbench_{run_id}_{label}"
        databases.extend((name, name + "_raw"))
        return MongoRecallOurs(server, name), RawMongoRecall(server, name + "_raw")

    runner.attempt(
        "mongo: W6 long-term recall",
        lambda: w6_recall(
            make_recall_pair, runner.sizes, runner.seed, "mongo", runner.log, common=False
        ),
    )


def _w7_rows(runner: Any, server: str, run_id: str, databases: list[str], pool: TextPool) -> None:
    """W7 on MongoDB: artifact CAS writes and reads against pymongo (sync only)."""
    from bench.artifacts import MongoOursArtifacts, RawMongoArtifacts, w7_artifacts

    def make_pair(label: str) -> tuple[MongoOursArtifacts, RawMongoArtifacts]:
        name = f"ffbench_{run_id}_{label}"
        databases.extend((name, name + "_raw"))
        return MongoOursArtifacts(server, name), RawMongoArtifacts(server, name + "_raw")

    def durability(ours: MongoOursArtifacts, base: RawMongoArtifacts) -> dict[str, Any]:
        return {"ours": ours.durability(), "baseline": base.durability()}

    runner.attempt(
        "mongo: W7 artifact CAS write / read",
        lambda: w7_artifacts(make_pair, runner.sizes, pool, "mongo", runner.seed, durability),
    )


def run_mongo(runner: Any, url: str | None) -> None:
    """Run the MongoDB rows through ``runner`` (a :class:`bench.runner.Runner`).

    Raises:
        Skip: No MongoDB server is available (the message says why).
    """
    from pymongo import MongoClient

    from firefly_orm.errors import redact_url

    pool = TextPool(runner.seed)
    with mongo_server(url) as (server, source):
        run_id = uuid.uuid4().hex[:8]
        databases: list[str] = []
        runner.log(f"mongo: {redact_url(server)} ({source}), databases ffbench_{run_id}_*")

        def make_pair(label: str, max_tokens: int | None = None) -> tuple[MongoOurs, RawMongo]:
            name = f"ffbench_{run_id}_{label}"
            databases.extend((name, name + "_raw"))
            ours = MongoOurs(server, name, max_tokens=max_tokens)
            base = RawMongo(server, name + "_raw", max_tokens=max_tokens or UNLIMITED)
            return ours, base

        admin: MongoClient[dict[str, Any]] = MongoClient(server)
        try:
            runner.meta["mongo"] = {
                "url": redact_url(server),
                "source": source,
                "server_version": admin.server_info().get("version"),
                "pymongo": version("pymongo"),
                "beanie": version("beanie"),
            }
            if runner.wants("W1", "W2", "W3"):
                _cells(runner, server, run_id, databases)
            for evict, workload in ((True, "W5"), (False, "W5b")):
                if runner.wants(workload):
                    _w5_row(runner, make_pair, runner.sizes, pool, evict)
            if runner.wants("W6"):
                _w6_rows(runner, server, run_id, databases)
            if runner.wants("W7"):
                _w7_rows(runner, server, run_id, databases, pool)
        finally:
            if source == _SUBPROCESS:  # its storage is deleted with it (dropping is slow)
                runner.log(f"mongo: {len(databases)} bench databases go with the server")
            else:
                for name in databases:
                    admin.drop_database(name)
                runner.log(f"mongo: dropped {len(databases)} bench databases")
            admin.close()
