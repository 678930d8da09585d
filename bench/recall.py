"""W6: ``LongTermMemory.recall`` with 1k, 10k and 100k long-term entries in the store.

The library side is :class:`firefly_orm.long_term.LongTermMemory` (``recall(query,
limit=5)``, one full-text search through ``uow.entries.search``).  The baseline is
the same search written by hand on the raw driver, over a table laid out for it:

* SQLite (stdlib ``sqlite3``): an ``items`` table and an FTS5 external-content
  table over its text (same tokenizer, kept in sync by an insert trigger); one
  ``MATCH`` of the quoted, OR-ed words, the FTS5 table as the outer loop
  (``CROSS JOIN``), ranked by ``bm25()``, then importance and recency.
* PostgreSQL (psycopg 3): a generated ``tsvector`` column (``simple``
  configuration) with a GIN index (``fastupdate = off``, as the library's);
  ``websearch_to_tsquery`` of the quoted, OR-ed words, ranked by ``ts_rank``.
* MongoDB (pymongo): each document stores its distinct words in an array with
  a multikey ``(namespace, words)`` index; one aggregation: ``$match`` on the
  index, the expiry ``$match``, the share of the query's words as the score,
  ``$sort``, ``$limit`` (SecantusDB, the local test server, has no ``$text``).

Both sides hold the same entries (same ids, texts, importances and creation
times), so they rank alike: every timed call's ids are compared, and the
workload fails if they ever differ.  Loading is not timed: the library's
entries are built by ``LongTermMemory.entry_for`` (exactly what ``remember``
writes) and inserted in batches with the library's own row / document
converters; the comparison of every result then proves the library reads them
as its own.

The corpus (seeded): every entry has 12 words, 10 drawn from a 2,000-word
vocabulary with Zipf weights (rank ``r`` has weight ``1/r``: a handful of words
appear in most entries, as function words do in prose) and 2 drawn from a pool
of ``entries / 10`` names, so a name appears in about 20 entries at every size.

Two query mixes (each query holds a name of an existing entry, so no result
is empty; ``limit=5``):

* **W6** ``<name> <name>``: selective words only; the matches (about 40) do
  not grow with the table, so an index lookup costs the same at 1k and 100k.
* **W6b** ``<name> <word> <word>``: two vocabulary words drawn by their Zipf
  weight join the name.  Words are OR-ed and every match is ranked before the
  best five are kept, so the cost follows the number of entries holding a
  query word, which grows with the table on either side (reported, no target).

Timed calls are interleaved (ours, raw, raw, ours, ...) and the levels read
round-robin, as in W4.
"""

from __future__ import annotations

import contextlib
import json
import random
import sqlite3
import string
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.common import Row, Sizes, median
from bench.workloads import CheckFailed, _latency_row, _pair_call

#: The namespace of the long-term entries on both sides.
NAMESPACE = "bench-recall"
#: ``recall(query, limit=LIMIT)`` (the library's default).
LIMIT = 5
#: Size of the Zipf-weighted vocabulary.
VOCABULARY = 2_000
#: Vocabulary words per entry.
COMMON_PER_ENTRY = 10
#: Names per entry.
NAMES_PER_ENTRY = 2
#: The name pool has ``entries // ENTRIES_PER_NAME`` names.
ENTRIES_PER_NAME = 10
#: Rows per insert batch while loading.
LOAD_BATCH = 5_000
#: Target of the W6 growth row (latency at the largest size / at the smallest).
GROWTH_TARGET = 1.5

_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


# --------------------------------------------------------------------------- the corpus


@dataclass(frozen=True)
class Item:
    """One long-term entry, as both sides store it."""

    entry_id: str
    text: str
    importance: float
    created_at: datetime


def _vocabulary(rng: random.Random) -> list[str]:
    words: dict[str, None] = {}
    while len(words) < VOCABULARY:
        words["".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 8)))] = None
    return list(words)


def _names(rng: random.Random, count: int, taken: set[str]) -> list[str]:
    names: dict[str, None] = {}
    while len(names) < count:
        name = "".join(rng.choices(_SYLLABLES, k=rng.randint(3, 4)))
        if name not in taken:
            names[name] = None
    return list(names)


