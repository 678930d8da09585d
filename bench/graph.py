"""W9: the knowledge graph's traversals as the graph grows (issue 30).

``KnowledgeGraph.neighbors(user, hub, depth=2)``, ``facts_about(user, hub)`` and
``paths(user, hub, leaf, max_depth=2)`` on graphs of 10k and 100k edges (quick:
10k and 30k; ``--w9-1m``: 10k, 100k and 1M), one store per level, calls
round-robin over the levels; the row is the p50 growth from the smallest level
to the largest (target <= 1.5x: each hop is an index lookup, so the cost
follows the answer, not the graph).

**Data** (seeded, one user owns every edge, so the ``user_id`` index never
narrows anything and only the subject / object indexes can keep a hop small):

* :data:`PROBES` probe clusters, identical at every level: a hub with
  :data:`FAN` neighbours (``hub --knows--> mid``), each mid with ``FAN - 1``
  leaves (``mid --knows--> leaf``), so ``neighbors(hub, 2)`` is always
  ``FAN + FAN * (FAN - 1)`` entities; the hub also holds
  :data:`HUB_LITERALS` literal facts and one closed fact (``valid_to`` set),
  so ``facts_about(hub)`` is ``FAN + HUB_LITERALS`` facts; ``paths(hub, leaf,
  2)`` is one path of two facts;
* the rest of the edges: a random background graph over ``edges / 4``
  entities (80 % entity-to-entity facts, 20 % literal values, 10 % of them
  closed), never connected to a cluster.

**Loading** (untimed) is one ``executemany`` per batch of 10,000 rows with the
library's own bulk writer, ``GraphRows.load`` (the rows ``import_user``
writes: :class:`~firefly_orm.knowledge._rows.SqlRows` on the store's engine,
:class:`~firefly_orm.knowledge._mongo.MongoRows` on MongoDB, where each fact
document gets its ``ends``); the rows are those ``add_fact`` writes, without
history rows (no read touches them).  PostgreSQL then runs ``ANALYZE`` on the
two tables (what autovacuum does after such a load); SQLite gets no
``ANALYZE`` (the library never runs one there).

**Checks**: every timed call's answer is compared with the cluster's (the
neighbours and their distances, the fact ids, the path), so a plan that
answered wrongly fails the workload.  Each SQL level's JSON detail holds the
plan of the traversal statements (``EXPLAIN QUERY PLAN`` / ``EXPLAIN``);
``tests/integration/test_graph_plans.py`` asserts the index use.

**MongoDB**: the bench's MongoDB is SecantusDB unless ``--mongo-url`` /
``$FIREFLY_ORM_TEST_MONGO_URL`` name a server.  SecantusDB's ``$graphLookup``
reads the whole ``from`` collection and compares every document with each
frontier value (it has no index path for it), so there a walk costs time in
proportion to the edges (about 9 s per call at 10k edges under load): the
bench runs one level of :data:`SECANTUS_EDGES` edges there, no growth row,
and says nothing about MongoDB's index on ``ends`` (with a real server, pass
``--mongo-url``: every level runs).
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import Row, Skip, percentile, postgres_url

USER = "bench-user"
#: Probe clusters (each a hub, FAN mids, FAN - 1 leaves per mid).
PROBES = 10
FAN = 10
HUB_LITERALS = 3
#: Rows per executemany / insert_many while loading.
LOAD_BATCH = 10_000
GROWTH_TARGET = 1.5
#: SecantusDB's one level and calls (its $graphLookup reads the whole collection per hop).
SECANTUS_EDGES = 2_000
SECANTUS_CALLS = 3
PREDICATES = ("knows", "works_with", "likes", "visited", "part_of", "mentions")
T0 = datetime(2025, 1, 1, tzinfo=UTC)
OPS = ("neighbors d2", "facts_about", "paths d2")


@dataclass(frozen=True)
class W9Sizes:
    """Edges at each level and timed calls per operation and level."""

    levels: tuple[int, ...]
    calls: int


W9_QUICK = W9Sizes((10_000, 30_000), 30)
W9_FULL = W9Sizes((10_000, 100_000), 100)
W9_LARGE = W9Sizes((10_000, 100_000, 1_000_000), 100)


def label(edges: int) -> str:
    """``10k``, ``1M``; other sizes in full."""
    if edges % 1_000_000 == 0:
        return f"{edges // 1_000_000}M"
    return f"{edges // 1000}k" if edges % 1000 == 0 else str(edges)


# --------------------------------------------------------------------------- data


@dataclass
class Cluster:
    """One probe cluster and the answers its traversals must give."""

    hub: str
    leaf: str
    neighbors: list[tuple[str, int]] = field(default_factory=list)
    facts: set[str] = field(default_factory=set)
    path: list[str] = field(default_factory=list)


class GraphData:
    """The rows of one level, made batch by batch from a seed (never all in memory)."""

    def __init__(self, seed: int, edges: int) -> None:
        self.seed = seed
        self.edges = edges
        self.clusters: list[Cluster] = []
        self._rng = random.Random(seed)

    def _id(self) -> str:
        return f"{self._rng.getrandbits(128):032x}"

    def _when(self) -> datetime:
        return T0 + timedelta(seconds=self._rng.randrange(365 * 86_400))

    def _entity(self, name: str) -> dict[str, Any]:
        when = self._when()
        return {
            "entity_id": self._id(),
            "user_id": USER,
            "name": name,
            "norm_name": " ".join(name.split()).casefold(),
            "entity_type": "thing",
            "attributes": {},
            "aliases": [],
            "mentions": 1,
            "created_at": when,
            "updated_at": when,
        }

    def _fact(
        self,
        subject_id: str,
        predicate: str,
        object_id: str | None,
        value: str | None = None,
        *,
        closed: bool = False,
    ) -> dict[str, Any]:
        start = self._when()
        return {
            "fact_id": self._id(),
            "user_id": USER,
            "subject_id": subject_id,
            "predicate": predicate,
            "object_id": object_id,
            "object_value": value,
            "valid_from": start,
            "valid_to": start + timedelta(days=3) if closed else None,
            "evidence": [f"turn-{self._rng.randrange(10**6)}"],
            "confidence": 0.9,
            "created_at": start,
        }

    def _clusters(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        entities: list[dict[str, Any]] = []
        facts: list[dict[str, Any]] = []
        for c in range(PROBES):
            hub = self._entity(f"hub {c}")
            entities.append(hub)
            cluster = Cluster(hub=hub["name"], leaf="")
            for m in range(FAN):
                mid = self._entity(f"hub {c} mid {m}")
                entities.append(mid)
                edge = self._fact(hub["entity_id"], "knows", mid["entity_id"])
                facts.append(edge)
                cluster.facts.add(edge["fact_id"])
                cluster.neighbors.append((mid["name"], 1))
                for leaf_no in range(FAN - 1):
                    leaf = self._entity(f"hub {c} mid {m} leaf {leaf_no}")
                    entities.append(leaf)
                    step = self._fact(mid["entity_id"], "knows", leaf["entity_id"])
                    facts.append(step)
                    cluster.neighbors.append((leaf["name"], 2))
                    if m == FAN // 2 and leaf_no == 0:
                        cluster.leaf, cluster.path = (
                            leaf["name"],
                            [edge["fact_id"], step["fact_id"]],
                        )
            for n in range(HUB_LITERALS):
                literal = self._fact(hub["entity_id"], f"trait_{n}", None, f"value {n}")
                facts.append(literal)
                cluster.facts.add(literal["fact_id"])
            facts.append(self._fact(hub["entity_id"], "lived_in", None, "Oslo", closed=True))
            cluster.neighbors.sort(key=lambda pair: (pair[1], pair[0]))
            self.clusters.append(cluster)
        return entities, facts

    def batches(self) -> Iterator[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
        """``(entities, facts)`` batches: the clusters first, then the background graph."""
        entities, facts = self._clusters()
        yield entities, facts
        remaining = self.edges - len(facts)
        people = max(100, self.edges // 4)
        ids: list[str] = []
        for start in range(0, people, LOAD_BATCH):
            batch = [
                self._entity(f"entity {n}") for n in range(start, min(people, start + LOAD_BATCH))
            ]
            ids.extend(e["entity_id"] for e in batch)
            yield batch, []
        rng = self._rng
        while remaining > 0:
            batch_facts = []
            for _ in range(min(LOAD_BATCH, remaining)):
                subject = ids[rng.randrange(people)]
                predicate = PREDICATES[rng.randrange(len(PREDICATES))]
                closed = rng.random() < 0.1
                if rng.random() < 0.8:
                    batch_facts.append(
                        self._fact(subject, predicate, ids[rng.randrange(people)], closed=closed)
                    )
                else:
                    value = f"value {rng.randrange(1000)}"
                    batch_facts.append(self._fact(subject, predicate, None, value, closed=closed))
            remaining -= len(batch_facts)
            yield [], batch_facts


# --------------------------------------------------------------------------- one level


class Level:
    """One store holding one level's graph, and the graph layer over it."""

    def __init__(
        self,
        edges: int,
        store: Any,
        *,
        analyze: Callable[[], None] | None = None,
        loader: Any = None,
    ) -> None:
        from firefly_orm.knowledge import KnowledgeGraph

        self.edges = edges
        self.store = store
        store.initialize()  # the tables (SQL: migrations) or the collections' indexes
        self.graph = KnowledgeGraph(store)
        self.analyze = analyze
        self.loader = loader  # MongoDB: a pymongo client that writes the documents
        self.clusters: list[Cluster] = []
        self.samples: dict[str, list[float]] = {op: [] for op in OPS}
        self.plans: dict[str, Any] = {}

    def load(self, seed: int, log: Callable[[str], None]) -> float:
        """Write the level's rows (untimed for the row); the seconds it took."""
        data = GraphData(seed, self.edges)
        start = time.perf_counter()
        for entities, facts in data.batches():
            self._write({"entities": entities, "facts": facts, "history": []})
        if self.analyze is not None:
            self.analyze()
        if self.loader is not None:
            self.graph.users()  # the graph's first call on MongoDB builds its indexes
        took = time.perf_counter() - start
        self.clusters = data.clusters
        log(f"  {label(self.edges)} edges loaded in {took:.1f} s")
        return took

    def _write(self, rows: dict[str, list[dict[str, Any]]]) -> None:
        from firefly_orm.sql import SQLAlchemyStore

        if isinstance(self.store, SQLAlchemyStore):
            from firefly_orm.knowledge._rows import SqlRows

            with self.store.engine.begin() as conn:
                SqlRows(conn).load(rows)
        else:  # the documents MongoRows.load writes, indexes built once after the load
            from firefly_orm.knowledge._mongo import _entity_doc, _fact_doc

            database = self.loader[self.store.database_name]
            prefix = self.store.collection_name
            if rows["entities"]:
                entities = [_entity_doc(row) for row in rows["entities"]]
                database[f"{prefix}.kg_entities"].insert_many(entities)
            if rows["facts"]:
                database[f"{prefix}.kg_facts"].insert_many(
                    [_fact_doc(row) for row in rows["facts"]]
                )

    def call(self, op: str, cluster: Cluster) -> Any:
        if op == "neighbors d2":
            return self.graph.neighbors(USER, cluster.hub, 2)
        if op == "facts_about":
            return self.graph.facts_about(USER, cluster.hub)
        return self.graph.paths(USER, cluster.hub, cluster.leaf, 2)

    def check(self, op: str, cluster: Cluster, answer: Any) -> None:
        """Raise when ``answer`` is not the cluster's."""
        if op == "neighbors d2":
            got: Any = sorted(((e.name, d) for e, d in answer), key=lambda p: (p[1], p[0]))
            want: Any = cluster.neighbors
        elif op == "facts_about":
            got, want = {f.fact_id for f in answer}, cluster.facts
        else:
            got, want = [[f.fact_id for f in path] for path in answer], [cluster.path]
        if got != want:
            raise AssertionError(
                f"W9 {op} of {cluster.hub} at {label(self.edges)} edges: got {got!r}, want {want!r}"
            )

    def close(self) -> None:
        self.store.close()
        if self.loader is not None:
            self.loader.close()


