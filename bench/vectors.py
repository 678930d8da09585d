"""W8: semantic recall (issue 29): quality against exact search, latency against driver code.

The library side is :class:`firefly_orm.long_term.LongTermMemory` with an
embedder, on ``SQLiteStore(path, vectors=True)`` (float32 BLOBs, an exact
scan with sqlite-vec's ``vec_distance_cosine``) and
``PostgreSQLStore(url, vectors=True)`` (pgvector, the HNSW index of vector
migration v002; the planner picks the walk or an exact scan).  The baselines
are the same search written by hand:

* SQLite (``pysqlite3`` when installed, else stdlib ``sqlite3``, with
  ``sqlite-vec`` loaded): an ``items`` table with the vector as a float32 BLOB;
  ``ORDER BY vec_distance_cosine(embedding, ?) LIMIT 10`` (an exact scan, as
  the library's; not a ``vec0`` table).
* PostgreSQL (psycopg 3 + the ``pgvector`` package's ``register_vector``): an
  ``items`` table with a ``vector(256)`` column and an HNSW index
  (``vector_cosine_ops``, pgvector's defaults, built after the load);
  ``ORDER BY embedding <=> %s LIMIT 10``.

Vectors come from :class:`~firefly_orm.testing.embeddings.ConceptEmbeddingModel`
(256 dimensions, an HNSW-indexed size), computed **once** per text (about
0.35 ms each here) and served from that cache by :class:`CachedConceptModel`,
an ``EmbeddingModel`` that reports the same model and returns the same
vectors: the library imports the items through ``import_items`` (its real
write path: batches of 64 texts through pydantic-ai's ``Embedder``, vectors
stored in the unit of work), and the hand-written side and the exact search
use the same vectors.  A timed recall embeds its query on both sides from the
cache too, so the model's own arithmetic is in neither side's time; the
library side still pays pydantic-ai's ``Embedder`` call and its loop-thread hop.

Rows:

* ``W8 recall@10`` (per backend and level): the share of the library's
  ``recall(query, limit=10, mode="semantic")`` hits that are among the exact
  10 nearest (numpy over the same float32 vectors, cosine; a hit tied with
  the 10th nearest counts), averaged over the queries; target >= 0.95.  The
  detail holds the hand-written query's recall@10 too, and on PostgreSQL the
  plan each side's query gets (``EXPLAIN``: the HNSW walk or an exact scan).
* ``W8 semantic`` (per level): p50 of ``recall(mode="semantic", limit=10)``
  over the hand-written query's, calls interleaved; target <= 1.5x.
* ``W8 scale`` : p50 growth from the smallest level to the largest (no target).
* ``W8 hybrid / text``: p50 of ``recall(mode="hybrid")`` over
  ``recall(mode="text")`` (both the library's, same queries; no target).

The corpus (seeded): each item is a name (from a pool of ``items / 20``),
two words of one concept of the model's lexicon, and five words of a
2,000-word vocabulary drawn with Zipf weights, shuffled; each query is one
word of a random item (the first of its shuffled words: its name, a concept
word or a vocabulary word), one word of a random concept and two vocabulary
words, shuffled, never an item's text.
"""

from __future__ import annotations

import contextlib
import random
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import Row, Skip, median
from bench.recall import _names, _vocabulary
from bench.workloads import _latency_row, _pair_call

#: The namespace of the long-term items.
NAMESPACE = "bench-vectors"
#: Hits per recall (recall@K).
K = 10
#: Vector size: the test model's default, one of the sizes with an HNSW index.
DIMENSIONS = 256
#: Targets: recall@10 against exact search, and our p50 over the hand-written query's.
RECALL_TARGET = 0.95
RATIO_TARGET = 1.5
#: Items per ``import_items`` call while loading (one unit of work each).
IMPORT_BATCH = 2_000
#: Items per name.
ITEMS_PER_NAME = 20
#: Vocabulary words per item.
WORDS_PER_ITEM = 5
#: A hit whose exact similarity is this close to the K-th nearest's counts as found.
TIE = 1e-5


@dataclass(frozen=True)
class W8Sizes:
    """Items in the store at each level, queries for recall@10, timed recalls per level."""

    levels: tuple[int, ...]
    queries: int
    reads: int