class Corpus:
    """``size`` entries and the two query mixes over them (deterministic for a seed)."""

    def __init__(self, seed: int, size: int) -> None:
        from firefly_orm.entry import new_entry_id

        rng = random.Random(f"{seed}-recall-{size}")
        self.vocabulary = _vocabulary(random.Random(f"{seed}-vocabulary"))
        self.cum_weights: list[float] = []
        total = 0.0
        for rank in range(1, VOCABULARY + 1):
            total += 1.0 / rank
            self.cum_weights.append(total)
        self.names = _names(rng, max(1, size // ENTRIES_PER_NAME), set(self.vocabulary))
        start = datetime(2025, 1, 1, tzinfo=UTC)
        self.items: list[Item] = []
        self.entry_names: list[tuple[str, ...]] = []
        for n in range(size):
            names = tuple(rng.choice(self.names) for _ in range(NAMES_PER_ENTRY))
            words = [*self._common(rng, COMMON_PER_ENTRY), *names]
            rng.shuffle(words)
            self.entry_names.append(names)
            self.items.append(
                Item(
                    entry_id=new_entry_id(),
                    text=" ".join(words),
                    importance=round(rng.random(), 3),
                    # One millisecond apart: distinct on every store (BSON dates hold ms).
                    created_at=start + timedelta(milliseconds=n),
                )
            )

    def _common(self, rng: random.Random, k: int) -> list[str]:
        return rng.choices(self.vocabulary, cum_weights=self.cum_weights, k=k)

    def queries(self, count: int, seed: int, *, common: bool) -> list[str]:
        """``count`` queries: a name of an existing entry, then another name (W6) or two
        Zipf-drawn vocabulary words (W6b)."""
        rng = random.Random(f"{seed}-queries-{len(self.items)}-{common}")
        found = []
        for _ in range(count):
            name = rng.choice(self.entry_names)[0]
            rest = self._common(rng, 2) if common else [rng.choice(self.names)]
            found.append(" ".join([name, *rest]))
        return found


# --------------------------------------------------------------------------- the library


class _OursBase:
    """The library: ``LongTermMemory(store).recall(query, limit=LIMIT)``."""

    def __init__(self, store: Any) -> None:
        from firefly_orm.long_term import LongTermMemory

        self.store = store
        self.memory = LongTermMemory(store=store, namespace=NAMESPACE)

    def entries(self, items: Sequence[Item]) -> list[Any]:
        """The entries ``remember`` would write for ``items`` (with their ids and times)."""
        return [
            self.memory.entry_for(item.text, importance=item.importance).copy_entry(
                entry_id=item.entry_id, created_at=item.created_at, version=1
            )
            for item in items
        ]

    def recall(self, query: str) -> list[str]:
        return [found.item.id for found in self.memory.recall(query, limit=LIMIT)]


class SQLOurs(_OursBase):
    """The library on a SQL store; loads with one executemany of its own rows per batch."""

    def load(self, items: Sequence[Item]) -> None:
        import sqlalchemy as sa

        from firefly_orm.sql._statements import TABLE, entry_values

        self.store.ensure_initialized()
        for start in range(0, len(items), LOAD_BATCH):
            rows = [
                entry_values(NAMESPACE, e) for e in self.entries(items[start : start + LOAD_BATCH])
            ]
            with self.store.engine.begin() as conn:
                conn.execute(sa.insert(TABLE), rows)
        self.store.analyze()  # what import_items does after a bulk write (PostgreSQL)

    def close(self) -> None:
        self.store.close()


class MongoRecallOurs(_OursBase):
    """The library on :class:`~firefly_orm.mongo.MongoDBStore`; loads with ``insert_many``."""

    def __init__(self, url: str, database: str) -> None:
        from pymongo import MongoClient

        from firefly_orm.mongo import MongoDBStore

        super().__init__(MongoDBStore(url, database=database))
        self.loader: Any = MongoClient(url, tz_aware=True)
        self.database = database

    def load(self, items: Sequence[Item]) -> None:
        from firefly_orm.mongo import entry_to_document

        collection = self.loader[self.database][self.store.collection_name]
        for start in range(0, len(items), LOAD_BATCH):
            batch = self.entries(items[start : start + LOAD_BATCH])
            collection.insert_many([entry_to_document(e, NAMESPACE) for e in batch])
        # Then the store's own indexes (what initialize() does on an existing
        # collection): a bulk build, faster on SecantusDB than growing them per insert.
        self.store.initialize()

    def close(self) -> None:
        try:
            self.store.close()
        finally:
            self.loader.close()


# --------------------------------------------------------------------------- the baselines


def _quoted_or(words: list[str], separator: str) -> str:
    return separator.join('"' + w + '"' for w in words)


def _words(query: str) -> list[str]:
    """The distinct lower-cased words of a bench query (letters only, by construction)."""
    return list(dict.fromkeys(query.lower().split()))


def _content(item: Item) -> str:
    return json.dumps({"text": item.text, "tags": [], "kind": "semantic"})


_SQLITE_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS items (
        id INTEGER PRIMARY KEY, entry_id TEXT NOT NULL UNIQUE, namespace TEXT NOT NULL,
        text TEXT NOT NULL, content TEXT NOT NULL, importance REAL NOT NULL,
        created_at TEXT NOT NULL, expires_at TEXT)""",
    """CREATE VIRTUAL TABLE IF NOT EXISTS items_fts USING fts5(text, content='items',
        content_rowid='id', tokenize='unicode61 remove_diacritics 0')""",
    """CREATE TRIGGER IF NOT EXISTS items_fts_insert AFTER INSERT ON items BEGIN
        INSERT INTO items_fts(rowid, text) VALUES (new.id, new.text); END""",
)
_SQLITE_RECALL = (
    "SELECT i.entry_id, i.content, -bm25(items_fts) AS score "
    "FROM items_fts CROSS JOIN items AS i ON i.id = items_fts.rowid "
    "WHERE items_fts MATCH ? AND i.namespace = ? AND (i.expires_at IS NULL OR i.expires_at > ?) "
    "ORDER BY score DESC, i.importance DESC, i.created_at DESC, i.entry_id DESC LIMIT ?"
)
_SQLITE_MATCHES = "SELECT count(*) FROM items_fts WHERE items_fts MATCH ?"


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class RawSQLiteRecall:
    """stdlib ``sqlite3``: FTS5 external-content table, one ``MATCH`` per recall."""

    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        for ddl in _SQLITE_SCHEMA:
            self.conn.execute(ddl)

    def load(self, items: Sequence[Item]) -> None:
        for start in range(0, len(items), LOAD_BATCH):
            rows = [
                (i.entry_id, NAMESPACE, i.text, _content(i), i.importance, _iso(i.created_at))
                for i in items[start : start + LOAD_BATCH]
            ]
            self.conn.execute("BEGIN")
            self.conn.executemany(
                "INSERT INTO items (entry_id, namespace, text, content, importance, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )
            self.conn.execute("COMMIT")

    def recall(self, query: str) -> list[str]:
        now = _iso(datetime.now(UTC))
        match = _quoted_or(_words(query), " OR ")
        rows = self.conn.execute(_SQLITE_RECALL, (match, NAMESPACE, now, LIMIT)).fetchall()
        found = [(entry_id, json.loads(content), score) for entry_id, content, score in rows]
        return [entry_id for entry_id, _, _ in found]

    def matches(self, query: str) -> int:
        """Untimed: how many entries hold at least one of the query's words."""
        match = _quoted_or(_words(query), " OR ")
        return int(self.conn.execute(_SQLITE_MATCHES, (match,)).fetchone()[0])

    def close(self) -> None:
        self.conn.close()


_PG_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS items (
        entry_id TEXT PRIMARY KEY, namespace TEXT NOT NULL, text TEXT NOT NULL,
        content JSONB NOT NULL, importance DOUBLE PRECISION NOT NULL,
        created_at TIMESTAMPTZ NOT NULL, expires_at TIMESTAMPTZ,
        search_vector tsvector GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, text))
            STORED)""",
    """CREATE INDEX IF NOT EXISTS items_search ON items USING gin (search_vector)
        WITH (fastupdate = off)""",
)
_PG_RECALL = (
    "SELECT entry_id, content, ts_rank(search_vector, q) AS score "
    "FROM items, websearch_to_tsquery('simple', %s) AS q "
    "WHERE search_vector @@ q AND namespace = %s AND (expires_at IS NULL OR expires_at > now()) "
    "ORDER BY score DESC, importance DESC, created_at DESC, entry_id DESC LIMIT %s"
)
_PG_MATCHES = "SELECT count(*) FROM items WHERE search_vector @@ websearch_to_tsquery('simple', %s)"


class RawPostgresRecall:
    """psycopg 3: generated ``tsvector`` + GIN, one ``websearch_to_tsquery`` per recall."""

    def __init__(self, conninfo: str, schema: str) -> None:
        import psycopg

        self.conn = psycopg.connect(conninfo, autocommit=True)
        self.conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        self.conn.execute(f'SET search_path TO "{schema}"')
        for ddl in _PG_SCHEMA:
            self.conn.execute(ddl)

    def load(self, items: Sequence[Item]) -> None:
        from psycopg.types.json import Jsonb

        for start in range(0, len(items), LOAD_BATCH):
            rows = [
                (
                    i.entry_id,
                    NAMESPACE,
                    i.text,
                    Jsonb(json.loads(_content(i))),
                    i.importance,
                    i.created_at,
                )
                for i in items[start : start + LOAD_BATCH]
            ]
            with self.conn.transaction(), self.conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO items (entry_id, namespace, text, content, importance, "
                    "created_at) VALUES (%s, %s, %s, %s, %s, %s)",
                    rows,
                )
        self.conn.execute("ANALYZE items")

    def recall(self, query: str) -> list[str]:
        text = _quoted_or(_words(query), " or ")
        rows = self.conn.execute(_PG_RECALL, (text, NAMESPACE, LIMIT)).fetchall()
        return [entry_id for entry_id, _content_json, _score in rows]

    def matches(self, query: str) -> int:
        """Untimed: how many entries hold at least one of the query's words."""
        row = self.conn.execute(_PG_MATCHES, (_quoted_or(_words(query), " or "),)).fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        self.conn.close()