def sql_plans(level: Level) -> dict[str, list[str]]:
    """Each traversal's statements with their plans (SQLite lines / PostgreSQL node summary)."""
    import sqlalchemy as sa

    engine = level.store.engine
    cluster = level.clusters[0]
    plans: dict[str, list[str]] = {}
    for op in OPS:
        seen: list[tuple[str, Any]] = []

        def capture(conn: Any, cursor: Any, statement: str, params: Any, *rest: Any) -> None:
            seen.append((statement, params))  # noqa: B023 (run before the loop moves on)

        sa.event.listen(engine, "before_cursor_execute", capture)
        try:
            level.call(op, cluster)
        finally:
            sa.event.remove(engine, "before_cursor_execute", capture)
        lines: list[str] = []
        with engine.connect() as conn:
            for statement, params in seen:
                if engine.dialect.name == "sqlite":
                    plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params)
                    lines.append(" | ".join(str(r[-1]) for r in plan))
                else:
                    plan = conn.exec_driver_sql("EXPLAIN " + statement, params)
                    lines.append(" | ".join(str(r[0]).strip() for r in plan))
        plans[op] = lines
    return plans


# --------------------------------------------------------------------------- the workload


def w9_graph(
    make_level: Callable[[int], Level],
    sizes: W9Sizes,
    seed: int,
    backend: str,
    log: Callable[[str], None],
    *,
    plans: bool = True,
) -> list[Row]:
    """Load each level, then time the traversals round-robin over the levels."""
    levels: list[Level] = []
    loads: dict[str, float] = {}
    try:
        for edges in sizes.levels:
            level = make_level(edges)
            levels.append(level)
            loads[label(edges)] = round(level.load(seed, log), 1)
            if plans:
                level.plans = sql_plans(level)
        for level in levels:  # warm-up: connections, statement caches
            for cluster in level.clusters[:2]:
                for op in OPS:
                    level.check(op, cluster, level.call(op, cluster))
        for n in range(sizes.calls):
            for level in levels if n % 2 == 0 else reversed(levels):
                cluster = level.clusters[n % len(level.clusters)]
                for op in OPS:
                    start = time.perf_counter()
                    answer = level.call(op, cluster)
                    level.samples[op].append(time.perf_counter() - start)
                    level.check(op, cluster, answer)
        return _rows(levels, backend, loads)
    finally:
        for level in levels:
            level.close()


