"""``python -m bench``: run the workloads on SQLite and Postgres, print and save results."""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import sqlite3
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import artifacts, cells, minimal, peers, plain_orm, raw, recall, workloads
from bench.common import (
    FULL,
    QUICK,
    UNLIMITED,
    W5_KEPT_TURNS,
    Row,
    Sizes,
    Skip,
    TextPool,
    budget_for_turns,
    postgres_url,
)
from bench.ours import AsyncOurs, Ours
from bench.report import async_table, cells_table, table, targets_table, write_json

DURABILITY = (
    "Durability: SQLite in WAL mode with synchronous=FULL on both sides; Postgres with the "
    "default synchronous_commit=on on both sides; one transaction (one commit) per turn / "
    "per working-memory write on both sides."
)


CELLS_LEGEND = (
    "W1-W3: per op = median over {rounds} rounds of the mean (W1, W3) or median (W2) time "
    "per operation; x minimal / x same-work = its cost over the hand-written driver code's "
    "(minimal: insert the messages, ORDER BY id [DESC LIMIT n], upsert a key; same-work: "
    "what the library stores, head row and versions), min-max over the rounds; ours / it = "
    "firefly_orm's cost over its (below 1x: firefly_orm is faster)."
)

#: The workload ids ``--only`` accepts.
WORKLOADS = ("W1", "W2", "W3", "W4", "W5", "W5b", "W6", "W7", "W8", "W9", "W10", "async")