class RawMongoRecall:
    """pymongo: stored word arrays, a multikey ``(namespace, words)`` index, one aggregation."""

    def __init__(self, url: str, database: str) -> None:
        from pymongo import ASCENDING, MongoClient

        self.client: Any = MongoClient(url, tz_aware=True)
        self.items = self.client[database]["items"]
        self.index = [("namespace", ASCENDING), ("words", ASCENDING)]

    def load(self, items: Sequence[Item]) -> None:
        for start in range(0, len(items), LOAD_BATCH):
            self.items.insert_many(
                [
                    {
                        "_id": i.entry_id,
                        "namespace": NAMESPACE,
                        "words": sorted(set(i.text.split())),
                        "text": i.text,
                        "content": json.loads(_content(i)),
                        "importance": i.importance,
                        "created_at": i.created_at,
                    }
                    for i in items[start : start + LOAD_BATCH]
                ]
            )
        self.items.create_index(self.index, name="ix_words")  # after the load, as ours

    def recall(self, query: str) -> list[str]:
        words = _words(query)
        pipeline: list[dict[str, Any]] = [
            {"$match": {"namespace": NAMESPACE, "words": {"$in": words}}},
            {"$match": {"expires_at": {"$not": {"$lte": datetime.now(UTC)}}}},
            {"$set": {"score": {"$size": {"$setIntersection": ["$words", {"$literal": words}]}}}},
            {"$project": {"words": 0}},
            {"$sort": {"score": -1, "importance": -1, "created_at": -1, "_id": -1}},
            {"$limit": LIMIT},
        ]
        return [doc["_id"] for doc in self.items.aggregate(pipeline)]

    def matches(self, query: str) -> int:
        """Untimed: how many entries hold at least one of the query's words."""
        return int(
            self.items.count_documents({"namespace": NAMESPACE, "words": {"$in": _words(query)}})
        )

    def close(self) -> None:
        self.client.close()