W8_QUICK = W8Sizes(levels=(500, 1_500), queries=15, reads=30)
W8_FULL = W8Sizes(levels=(1_000, 10_000), queries=50, reads=200)
#: ``--w8-100k``: the 100k level (PostgreSQL's import maintains the HNSW index row by row).
W8_LARGE = W8Sizes(levels=(10_000, 100_000), queries=50, reads=200)


# --------------------------------------------------------------------------- the corpus


class Corpus:
    """``size`` item texts and ``queries`` query texts (deterministic for a seed)."""

    def __init__(self, seed: int, size: int, queries: int) -> None:
        from firefly_orm.testing.embeddings import CONCEPTS

        rng = random.Random(f"{seed}-vectors-{size}")
        vocabulary = _vocabulary(random.Random(f"{seed}-vocabulary"))
        weights = [1.0 / rank for rank in range(1, len(vocabulary) + 1)]
        concepts = [sorted(words) for _, words in sorted(CONCEPTS.items())]
        names = _names(rng, max(1, size // ITEMS_PER_NAME), set(vocabulary))

        def sentence(name: str, concept_words: int, words: int) -> str:
            concept = rng.choice(concepts)
            chosen = [name, *rng.sample(concept, concept_words)]
            chosen += rng.choices(vocabulary, weights=weights, k=words)
            rng.shuffle(chosen)
            return " ".join(chosen)

        self.texts = [sentence(rng.choice(names), 2, WORDS_PER_ITEM) for _ in range(size)]
        known = set(self.texts)
        self.queries: list[str] = []
        while len(self.queries) < queries:
            query = sentence(rng.choice(self.texts).split()[0], 1, 2)
            if query not in known:
                self.queries.append(query)
        start = datetime(2025, 1, 1, tzinfo=UTC)
        self.items = [
            {
                "text": text,
                "importance": round(rng.random(), 3),
                "created_at": (start + timedelta(milliseconds=n)).isoformat(),
            }
            for n, text in enumerate(self.texts)
        ]


class VectorCache:
    """The test model's vectors, computed once per text; the exact search over the items'."""

    def __init__(self) -> None:
        self.vectors: dict[str, list[float]] = {}

    def vector(self, text: str) -> list[float]:
        from firefly_orm.testing.embeddings import concept_vector

        found = self.vectors.get(text)
        if found is None:
            found = self.vectors[text] = concept_vector(text, DIMENSIONS)
        return found

    def matrix(self, texts: Sequence[str]) -> Any:
        """The texts' vectors as a float32 matrix with unit-length rows (cosine = dot)."""
        import numpy as np

        rows = np.asarray([self.vector(text) for text in texts], dtype=np.float32)
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        return rows / norms


def cached_model(cache: VectorCache) -> Any:
    """A ``CachedConceptModel`` serving ``cache`` (defined here: pydantic-ai is imported late)."""
    from pydantic_ai.embeddings import EmbeddingResult, EmbeddingSettings
    from pydantic_ai.embeddings.result import EmbedInputType

    from firefly_orm.testing.embeddings import SYSTEM, ConceptEmbeddingModel

    class CachedConceptModel(ConceptEmbeddingModel):
        """``ConceptEmbeddingModel``'s vectors (same name and size), each computed once."""

        async def embed(
            self,
            inputs: str | Sequence[str],
            *,
            input_type: EmbedInputType,
            settings: EmbeddingSettings | None = None,
        ) -> EmbeddingResult:
            texts, _merged = self.prepare_embed(inputs, settings)
            return EmbeddingResult(
                embeddings=[cache.vector(text) for text in texts],
                inputs=texts,
                input_type=input_type,
                model_name=self.model_name,
                provider_name=SYSTEM,
            )

    return CachedConceptModel(dimensions=DIMENSIONS)


# --------------------------------------------------------------------------- the library


class OursVectors:
    """The library: ``LongTermMemory(store, embedder=...)``, loaded through ``import_items``."""

    def __init__(
        self, store: Any, cache: VectorCache, analyze: str | None = None, index: str | None = None
    ) -> None:
        from firefly_orm.long_term import LongTermMemory

        self.store = store
        self.analyze = analyze
        self.index = index
        self.memory = LongTermMemory(store=store, namespace=NAMESPACE, embedder=cached_model(cache))
        self.statements: list[tuple[str, Any]] = []

    def load(self, items: Sequence[dict[str, Any]]) -> list[str]:
        definition = self._drop_index()
        ids: list[str] = []
        for start in range(0, len(items), IMPORT_BATCH):
            ids.extend(self.memory.import_items(items[start : start + IMPORT_BATCH]))
        if definition is not None:
            with self.store.engine.begin() as conn:
                conn.exec_driver_sql(definition)
        if self.analyze is not None:  # what autovacuum does later: import_items analyzes
            with self.store.engine.begin() as conn:  # memory_entries, not memory_vectors
                conn.exec_driver_sql(self.analyze)
        return ids

    def _drop_index(self) -> str | None:
        """PostgreSQL: drop the HNSW index (``self.index``) for the load; its definition.

        Built after the load, as the baseline's (pgvector builds an index in bulk
        several times faster than it maintains one row by row); same definition.
        """
        if self.index is None:
            return None
        schema, name = self.index.split(".")
        self.store.ensure_initialized()  # migrated: the index exists
        with self.store.engine.begin() as conn:
            definition = conn.exec_driver_sql(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = %(s)s AND indexname = %(n)s",
                {"s": schema, "n": name},
            ).scalar_one()
            conn.exec_driver_sql(f'DROP INDEX "{schema}"."{name}"')
        return str(definition)

    def semantic(self, query: str) -> list[str]:
        return [r.item.id for r in self.memory.recall(query, limit=K, mode="semantic")]

    def hybrid(self, query: str) -> list[str]:
        return [r.item.id for r in self.memory.recall(query, limit=K, mode="hybrid")]

    def text(self, query: str) -> list[str]:
        return [r.item.id for r in self.memory.recall(query, limit=K, mode="text")]

    def explain(self, query: str) -> str:
        """PostgreSQL: the plan of the vector search one semantic recall sends."""
        import sqlalchemy as sa

        seen: list[tuple[str, Any]] = []

        def capture(_conn: Any, _cursor: Any, statement: str, params: Any, *_: Any) -> None:
            if "<=>" in statement:
                seen.append((statement, params))

        engine = self.store.engine
        sa.event.listen(engine, "before_cursor_execute", capture)
        try:
            self.semantic(query)
        finally:
            sa.event.remove(engine, "before_cursor_execute", capture)
        statement, params = seen[-1]
        with engine.connect() as conn:
            rows = conn.exec_driver_sql("EXPLAIN " + statement, params).scalars().all()
        return "\n".join(rows)

    def close(self) -> None:
        self.store.close()


# --------------------------------------------------------------------------- the baselines


class RawSQLiteVectors:
    """``pysqlite3`` (else ``sqlite3``) + sqlite-vec: ``ORDER BY vec_distance_cosine LIMIT 10``."""

    def __init__(self, path: str, cache: VectorCache) -> None:
        import sqlite_vec

        try:
            from pysqlite3 import dbapi2 as driver
        except ImportError:
            import sqlite3 as driver
        self.cache = cache
        self.conn: Any = driver.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.enable_load_extension(True)
        sqlite_vec.load(self.conn)
        self.conn.enable_load_extension(False)
        self.serialize = sqlite_vec.serialize_float32
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS items (entry_id TEXT PRIMARY KEY, text TEXT NOT NULL, "
            "importance REAL NOT NULL, created_at TEXT NOT NULL, embedding BLOB NOT NULL)"
        )

    def load(self, ids: Sequence[str], items: Sequence[dict[str, Any]]) -> None:
        self.conn.execute("BEGIN")
        self.conn.executemany(
            "INSERT INTO items VALUES (?, ?, ?, ?, ?)",
            [
                (
                    eid,
                    i["text"],
                    i["importance"],
                    i["created_at"],
                    self.serialize(self.cache.vector(i["text"])),
                )
                for eid, i in zip(ids, items, strict=True)
            ],
        )
        self.conn.execute("COMMIT")

    def semantic(self, query: str) -> list[str]:
        rows = self.conn.execute(
            "SELECT entry_id, text, importance, created_at FROM items "
            "ORDER BY vec_distance_cosine(embedding, ?) LIMIT ?",
            (self.serialize(self.cache.vector(query)), K),
        ).fetchall()
        return [row[0] for row in rows]

    def explain(self, query: str) -> str:
        return "exact scan (vec_distance_cosine over every row)"

    def close(self) -> None:
        self.conn.close()


class RawPgvector:
    """psycopg 3 + pgvector: ``vector(256)`` with an HNSW index, ``ORDER BY <=> LIMIT 10``."""

    SEARCH = (
        "SELECT entry_id, text, importance, created_at FROM items "
        "ORDER BY embedding <=> %s LIMIT %s"
    )

    def __init__(self, conninfo: str, schema: str, cache: VectorCache) -> None:
        import psycopg
        from pgvector.psycopg import register_vector

        from firefly_orm.vector._spec import DEFAULT_EF_SEARCH

        self.cache = cache
        self.conn = psycopg.connect(conninfo, autocommit=True)
        self.conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        self.conn.execute(f'SET search_path TO "{schema}", public')
        # the library's ef_search (pgvector's default, 40, finds fewer of the nearest)
        self.conn.execute(f"SET hnsw.ef_search = {int(DEFAULT_EF_SEARCH)}")
        register_vector(self.conn)
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS items (entry_id text PRIMARY KEY, text text NOT NULL, "
            f"importance double precision NOT NULL, created_at timestamptz NOT NULL, "
            f"embedding vector({DIMENSIONS}) NOT NULL)"
        )

    def load(self, ids: Sequence[str], items: Sequence[dict[str, Any]]) -> None:
        import numpy as np

        with (
            self.conn.cursor() as cur,
            cur.copy(
                "COPY items (entry_id, text, importance, created_at, embedding) FROM STDIN "
                "WITH (FORMAT BINARY)"
            ) as copy,
        ):
            copy.set_types(["text", "text", "float8", "timestamptz", "vector"])
            for eid, item in zip(ids, items, strict=True):
                vector = np.asarray(self.cache.vector(item["text"]), dtype=np.float32)
                created = datetime.fromisoformat(item["created_at"])
                copy.write_row((eid, item["text"], item["importance"], created, vector))
        self.conn.execute("CREATE INDEX ON items USING hnsw (embedding vector_cosine_ops)")
        self.conn.execute("ANALYZE items")

    def semantic(self, query: str) -> list[str]:
        import numpy as np

        vector = np.asarray(self.cache.vector(query), dtype=np.float32)
        return [row[0] for row in self.conn.execute(self.SEARCH, (vector, K)).fetchall()]

    def explain(self, query: str) -> str:
        import numpy as np

        vector = np.asarray(self.cache.vector(query), dtype=np.float32)
        rows = self.conn.execute("EXPLAIN " + self.SEARCH, (vector, K)).fetchall()
        return "\n".join(row[0] for row in rows)

    def close(self) -> None:
        self.conn.close()


# --------------------------------------------------------------------------- pgvector server


def _tests_path() -> None:
    """Make ``tests/pgvector_server.py`` importable (the test suite's server finder)."""
    tests = str(Path(__file__).resolve().parents[1] / "tests")
    if tests not in sys.path:
        sys.path.append(tests)


@contextlib.contextmanager
def pgvector_server() -> Iterator[str]:
    """A PostgreSQL URL with pgvector: ``$FIREFLY_ORM_TEST_PGVECTOR_URL``, else a pgserver.

    Raises:
        Skip: None can be found or started (the reason).
    """
    _tests_path()
    from pgvector_server import PgvectorUnavailable, pgvector_url_for_tests

    try:
        with pgvector_url_for_tests() as url:
            yield url
    except PgvectorUnavailable as exc:
        raise Skip(str(exc)) from None


# --------------------------------------------------------------------------- the workload


def _label(level: int) -> str:
    return f"{level / 1000:g}k" if level >= 1000 else str(level)


def recall_at_k(found: Sequence[str], query: Any, index: dict[str, int], matrix: Any) -> float:
    """The share of ``found`` (ids) among the exact K nearest of ``query`` (ties counted)."""
    import numpy as np

    similarities = matrix @ query
    kth = float(np.partition(similarities, -K)[-K])
    hits = sum(1 for eid in found if float(similarities[index[eid]]) >= kth - TIE)
    return hits / K


@dataclass
class Level:
    """One level: the two sides loaded, the ids, the exact search's matrix, the queries."""

    size: int
    ours: Any
    base: Any
    ids: list[str]
    matrix: Any
    cache: VectorCache
    queries: list[str]
    load_seconds: float


def w8_vectors(
    make_pair: Callable[[str, VectorCache], tuple[Any, Any]],
    sizes: W8Sizes,
    seed: int,
    backend: str,
    log: Callable[[str], None],
) -> list[Row]:
    """W8 on one backend: recall@10 and latency per level, growth, hybrid over text."""
    levels: list[Level] = []
    try:
        for size in sizes.levels:
            levels.append(_load_level(make_pair, size, sizes, seed, backend, log))
        rows: list[Row] = []
        for level in levels:
            rows.append(_quality(level, backend))
        rows.extend(_latency(levels, sizes, backend))
        return rows
    finally:
        for level in levels:
            with contextlib.suppress(Exception):
                level.ours.close()
            with contextlib.suppress(Exception):
                level.base.close()


def _load_level(
    make_pair: Callable[[str, VectorCache], tuple[Any, Any]],
    size: int,
    sizes: W8Sizes,
    seed: int,
    backend: str,
    log: Callable[[str], None],
) -> Level:
    started = time.perf_counter()
    corpus = Corpus(seed, size, max(sizes.queries, 1))
    cache = VectorCache()
    matrix = cache.matrix(corpus.texts)  # every item's vector, computed once here
    embedded = time.perf_counter() - started
    ours, base = make_pair(f"w8_{size}", cache)
    ids = ours.load(corpus.items)
    base.load(ids, corpus.items)
    elapsed = time.perf_counter() - started
    log(
        f"  W8 {backend}: {size} items loaded on both sides ({elapsed:.1f} s, "
        f"{embedded:.1f} s of it embedding)"
    )
    return Level(size, ours, base, ids, matrix, cache, corpus.queries, elapsed)


def _quality(level: Level, backend: str) -> Row:
    import numpy as np

    index = {eid: n for n, eid in enumerate(level.ids)}
    ours_scores: list[float] = []
    base_scores: list[float] = []
    for query in level.queries:
        vector = np.asarray(level.cache.vector(query), dtype=np.float32)
        vector /= np.linalg.norm(vector)
        ours_scores.append(recall_at_k(level.ours.semantic(query), vector, index, level.matrix))
        base_scores.append(recall_at_k(level.base.semantic(query), vector, index, level.matrix))
    ours_recall = sum(ours_scores) / len(ours_scores)
    base_recall = sum(base_scores) / len(base_scores)
    detail: dict[str, Any] = {
        "items": level.size,
        "queries": len(level.queries),
        "baseline_recall_at_10": base_recall,
        "ours_min": min(ours_scores),
        "load_seconds": round(level.load_seconds, 1),
        "query_example": level.queries[0],
    }
    if backend == "postgres":
        detail["ours_plan"] = level.ours.explain(level.queries[0])
        detail["baseline_plan"] = level.base.explain(level.queries[0])
    return Row(
        f"W8 recall@10 @{_label(level.size)}",
        backend,
        "recall@10",
        ours_recall,
        base_recall,
        ours_recall,
        RECALL_TARGET,
        kind="quality",
        detail=detail,
    )


def _latency(levels: list[Level], sizes: W8Sizes, backend: str) -> list[Row]:
    semantic: dict[int, tuple[list[float], list[float]]] = {lv.size: ([], []) for lv in levels}
    for level in levels:  # untimed: warm caches and prepared statements
        for query in level.queries[:3]:
            level.ours.semantic(query)
            level.base.semantic(query)
    for i in range(sizes.reads):
        for level in levels:
            query = level.queries[i % len(level.queries)]
            o, b, _mine, _theirs = _pair_call(i, level.ours.semantic, level.base.semantic, query)
            semantic[level.size][0].append(o)
            semantic[level.size][1].append(b)
    rows = [
        _latency_row(
            f"W8 semantic @{_label(size)}", backend, o, b, RATIO_TARGET, items=size, limit=K
        )
        for size, (o, b) in semantic.items()
    ]
    if len(levels) > 1:
        low, high = levels[0].size, levels[-1].size
        ours_growth = median(semantic[high][0]) / median(semantic[low][0])
        base_growth = median(semantic[high][1]) / median(semantic[low][1])
        rows.append(
            Row(
                f"W8 semantic scale {_label(low)}->{_label(high)}",
                backend,
                "p50 growth",
                ours_growth,
                base_growth,
                ours_growth,
                None,
                kind="growth",
            )
        )
    top = levels[-1]
    hybrid: list[float] = []
    text: list[float] = []
    for i in range(sizes.reads):
        query = top.queries[i % len(top.queries)]
        h, t, _h, _t = _pair_call(i, top.ours.hybrid, top.ours.text, query)
        hybrid.append(h)
        text.append(t)
    row = _latency_row(
        f"W8 hybrid / text @{_label(top.size)}", backend, hybrid, text, None, items=top.size
    )
    row.kind = "info"
    rows.append(row)
    return rows


# --------------------------------------------------------------------------- the runner's entry


def run_w8(runner: Any, backends: Sequence[str], tmpdir: Path, sizes: W8Sizes) -> None:
    """W8 on SQLite (sqlite-vec) and PostgreSQL (pgvector), as ``backends`` asks.

    ``runner`` is :class:`bench.runner.Runner` (``attempt``, ``log``, ``seed``).
    """
    from firefly_orm.sql import SQLiteStore

    runner.meta["w8_sizes"] = sizes.__dict__
    if "sqlite" in backends:

        def sqlite_pair(label: str, cache: VectorCache) -> tuple[Any, Any]:
            store = SQLiteStore(tmpdir / f"ours-{label}.sqlite3", vectors=True)
            return OursVectors(store, cache), RawSQLiteVectors(
                str(tmpdir / f"raw-{label}.sqlite3"), cache
            )

        runner.attempt(
            "sqlite: W8 semantic recall",
            lambda: w8_vectors(sqlite_pair, sizes, runner.seed, "sqlite", runner.log),
        )
    if "postgres" in backends:
        try:
            with pgvector_server() as url:
                runner.log(f"postgres (pgvector): {_redacted(url)}")
                runner.attempt(
                    "postgres: W8 semantic recall",
                    lambda: postgres_w8(url, sizes, runner.seed, runner.log),
                )
        except Skip as exc:
            runner.meta["w8_skipped"] = str(exc)
            runner.log(f"postgres W8 skipped: {exc}")


def _redacted(url: str) -> str:
    from firefly_orm.errors import redact_url

    return redact_url(url)


def postgres_w8(url: str, sizes: W8Sizes, seed: int, log: Callable[[str], None]) -> list[Row]:
    """W8 on the PostgreSQL with pgvector at ``url``, in throwaway schemas (dropped after)."""
    import psycopg
    from sqlalchemy.engine import make_url

    from firefly_orm.sql import PostgreSQLStore

    conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    run_id = uuid.uuid4().hex[:8]
    schemas: list[str] = []

    def pair(label: str, cache: VectorCache) -> tuple[Any, Any]:
        ours_schema, raw_schema = f"ffbench_{run_id}_{label}", f"ffbench_{run_id}_{label}_raw"
        schemas.extend((ours_schema, raw_schema))
        store = PostgreSQLStore(url, schema_name=ours_schema, vectors=True, pool_min_size=0)
        analyze = f'ANALYZE "{ours_schema}".memory_vectors'
        index = f"{ours_schema}.ix_memory_vectors_hnsw_{DIMENSIONS}"
        return OursVectors(store, cache, analyze, index), RawPgvector(conninfo, raw_schema, cache)

    try:
        return w8_vectors(pair, sizes, seed, "postgres", log)
    finally:
        with psycopg.connect(conninfo, autocommit=True) as admin:
            for schema in schemas:
                admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