class Runner:
    """Collects rows and errors; runs each workload guarded so one failure never stops the rest."""

    def __init__(self, sizes: Sizes, seed: int, only: frozenset[str] | None = None) -> None:
        self.sizes = sizes
        self.seed = seed
        self.only = only
        self.rows: list[Row] = []
        self.cells: list[cells.CellResult] = []
        self.errors: list[str] = []
        self.meta: dict[str, Any] = {}
        self.started = time.perf_counter()

    def log(self, message: str) -> None:
        print(f"[{time.perf_counter() - self.started:6.1f}s] {message}", flush=True)

    def attempt(self, what: str, fn: Callable[[], Any]) -> Any:
        self.log(what)
        try:
            result = fn()
        except Exception as exc:
            self.errors.append(f"{what}: {type(exc).__name__}: {exc}")
            self.log(f"  FAILED: {type(exc).__name__}: {exc}")
            traceback.print_exc(limit=6)
            return None
        if isinstance(result, Row):
            self.rows.append(result)
        elif isinstance(result, list) and all(isinstance(r, Row) for r in result):
            self.rows.extend(result)
        return result

    def wants(self, *workloads: str) -> bool:
        """Whether any of these workloads runs (``--only``; every workload by default)."""
        return self.only is None or any(w in self.only for w in workloads)

    # ------------------------------------------------------------------ one backend
    def run_backend(
        self,
        backend: str,
        make_pair: Callable[..., tuple[Any, Any]],
        durability: Callable[[Any, Any], dict[str, Any]],
        entries: Callable[[], list[cells.Entry]],
        async_entries: Callable[[], list[cells.Entry]] | None,
        make_recall_pair: Callable[[str], tuple[Any, Any]],
        make_artifact_pair: Callable[[str], tuple[Any, Any]],
        make_async_artifact_pair: Callable[[], tuple[Any, Any]] | None,
    ) -> None:
        sizes, seed = self.sizes, self.seed
        pool = TextPool(seed)
        if self.wants("W1", "W2", "W3"):
            self._cells(backend, entries, durability)
        if self.wants("W4"):
            self.attempt(
                f"{backend}: W4 scale",
                lambda: workloads.w4_scale(make_pair, sizes, pool, backend, seed, self.log),
            )
        w5_budget = budget_for_turns(pool.turn_tokens, W5_KEPT_TURNS)
        if self.wants("W5"):
            self.attempt(
                f"{backend}: W5 long conversation",
                lambda: workloads.w5_long(
                    lambda label: make_pair(label, max_tokens=w5_budget), sizes, pool, backend
                ),
            )
        if self.wants("W5b"):
            self.attempt(
                f"{backend}: W5b long conversation without eviction",
                lambda: workloads.w5_long(make_pair, sizes, pool, backend, evict=False),
            )
        if self.wants("W6"):
            self.attempt(
                f"{backend}: W6 long-term recall",
                lambda: recall.w6_recall(make_recall_pair, sizes, seed, backend, self.log),
            )
        if self.wants("W7"):
            self.attempt(
                f"{backend}: W7 artifact CAS write / read",
                lambda: artifacts.w7_artifacts(
                    make_artifact_pair, sizes, pool, backend, seed, durability
                ),
            )
            if make_async_artifact_pair is not None:
                artifact_factory = make_async_artifact_pair
                self.attempt(
                    f"{backend} async: W7 artifact CAS write / read",
                    lambda: asyncio.run(
                        self._async_artifacts(artifact_factory, f"{backend} async", pool)
                    ),
                )
        if async_entries is not None and self.wants("async"):
            self._async_cells(backend, async_entries)

    def _cells(
        self,
        backend: str,
        entries: Callable[[], list[cells.Entry]],
        durability: Callable[[Any, Any], dict[str, Any]] | None,
    ) -> None:
        """W1-W3 on the sync APIs: every implementation of :func:`entries`, compared."""
        built = self.attempt(f"{backend}: set-up W1-W3", entries)
        if built is None:
            return
        comparison = cells.Comparison(backend, "sync", built, self.sizes, self.seed, self.log)
        try:
            if durability is not None:
                ours, base = (_impl(built, cells.OURS), _impl(built, cells.SAME_WORK))
                if ours is not None and base is not None:
                    self.attempt(
                        f"{backend}: durability settings",
                        lambda: self.meta.setdefault("durability", {}).update(
                            {backend: durability(ours, base)}
                        ),
                    )
            results = self.attempt(
                f"{backend}: W1-W3 ({len(built)} implementations, {self.sizes.rounds} rounds)",
                lambda: cells.run_sync(comparison),
            )
            self.cells.extend(results or [])
        finally:
            cells.close_sync(built, self.log)
            self.errors.extend(comparison.errors)

    def _async_cells(self, backend: str, entries: Callable[[], list[cells.Entry]]) -> None:
        """W1-W3 on the async APIs."""

        async def run() -> list[cells.CellResult]:
            built = entries()
            comparison = cells.Comparison(backend, "async", built, self.sizes, self.seed, self.log)
            try:
                await cells.open_async(comparison)
                return await cells.run_async(comparison)
            finally:
                await cells.close_async(built, self.log)
                self.errors.extend(comparison.errors)

        results = self.attempt(f"{backend} async: W1-W3", lambda: asyncio.run(run()))
        self.cells.extend(results or [])

    async def _async_artifacts(
        self, factory: Callable[[], tuple[Any, Any]], backend: str, pool: TextPool
    ) -> list[Row]:
        ours, base = factory()
        try:
            return await artifacts.async_w7_artifacts(
                ours, base, self.sizes, pool, backend, self.seed
            )
        finally:
            await ours.close()
            await base.close()

    # ------------------------------------------------------------------ SQLite
    def run_sqlite(self, tmp: Path, with_async: bool) -> None:
        from firefly_orm.sql import SQLiteStore

        def make_pair(label: str, max_tokens: int | None = None) -> tuple[Any, Any]:
            ours = Ours(SQLiteStore(tmp / f"ours-{label}.sqlite3"), max_tokens=max_tokens)
            base = raw.RawSQLite(
                str(tmp / f"raw-{label}.sqlite3"), max_tokens=max_tokens or UNLIMITED
            )
            return ours, base

        def entries() -> list[cells.Entry]:
            return sqlite_entries(tmp, asynchronous=False)

        def async_entries() -> list[cells.Entry]:
            return sqlite_entries(tmp, asynchronous=True)

        def make_recall_pair(label: str) -> tuple[Any, Any]:
            ours = recall.SQLOurs(SQLiteStore(tmp / f"ours-{label}.sqlite3"))
            return ours, recall.RawSQLiteRecall(str(tmp / f"raw-{label}.sqlite3"))

        def make_artifact_pair(label: str) -> tuple[Any, Any]:
            ours = artifacts.OursArtifacts(SQLiteStore(tmp / f"ours-{label}.sqlite3"))
            return ours, artifacts.RawSQLiteArtifacts(str(tmp / f"raw-{label}.sqlite3"))

        def make_async_artifact_pair() -> tuple[Any, Any]:
            ours = artifacts.AsyncOursArtifacts(SQLiteStore(tmp / "ours-w7-async.sqlite3"))
            return ours, artifacts.AsyncRawSQLiteArtifacts(str(tmp / "raw-w7-async.sqlite3"))

        def durability(ours: Any, base: Any) -> dict[str, Any]:
            with ours.store.engine.connect() as conn:
                mine = {
                    "journal_mode": conn.exec_driver_sql("PRAGMA journal_mode").scalar(),
                    "synchronous": conn.exec_driver_sql("PRAGMA synchronous").scalar(),
                }
            return {"ours": mine, "baseline": base.durability(), "note": "synchronous 2 = FULL"}

        self.run_backend(
            "sqlite",
            make_pair,
            durability,
            entries,
            async_entries if with_async else None,
            make_recall_pair,
            make_artifact_pair,
            make_async_artifact_pair if with_async else None,
        )

    # ------------------------------------------------------------------ Postgres
    def run_postgres(self, with_async: bool) -> None:
        import psycopg
        from sqlalchemy.engine import make_url

        from firefly_orm.errors import redact_url
        from firefly_orm.sql import PostgreSQLStore

        url, source = postgres_url()
        parsed = make_url(url)
        conninfo = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
        try:
            admin = psycopg.connect(conninfo, autocommit=True, connect_timeout=3)
        except psycopg.Error as exc:
            raise Skip(f"Postgres at {redact_url(url)} ({source}) does not answer: {exc}") from None
        run_id = uuid.uuid4().hex[:8]
        schemas: list[str] = []
        self.meta["postgres"] = {
            "url": redact_url(url),
            "source": source,
            "server_version": admin.info.server_version,
        }
        self.log(f"postgres: {redact_url(url)} ({source}), schemas ffbench_{run_id}_*")

        def names(label: str) -> tuple[str, str]:
            ours_schema, raw_schema = f"ffbench_{run_id}_{label}", f"ffbench_{run_id}_{label}_raw"
            schemas.extend((ours_schema, raw_schema))
            return ours_schema, raw_schema

        def make_pair(label: str, max_tokens: int | None = None) -> tuple[Any, Any]:
            ours_schema, raw_schema = names(label)
            ours = Ours(PostgreSQLStore(url, schema_name=ours_schema), max_tokens=max_tokens)
            base = raw.RawPostgres(conninfo, raw_schema, max_tokens=max_tokens or UNLIMITED)
            return ours, base

        def cell_schema(label: str) -> str:
            schema = f"ffbench_{run_id}_cells_{label}"
            schemas.append(schema)
            admin.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            return schema

        def entries() -> list[cells.Entry]:
            return postgres_entries(url, cell_schema, asynchronous=False)

        def async_entries() -> list[cells.Entry]:
            return postgres_entries(url, cell_schema, asynchronous=True)

        def make_recall_pair(label: str) -> tuple[Any, Any]:
            ours_schema, raw_schema = names(label)
            ours = recall.SQLOurs(PostgreSQLStore(url, schema_name=ours_schema))
            return ours, recall.RawPostgresRecall(conninfo, raw_schema)

        def make_artifact_pair(label: str) -> tuple[Any, Any]:
            ours_schema, raw_schema = names(label)
            ours = artifacts.OursArtifacts(PostgreSQLStore(url, schema_name=ours_schema))
            return ours, artifacts.RawPostgresArtifacts(conninfo, raw_schema)

        def make_async_artifact_pair() -> tuple[Any, Any]:
            ours_schema, raw_schema = names("w7_async")
            ours = artifacts.AsyncOursArtifacts(PostgreSQLStore(url, schema_name=ours_schema))
            return ours, artifacts.AsyncRawPostgresArtifacts(conninfo, raw_schema)

        def durability(ours: Any, base: Any) -> dict[str, Any]:
            with ours.store.engine.connect() as conn:
                mine = conn.exec_driver_sql("SHOW synchronous_commit").scalar()
            return {"ours": {"synchronous_commit": mine}, "baseline": base.durability()}

        try:
            self.run_backend(
                "postgres",
                make_pair,
                durability,
                entries,
                async_entries if with_async else None,
                make_recall_pair,
                make_artifact_pair,
                make_async_artifact_pair if with_async else None,
            )
        finally:
            for schema in schemas:
                admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            admin.close()
            self.log(f"postgres: dropped {len(schemas)} bench schemas")