# --------------------------------------------------------------------------- the workload


def _label(level: int) -> str:
    return f"{level // 1000}k" if level >= 1000 else str(level)


def w6_recall(
    make_pair: Callable[[str], tuple[Any, Any]],
    sizes: Sizes,
    seed: int,
    backend: str,
    log: Callable[[str], None],
    *,
    common: bool = True,
) -> list[Row]:
    """W6 (selective words) and W6b (with common words): recall latency per level, and growth.

    One store pair per level, all loaded first (untimed); then the recalls go
    round-robin over the levels, each call interleaved with its counterpart.
    ``common=False`` leaves W6b out.
    """
    pairs: dict[int, tuple[Any, Any]] = {}
    mixes: list[tuple[str, bool, int]] = [("W6", False, sizes.recall_reads)]
    if common and sizes.recall_common_reads:
        mixes.append(("W6b", True, sizes.recall_common_reads))
    queries: dict[tuple[str, int], list[str]] = {}
    try:
        for level in sizes.recall_levels:
            started = time.perf_counter()
            corpus = Corpus(seed, level)
            ours, base = pairs[level] = make_pair(f"w6_{_label(level)}")
            ours.load(corpus.items)
            base.load(corpus.items)
            for name, common, reads in mixes:
                queries[name, level] = corpus.queries(reads, seed, common=common)
                for query in queries[name, level][:3]:  # untimed: warm caches, check
                    _check_recall(
                        f"{name} @{_label(level)}", query, ours.recall(query), base.recall(query)
                    )
            log(
                f"  W6 {backend}: {level} entries loaded on both sides "
                f"({time.perf_counter() - started:.1f} s)"
            )
        rows: list[Row] = []
        for name, _common, reads in mixes:
            rows.extend(_measure_mix(name, pairs, queries, reads, backend, sizes, log))
        return rows
    finally:
        for ours, base in pairs.values():
            with contextlib.suppress(Exception):
                ours.close()
            with contextlib.suppress(Exception):
                base.close()