def _rows(levels: Sequence[Level], backend: str, loads: dict[str, float]) -> list[Row]:
    rows: list[Row] = []
    low, high = levels[0], levels[-1]
    for op in OPS:
        stats = {
            label(level.edges): {
                "p50_ms": 1000 * percentile(level.samples[op], 50),
                "p95_ms": 1000 * percentile(level.samples[op], 95),
            }
            for level in levels
        }
        for level in levels:
            s = stats[label(level.edges)]
            rows.append(
                Row(
                    f"W9 {op} @{label(level.edges)} edges",
                    backend,
                    "ms",
                    s["p50_ms"],
                    s["p95_ms"],
                    s["p95_ms"] / s["p50_ms"],
                    None,
                    kind="info",
                    detail={
                        "calls": len(level.samples[op]),
                        "baseline_column": "p95 ms (no hand-written side)",
                        "plans": level.plans.get(op),
                    },
                )
            )
        if high is low:
            continue
        p50 = stats[label(high.edges)]["p50_ms"] / stats[label(low.edges)]["p50_ms"]
        p95 = stats[label(high.edges)]["p95_ms"] / stats[label(low.edges)]["p95_ms"]
        rows.append(
            Row(
                f"W9 {op} {label(low.edges)}->{label(high.edges)}",
                backend,
                "p50 growth",
                p50,
                p95,
                p50,
                GROWTH_TARGET,
                kind="growth",
                detail={"per_level": stats, "load_s": loads, "baseline_column": "p95 growth"},
            )
        )
    return rows