def sqlite_entries(directory: Path, *, asynchronous: bool) -> list[cells.Entry]:
    """Every W1-W3 implementation on SQLite, each with its own file in ``directory``."""
    from firefly_orm.sql import SQLiteStore

    suffix = "-async" if asynchronous else ""

    def path(label: str) -> str:
        return str(directory / f"cells-{label}{suffix}.sqlite3")

    place = peers.Place(sqlite_path=path)
    if asynchronous:
        return _entries(
            "aiosqlite",
            lambda: minimal.AsyncMinimalSQLite(path("minimal")),
            lambda: raw.AsyncRawSQLite(path("raw")),
            lambda: AsyncOurs(SQLiteStore(path("ours"))),
            lambda: AsyncOurs(SQLiteStore(path("ours-unindexed")), text_search=False),
            lambda: plain_orm.AsyncPlainORM(
                peers.durable_sqlite_engine(path("plain-orm"), asynchronous=True)
            ),
            peers.async_peers("sqlite", place),
            asynchronous=True,
        )
    return _entries(
        "sqlite3",
        lambda: minimal.MinimalSQLite(path("minimal")),
        lambda: raw.RawSQLite(path("raw")),
        lambda: Ours(SQLiteStore(path("ours"))),
        lambda: Ours(SQLiteStore(path("ours-unindexed")), text_search=False),
        lambda: plain_orm.PlainORM(
            peers.durable_sqlite_engine(path("plain-orm"), asynchronous=False)
        ),
        peers.sync_peers("sqlite", place),
    )