def _check_recall(what: str, query: str, mine: list[str], theirs: list[str]) -> None:
    if not theirs:
        raise CheckFailed(f"{what}: {query!r} found nothing on the baseline")
    if mine != theirs:
        raise CheckFailed(f"{what}: {query!r}: ours {mine} vs raw {theirs}")


def _measure_mix(
    name: str,
    pairs: dict[int, tuple[Any, Any]],
    queries: dict[tuple[str, int], list[str]],
    reads: int,
    backend: str,
    sizes: Sizes,
    log: Callable[[str], None],
) -> list[Row]:
    samples: dict[int, tuple[list[float], list[float]]] = {level: ([], []) for level in pairs}
    for i in range(reads):
        for level, (ours, base) in pairs.items():
            query = queries[name, level][i]
            o, b, mine, theirs = _pair_call(i, ours.recall, base.recall, query)
            _check_recall(f"{name} @{_label(level)}", query, mine, theirs)
            samples[level][0].append(o)
            samples[level][1].append(b)
    title = "W6 recall" if name == "W6" else "W6b recall +common words"
    rows: list[Row] = []
    matched: dict[int, float] = {}
    for level, (ours_s, base_s) in samples.items():
        base = pairs[level][1]
        counts = [float(base.matches(q)) for q in queries[name, level][: min(reads, 50)]]
        matched[level] = median(counts)
        row = _latency_row(
            f"{title} @{_label(level)}",
            backend,
            ours_s,
            base_s,
            None,
            entries=level,
            limit=LIMIT,
            median_matching_entries=matched[level],
            query_example=queries[name, level][0],
        )
        row.kind = "info"
        rows.append(row)
    low, high = sizes.recall_levels[0], sizes.recall_levels[-1]
    p50 = {level: (median(o), median(b)) for level, (o, b) in samples.items()}
    ours_growth = p50[high][0] / p50[low][0]
    base_growth = p50[high][1] / p50[low][1]
    log(
        f"  {name} {backend}: median entries matching a query "
        + ", ".join(f"{_label(level)}: {m:g}" for level, m in matched.items())
    )
    rows.append(
        Row(
            f"{name} scale {_label(low)}->{_label(high)}",
            backend,
            "p50 growth",
            ours_growth,
            base_growth,
            ours_growth,
            GROWTH_TARGET if name == "W6" else None,
            kind="growth",
            detail={
                "p50_ms": {str(k): [1000 * v for v in p] for k, p in p50.items()},
                "median_matching_entries": {str(k): v for k, v in matched.items()},
            },
        )
    )
    return rows