# --------------------------------------------------------------------------- backends


def run_w9(
    runner: Any, backends: Sequence[str], tmpdir: Path, sizes: W9Sizes, mongo_url: str | None
) -> None:
    """W9 on SQLite, PostgreSQL and MongoDB, as ``backends`` asks.

    ``runner`` is :class:`bench.runner.Runner` (``attempt``, ``log``, ``seed``, ``meta``).
    """
    runner.meta["w9_sizes"] = sizes.__dict__
    if "sqlite" in backends:
        from firefly_orm.sql import SQLiteStore

        def sqlite_level(edges: int) -> Level:
            return Level(edges, SQLiteStore(tmpdir / f"w9-{label(edges)}.sqlite3"))

        runner.attempt(
            "sqlite: W9 knowledge graph",
            lambda: w9_graph(sqlite_level, sizes, runner.seed, "sqlite", runner.log),
        )
    if "postgres" in backends:
        try:
            _postgres(runner, sizes)
        except Skip as exc:
            runner.meta["w9_postgres_skipped"] = str(exc)
            runner.log(f"postgres W9 skipped: {exc}")
    if "mongo" in backends:
        try:
            _mongo(runner, sizes, mongo_url)
        except Skip as exc:
            runner.meta["w9_mongo_skipped"] = str(exc)
            runner.log(f"mongo W9 skipped: {exc}")