def postgres_entries(
    url: str, schema: Callable[[str], str], *, asynchronous: bool
) -> list[cells.Entry]:
    """Every W1-W3 implementation on PostgreSQL at ``url`` (``postgresql+psycopg://``).

    ``schema(label)`` creates a new schema and returns its name (the caller drops
    them); each implementation gets its own.
    """
    from sqlalchemy.engine import make_url

    from firefly_orm.sql import PostgreSQLStore

    conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    suffix = "_async" if asynchronous else ""

    def named(label: str) -> str:
        return schema(label + suffix)

    place = peers.Place(pg_url=url, pg_conninfo=conninfo, pg_schema=named)
    if asynchronous:
        return _entries(
            "psycopg async",
            lambda: minimal.AsyncMinimalPostgres(conninfo, named("minimal")),
            lambda: raw.AsyncRawPostgres(conninfo, named("raw")),
            lambda: AsyncOurs(PostgreSQLStore(url, schema_name=named("ours"))),
            lambda: AsyncOurs(
                PostgreSQLStore(url, schema_name=named("ours_unindexed")), text_search=False
            ),
            lambda: plain_orm.AsyncPlainORM(
                peers.postgres_engine(url, named("plain_orm"), asynchronous=True)
            ),
            peers.async_peers("postgres", place),
            asynchronous=True,
        )
    return _entries(
        "psycopg",
        lambda: minimal.MinimalPostgres(conninfo, named("minimal")),
        lambda: raw.RawPostgres(conninfo, named("raw")),
        lambda: Ours(PostgreSQLStore(url, schema_name=named("ours"))),
        lambda: Ours(PostgreSQLStore(url, schema_name=named("ours_unindexed")), text_search=False),
        lambda: plain_orm.PlainORM(
            peers.postgres_engine(url, named("plain_orm"), asynchronous=False)
        ),
        peers.sync_peers("postgres", place),
    )


