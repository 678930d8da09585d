"""W10: a user's conversation list pages in constant time per page (issue 32).

``ConversationMemory.list_conversations(user, limit=20, order=...)`` over one
user's 10,000 conversations (quick: 2,000), beside 2,000 other users'
conversations, on SQLite, PostgreSQL and MongoDB.  The first page, page 50 and
the last page (page 500 at 10k) run back to back, :data:`ROUNDS` rounds; the
row's ratio is, for each deep page, the median over the rounds of its time
over the first page's (paired: a burst of load from elsewhere on the machine
slows the pages of a round alike), the larger of the two; ``ours`` /
``baseline`` the p50 of the slower deep page / of the first page; target
<= 1.5x (a keyset page reads ``limit + 1`` index entries from its cursor on,
at any depth).  One row per order
(``updated_desc``: the head's update time, ``created_asc``: creation time).

**Set-up** (untimed): the heads are written in bulk with the library's own row
mapping (``entry_values`` of the heads ``head_entry`` builds, so the listing
columns of migration 0010 are set as every head write sets them; MongoDB:
``entry_to_document``), in batches of 2,000; PostgreSQL then runs ``ANALYZE``
(what autovacuum does after such a load).  No turns: the list reads heads
only.  The cursors of the deep pages come from walking the whole list once.

Run: ``python -m bench.listing [--quick] [--mongo-url URL] [--json PATH]``
(PostgreSQL: ``$FIREFLY_ORM_BENCH_PG_URL`` / the bench's usual variables).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.common import Row, Skip, postgres_url
from bench.report import table

#: Conversations of the listing user (full, quick), and of the others.
SIZES = {"full": 10_000, "quick": 2_000}
OTHERS = 2_000
LIMIT = 20
ROUNDS = 50
DEEP_PAGE = 50
ORDERS = ("updated_desc", "created_asc")
TARGET = 1.5
USER = "ann"
BATCH = 2_000


def _heads(count: int, prefix: str, users: Callable[[int], str]) -> Iterator[Any]:
    from firefly_orm.conversation._rows import head_entry

    for n in range(count):
        yield head_entry(
            f"{prefix}{n}",
            None,
            next_turn_id=1,
            total_tokens=0,
            turn_count=0,
            summary=None,
            total_messages=0,
            user_id=users(n),
        )


def _all_heads(mine: int) -> Iterator[Any]:
    # Interleaved: the user's heads are spread over the table, not one run of it.
    others = _heads(OTHERS, "o", lambda n: f"user{n % 200}")
    every = max(mine // OTHERS, 1)
    for number, head in enumerate(_heads(mine, "c", lambda n: USER)):
        yield head
        other = next(others, None) if number % every == 0 else None
        if other is not None:
            yield other
    yield from others


def _batches(mine: int) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for head in _all_heads(mine):
        batch.append(head)
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def load_sql(store: Any, mine: int, analyze: str) -> None:
    """Write the heads through the store's engine with the library's row mapping."""
    from firefly_orm.sql._statements import TABLE, entry_values

    with store.engine.begin() as conn:
        for batch in _batches(mine):
            conn.execute(TABLE.insert(), [entry_values(h.namespace, h) for h in batch])
        conn.exec_driver_sql(analyze)


def load_mongo(url: str, database: str, collection: str, mine: int) -> None:
    from pymongo import MongoClient

    from firefly_orm.mongo._document import entry_to_document

    client: MongoClient[dict[str, Any]] = MongoClient(url, tz_aware=True)
    try:
        for batch in _batches(mine):
            documents = [entry_to_document(h, h.namespace) for h in batch]
            client[database][collection].insert_many(documents)
    finally:
        client.close()


def measure(memory: Any, backend: str, mine: int) -> list[Row]:
    """The W10 rows of one store holding the heads."""
    rows: list[Row] = []
    for order in ORDERS:
        cursors: list[str | None] = [None]
        while True:
            page = memory.list_conversations(USER, limit=LIMIT, order=order, cursor=cursors[-1])
            if page.next_cursor is None:
                break
            cursors.append(page.next_cursor)
        pages = len(cursors)
        assert pages == -(-mine // LIMIT), (pages, mine)
        probes = {"first": cursors[0], f"page {DEEP_PAGE}": cursors[DEEP_PAGE - 1]}
        probes[f"last (page {pages})"] = cursors[-1]
        times: dict[str, list[float]] = {name: [] for name in probes}
        for _ in range(ROUNDS):
            for name, cursor in probes.items():
                started = time.perf_counter()
                memory.list_conversations(USER, limit=LIMIT, order=order, cursor=cursor)
                times[name].append((time.perf_counter() - started) * 1000)
        p50 = {name: statistics.median(values) for name, values in times.items()}
        first = p50["first"]
        deep = max(value for name, value in p50.items() if name != "first")
        # Paired within each round (the three pages back to back): a burst of load
        # from elsewhere on the machine slows the pages of one round alike. One median
        # per deep page, then the larger: the larger of two noisy times in every round
        # would lean the ratio up by the noise alone.
        paired = max(
            statistics.median(values[r] / times["first"][r] for r in range(ROUNDS))
            for name, values in times.items()
            if name != "first"
        )
        rows.append(
            Row(
                workload=f"W10 list page {order}",
                backend=backend,
                unit="ms",
                ours=deep,
                baseline=first,
                ratio=paired,
                target=TARGET,
                kind="growth",
                detail={
                    "conversations": mine,
                    "others": OTHERS,
                    "limit": LIMIT,
                    "rounds": ROUNDS,
                    "p50_ms": {name: round(value, 3) for name, value in p50.items()},
                },
            )
        )
    return rows


@contextmanager
def _sqlite(tmp: Path, mine: int) -> Iterator[Any]:
    from firefly_orm.sql import SQLiteStore

    store = SQLiteStore(tmp / "w10.sqlite3")
    store.initialize()
    try:
        load_sql(store, mine, "ANALYZE")
        yield store
    finally:
        store.close()


@contextmanager
def _postgres(mine: int) -> Iterator[Any]:
    import sqlalchemy as sa

    from firefly_orm.sql import PostgreSQLStore

    url, _ = postgres_url()
    schema = "w10_" + uuid.uuid4().hex[:8]
    try:
        store = PostgreSQLStore(url, schema_name=schema)
        store.initialize()
    except Exception as exc:  # no server: the rows are skipped
        raise Skip(f"PostgreSQL: {type(exc).__name__}: {exc}") from None
    try:
        load_sql(store, mine, f'ANALYZE "{schema}".memory_entries')
        yield store
    finally:
        store.close()
        engine = sa.create_engine(url)
        with engine.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        engine.dispose()


@contextmanager
def _mongo(url: str | None, mine: int) -> Iterator[tuple[Any, str]]:
    from pymongo import MongoClient

    from bench.mongo import mongo_server
    from firefly_orm.mongo import MongoDBStore

    with mongo_server(url) as (server, source):
        database = "ffbench_w10_" + uuid.uuid4().hex[:8]
        store = MongoDBStore(server, database=database)
        store.initialize()
        try:
            load_mongo(server, database, store.collection_name, mine)
            yield store, source
        finally:
            store.close()
            client: MongoClient[dict[str, Any]] = MongoClient(server)
            client.drop_database(database)
            client.close()


def run(mine: int, mongo_url: str | None, backends: tuple[str, ...]) -> list[Row]:
    """Every W10 row of ``backends``; a backend without a server is skipped, with why."""
    from firefly_orm.conversation import ConversationMemory

    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="ffbench-w10-") as tmp:
        for backend in backends:
            try:
                if backend == "sqlite":
                    with _sqlite(Path(tmp), mine) as store:
                        rows += measure(ConversationMemory(store=store), "sqlite", mine)
                elif backend == "postgres":
                    with _postgres(mine) as store:
                        rows += measure(ConversationMemory(store=store), "postgres", mine)
                elif backend == "mongo":
                    with _mongo(mongo_url, mine) as (store, source):
                        name = "mongo (SecantusDB)" if "SecantusDB" in source else "mongo"
                        rows += measure(ConversationMemory(store=store), name, mine)
            except Skip as skip:
                print(f"W10 {backend}: skipped: {skip}", file=sys.stderr)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.listing", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="2,000 conversations, not 10,000")
    parser.add_argument("--mongo-url", help="a MongoDB server (default: as the bench finds one)")
    parser.add_argument(
        "--backends", default="sqlite,postgres,mongo", help="comma-separated (default: all)"
    )
    parser.add_argument("--conversations", type=int, help="the listing user's (overrides --quick)")
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args(argv)
    mine = args.conversations or SIZES["quick" if args.quick else "full"]
    if mine < DEEP_PAGE * LIMIT:
        parser.error(f"--conversations: at least {DEEP_PAGE * LIMIT} (page {DEEP_PAGE} is timed)")
    rows = run(mine, args.mongo_url, tuple(args.backends.split(",")))
    print(table(rows))
    for row in rows:
        print(f"{row.workload} {row.backend}: p50 ms {row.detail['p50_ms']}")
    if args.json:
        Path(args.json).write_text(json.dumps([row.to_json() for row in rows], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