def _postgres(runner: Any, sizes: W9Sizes) -> None:
    import psycopg
    from sqlalchemy.engine import make_url

    from firefly_orm.errors import redact_url
    from firefly_orm.sql import PostgreSQLStore

    url, source = postgres_url()
    conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        admin = psycopg.connect(conninfo, autocommit=True, connect_timeout=3)
    except psycopg.Error as exc:
        raise Skip(f"Postgres at {redact_url(url)} ({source}) does not answer: {exc}") from None
    run_id = uuid.uuid4().hex[:8]
    schemas: list[str] = []

    def pg_level(edges: int) -> Level:
        schema = f"ffbench_{run_id}_w9_{label(edges)}"
        schemas.append(schema)
        store = PostgreSQLStore(url, schema_name=schema)

        def analyze() -> None:
            admin.execute(f'ANALYZE "{schema}".knowledge_entities, "{schema}".knowledge_facts')

        return Level(edges, store, analyze=analyze)

    try:
        runner.attempt(
            "postgres: W9 knowledge graph",
            lambda: w9_graph(pg_level, sizes, runner.seed, "postgres", runner.log),
        )
    finally:
        for schema in schemas:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        admin.close()


def _mongo(runner: Any, sizes: W9Sizes, mongo_url: str | None) -> None:
    from pymongo import MongoClient

    from bench.mongo import _SUBPROCESS, mongo_server
    from firefly_orm.mongo import MongoDBStore

    with mongo_server(mongo_url) as (server, source):
        run_id = uuid.uuid4().hex[:8]
        databases: list[str] = []
        if source == _SUBPROCESS:
            sizes = W9Sizes((SECANTUS_EDGES,), min(sizes.calls, SECANTUS_CALLS))
            runner.meta["w9_mongo_sizes"] = {
                **sizes.__dict__,
                "why": "SecantusDB's $graphLookup reads the whole facts collection at each hop",
            }

        def mongo_level(edges: int) -> Level:
            name = f"ffbench_{run_id}_w9_{label(edges)}"
            databases.append(name)
            loader: MongoClient[dict[str, Any]] = MongoClient(server, tz_aware=True)
            return Level(edges, MongoDBStore(server, database=name), loader=loader)

        try:
            runner.attempt(
                "mongo: W9 knowledge graph",
                lambda: w9_graph(
                    mongo_level,
                    sizes,
                    runner.seed,
                    "mongo",
                    runner.log,
                    plans=False,
                ),
            )
        finally:
            if source != _SUBPROCESS:
                admin: MongoClient[dict[str, Any]] = MongoClient(server)
                for name in databases:
                    admin.drop_database(name)
                admin.close()