def _entries(
    driver: str,
    make_minimal: Callable[[], Any],
    make_raw: Callable[[], Any],
    make_ours: Callable[[], Any],
    make_unindexed: Callable[[], Any],
    make_anchor: Callable[[], Any],
    peer_entries: list[cells.Entry],
    *,
    asynchronous: bool = False,
) -> list[cells.Entry]:
    """One comparison's implementations: minimal and same-work driver code, ours (also
    with ``text_search=False``, appends only), the plain SQLAlchemy ORM code, peers."""
    budget = budget_for_turns(TextPool(0).turn_tokens, cells.LAST_N // 2)
    same = cells.AsyncSameWork if asynchronous else cells.SameWork
    mine = cells.AsyncOursCells if asynchronous else cells.OursCells
    every = frozenset(cells.CELLS)
    return [
        cells.entry(f"raw minimal ({driver})", cells.MINIMAL, every, make_minimal),
        cells.entry(
            f"raw same-work ({driver})", cells.SAME_WORK, every, lambda: same(make_raw(), budget)
        ),
        cells.entry("firefly_orm", cells.OURS, every, lambda: mine(make_ours(), budget)),
        cells.entry(
            cells.UNINDEXED_LABEL,
            cells.OURS_UNINDEXED,
            frozenset({cells.W1}),
            lambda: mine(make_unindexed(), budget),
        ),
        cells.entry(plain_orm.LABEL, cells.ANCHOR, every, make_anchor),
        *peer_entries,
    ]


def _impl(entries: list[cells.Entry], role: str) -> Any:
    """The library or baseline object under the entry of ``role`` (``None`` when absent)."""
    for entry in entries:
        if entry.role == role and entry.impl is not None:
            return getattr(entry.impl, "impl", entry.impl)
    return None


def _fs_type(path: Path) -> str:
    best, kind = "", "unknown"
    try:
        with open("/proc/mounts") as mounts:
            for line in mounts:
                parts = line.split()
                if len(parts) > 2 and str(path).startswith(parts[1]) and len(parts[1]) > len(best):
                    best, kind = parts[1], parts[2]
    except OSError:
        pass
    return kind


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version}
    for name in ("firefly-orm", "sqlalchemy", "psycopg", "aiosqlite"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "-"
    return found


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks; 0 when every workload ran (targets missed are reported, not errors)."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes (about 30 s)")
    parser.add_argument(
        "--backend",
        action="append",
        choices=("sqlite", "postgres", "mongo"),
        help="run only this backend (repeatable; default all three)",
    )
    parser.add_argument(
        "--mongo-url",
        help="MongoDB for the mongo rows (default: $FIREFLY_ORM_TEST_MONGO_URL, else a "
        "SecantusDB subprocess when installed, else the rows are skipped)",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=WORKLOADS,
        help="run only this workload (repeatable; default all; W2 also runs W1, whose "
        "conversations it reads; W6 includes W6b)",
    )
    parser.add_argument("--no-async", action="store_true", help="skip the async rows")
    parser.add_argument(
        "--w8-100k",
        action="store_true",
        help="W8 (semantic recall) at 10k and 100k items instead of 1k and 10k (longer set-up)",
    )
    parser.add_argument(
        "--w9-1m",
        action="store_true",
        help="W9 (knowledge graph) at 10k, 100k and 1M edges instead of 10k and 100k "
        "(loading 1M takes minutes)",
    )
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--tmpdir", help="where the SQLite files go (default: a new temp dir)")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="profile W1 and W2 (with --only W7: W7) on SQLite (W7: or --backend postgres) "
        "with pyinstrument instead of benchmarking",
    )
    args = parser.parse_args(argv)
    if args.profile:
        from bench.profile import main as profile_main

        return profile_main(
            quick=args.quick,
            seed=args.seed,
            only=frozenset(args.only or ()),
            backend=(args.backend or ["sqlite"])[0],
            tmpdir=args.tmpdir,
        )

    sizes = QUICK if args.quick else FULL
    runner = Runner(sizes, args.seed, frozenset(args.only) if args.only else None)
    backends = args.backend or ["sqlite", "postgres", "mongo"]
    tmp = Path(tempfile.mkdtemp(prefix="firefly-bench-", dir=args.tmpdir))
    runner.meta.update(
        {
            "quick": args.quick,
            "sizes": sizes.__dict__,
            "seed": args.seed,
            "only": sorted(args.only) if args.only else None,
            "machine": {
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
                "tmpdir": str(tmp),
                "tmpdir_fs": _fs_type(tmp),
                "loadavg_start": os.getloadavg(),
            },
            "versions": _versions(),
            "peer_versions": peers.versions(),
            "durability_statement": DURABILITY,
        }
    )
    print(f"firefly_orm benchmarks ({'quick' if args.quick else 'full'} run)")
    print(DURABILITY)
    print(f"SQLite files in {tmp} ({_fs_type(tmp)}); {os.cpu_count()} CPUs; {_versions()}")
    print(f"peers: {peers.versions()}")
    load = os.getloadavg()[0]
    if load > (os.cpu_count() or 1):
        print(
            f"WARNING: load average {load:.1f} on {os.cpu_count()} CPUs: other processes compete "
            "for CPU and disk, so the numbers will be noisy (ratios less so: the two sides are "
            "interleaved operation by operation)."
        )
    skipped: dict[str, str] = {}
    try:
        if "sqlite" in backends:
            runner.run_sqlite(tmp, with_async=not args.no_async)
        if "postgres" in backends:
            try:
                runner.run_postgres(with_async=not args.no_async)
            except Skip as exc:
                skipped["postgres"] = str(exc)
                runner.log(f"postgres rows skipped: {exc}")
        if "mongo" in backends:
            from bench.mongo import run_mongo

            try:
                run_mongo(runner, args.mongo_url)
            except Skip as exc:
                skipped["mongo"] = str(exc)
                runner.log(f"mongo rows skipped: {exc}")
        if runner.wants("W8"):
            from bench import vectors

            w8 = vectors.W8_QUICK if args.quick else vectors.W8_FULL
            vectors.run_w8(runner, backends, tmp, vectors.W8_LARGE if args.w8_100k else w8)
        if runner.wants("W9"):
            from bench import graph

            w9 = graph.W9_QUICK if args.quick else graph.W9_FULL
            graph.run_w9(
                runner, backends, tmp, graph.W9_LARGE if args.w9_1m else w9, args.mongo_url
            )
        if runner.wants("W10"):
            from bench import listing

            mine = listing.SIZES["quick" if args.quick else "full"]
            runner.attempt(
                "W10 conversation list pages",
                lambda: listing.run(mine, args.mongo_url, tuple(backends)),
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    runner.meta["skipped"] = skipped
    runner.meta["elapsed_s"] = round(time.perf_counter() - runner.started, 1)
    runner.meta["machine"]["loadavg_end"] = os.getloadavg()
    print()
    if runner.cells:
        print(cells_table(runner.cells))
        print()
        print(CELLS_LEGEND.format(rounds=sizes.rounds))
        for extra in (async_table(runner.cells), targets_table(runner.cells)):
            if extra:
                print()
                print(extra)
        print()
    if runner.rows:
        print(table(runner.rows))
        print()
        print(
            "ratio = our cost as a multiple of the same-work raw driver code's (time per "
            "operation; lower is better); growth rows: latency at the largest size / at the "
            "smallest."
        )
    print(DURABILITY)
    for name, reason in skipped.items():
        print(f"{name} skipped: {reason}")
    for error in runner.errors:
        print(f"ERROR {error}")
    path = write_json(runner.rows, runner.meta, runner.errors, runner.cells)
    print(f"results: {path}  ({runner.meta['elapsed_s']} s)")
    return 1 if runner.errors else 0


if __name__ == "__main__":
    sys.exit(main())
