"""The SQLAlchemy store: lifecycle, migrations, statistics and error mapping.

Its operations are those of :class:`~firefly_orm.sql._operations.StoreOperations`:
each validates its arguments and hands the operation (a function of
:mod:`firefly_orm.sql._ops`, one statement each) to its runner
(:mod:`firefly_orm.sql._runners`), which runs it on the store's engines without
a transaction of its own where the statement is atomic alone; the ``async_*``
twins await the very same function through ``run_sync`` on the native async
driver, or run it on the sync engine in one worker-thread call (SQLite's
default, :data:`ASYNC_IN_THREADS`).  :meth:`SQLAlchemyStore.bind_session`
gives the same store behaviour with a runner that joins a caller's session
(:class:`SessionBoundStore`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Session
from sqlalchemy.schema import ExecutableDDLElement

from firefly_orm import migrate
from firefly_orm.errors import (
    DatabaseConnectionError,
    EntryValidationError,
    FireflyOrmError,
    StoreError,
    redact_url,
    scrub_secret,
)
from firefly_orm.migrate import normalize_url, validate_schema_name
from firefly_orm.sql._engines import Engines, Mode, is_memory_sqlite
from firefly_orm.sql._migration import (
    NO_DDL_IN_SESSION,
    NO_DDL_ON_CALLERS_ENGINE,
    acquire_migration_lock,
    async_acquire_migration_lock,
    refusal_explained,
    release_migration_lock,
    require_head,
    upgrade,
)
from firefly_orm.sql._operations import StoreOperations
from firefly_orm.sql._replica import DEFAULT_REPLICA_WINDOW, ReadRouter
from firefly_orm.sql._runners import EngineRunner, SessionRunner
from firefly_orm.sql._statements import TABLE
from firefly_orm.sql._uow import is_callers_error
from firefly_orm.sql._vectors import VECTORS
from firefly_orm.uow import ClosesOnExit

__all__ = ["ASYNC_IN_THREADS", "SQLAlchemyStore", "SessionBoundStore"]

logger = logging.getLogger("firefly_orm")

#: By database: whether a store built from a URL (no ``async_url=``) runs its
#: async methods on its sync engine in worker threads, one hand-off per
#: operation, instead of on a native async driver.  Chosen by measurement
#: (README, "Performance"): aiosqlite hands every statement, fetch, BEGIN and
#: COMMIT to its own thread and back.
ASYNC_IN_THREADS: dict[str, bool] = {"sqlite": True, "postgresql": False}

# --------------------------------------------------------------------------- statistics


class _Analyze(ExecutableDDLElement):
    """``ANALYZE <table>``; the table name follows the store's schema translation."""

    def __init__(self, table: sa.Table) -> None:
        self.table = table


@compiles(_Analyze)
def _compile_analyze(element: _Analyze, compiler: Any, **kw: Any) -> str:
    return f"ANALYZE {compiler.preparer.format_table(element.table)}"


def _analyze_table(conn: Connection, vectors: bool) -> list[str]:
    """Run ``ANALYZE`` on our table (and the vector table); return the server's warnings.

    PostgreSQL does not fail an ``ANALYZE`` by a role that does not own the
    table: it skips the table with a WARNING, which psycopg hands to notice
    handlers (other drivers drop it, and then nothing is reported).
    """
    warnings: list[str] = []
    driver = conn.connection.driver_connection

    def collect(diagnostic: Any) -> None:
        if getattr(diagnostic, "severity_nonlocalized", None) == "WARNING":
            warnings.append(str(diagnostic.message_primary))

    hooked = callable(getattr(driver, "add_notice_handler", None))
    if hooked:
        driver.add_notice_handler(collect)  # type: ignore[union-attr]
    try:
        conn.execute(_Analyze(TABLE))
        if vectors:
            conn.execute(_Analyze(VECTORS))
    finally:
        if hooked:
            driver.remove_notice_handler(collect)  # type: ignore[union-attr]
    return warnings


# --------------------------------------------------------------------------- the store


class SQLAlchemyStore(StoreOperations, ClosesOnExit):
    """Memory store on SQLAlchemy: SQLite or PostgreSQL, sync and async.

    Args:
        url: Database URL (``sqlite:///path``, ``postgresql+psycopg://...``); the
            store builds (and owns) a sync engine.  Async methods: on
            PostgreSQL an async engine (psycopg async) built on first async
            use; on SQLite the sync engine, each operation (or unit of work run
            by :meth:`async_run_in_unit_of_work`) in one worker-thread call, which
            measured faster than aiosqlite's thread hand-off per statement
            (:data:`ASYNC_IN_THREADS`; pass ``async_url=`` for aiosqlite).
        engine: A caller-owned sync :class:`Engine` (never disposed by us).
            Given alone, the ``async_*`` methods run on it too, in worker
            threads: the store opens no second connection pool.
        async_engine: A caller-owned :class:`AsyncEngine` (never disposed by us).
            Given alone, the store has no sync engine: sync methods raise
            :class:`~firefly_orm.errors.MissingEngineError` (pass ``engine=``
            too) rather than opening a second pool from its URL.
        async_url: URL for the async engine when it differs from ``url`` (with
            ``engine=``: the store builds and owns an async engine from it).
        schema_name: PostgreSQL schema for our tables (``None``: the connection's
            default schema). Not supported on SQLite.
        engine_kwargs: Extra keyword arguments for engines the store creates
            (the replica's too).
        replica_url: A read replica (PostgreSQL streaming standby) of the same
            database: reads and read-only units of work run there, writes and
            every read inside a write on the primary.  Not supported on SQLite.
        replica_window: Read-your-writes: for this many seconds after this
            process wrote through a store on the same primary, its reads stay on
            the primary (set it above the replica's worst replay lag);
            :meth:`consistent_reads` and ``unit_of_work(consistent=True)`` force
            the primary for one block or unit of work.

        migrate: Whether the store may run our migrations (DDL) by itself, on
            first use and in :meth:`initialize`.  ``None`` (default): yes for a
            store built from a URL (it owns its database); NO for a store on
            your engine (``engine=`` / ``async_engine=``) and for every
            operation through your session (:meth:`bind_session`,
            ``unit_of_work(session=...)``): your app owns that schema and its
            migrations (your Alembic with
            :func:`~firefly_orm.migrate.run_with_host`, or
            ``firefly-orm migrate``).  ``False``: never, whatever the store is
            built on.  ``True``: always, also on your engine or session.  A
            store that may not migrate only reads the schema's revision and
            raises :class:`~firefly_orm.errors.MigrationRequiredError` when it
            is not at head: no DDL runs and nothing is written.
        vectors: Keep vectors beside the entries (semantic recall,
            :mod:`firefly_orm.vector`): initialising also migrates (or, not
            migrating, checks) the vector tables
            (:func:`~firefly_orm.migrate.upgrade_vectors`: PostgreSQL needs the
            pgvector extension, SQLite the ``vector`` extra), and a SQLite
            engine built here loads ``sqlite-vec`` into each connection (on
            your own engine, load it yourself: the error says how).  Without
            it the store's units of work refuse vector reads and writes with
            :class:`~firefly_orm.vector.VectorUnavailableError`.

    Operations initialise the store on first use: they run the migrations
    (when the store may, see ``migrate``) or check the schema is at head.  Call
    :meth:`initialize` yourself to fail fast at start-up;
    ``initialize(migrate=True)`` migrates once, explicitly, even on a store
    that does not migrate by itself.

    Ownership: engines the store builds from a URL are disposed by :meth:`close`;
    engines you pass in (``engine=``, ``async_engine=``) are never disposed.
    """

    def __init__(
        self,
        url: str | URL | None = None,
        *,
        engine: Engine | None = None,
        async_engine: AsyncEngine | None = None,
        async_url: str | URL | None = None,
        schema_name: str | None = None,
        engine_kwargs: dict[str, Any] | None = None,
        replica_url: str | URL | None = None,
        replica_window: float = DEFAULT_REPLICA_WINDOW,
        migrate: bool | None = None,
        vectors: bool = False,
    ) -> None:
        if url is None and engine is None and async_engine is None:
            raise EntryValidationError("url", "give a database URL, an engine or an async_engine")
        if url is not None and engine is not None:
            raise EntryValidationError("url", "give either url or engine, not both")
        if migrate is not None and not isinstance(migrate, bool):
            raise EntryValidationError("migrate", f"give True, False or None, not {migrate!r}")
        if not isinstance(vectors, bool):
            raise EntryValidationError("vectors", f"give True or False, not {vectors!r}")
        own = normalize_url(url) if url is not None else None
        self._engines = Engines(
            own,
            engine=engine,
            async_engine=async_engine,
            async_url=normalize_url(async_url) if async_url is not None else None,
            engine_kwargs=engine_kwargs,
            defaults=self._engine_options,
            async_in_threads=own is not None
            and ASYNC_IN_THREADS.get(own.get_backend_name(), False),
        )
        dialect = self._engines.dialect_name
        if dialect not in ("sqlite", "postgresql"):
            raise EntryValidationError(
                "url", f"unsupported database {dialect!r} (SQLite and PostgreSQL are supported)"
            )
        if dialect == "sqlite" and schema_name is not None:
            raise EntryValidationError("schema_name", "SQLite has no schemas; leave it None")
        own_url = self._engines.url
        if dialect == "sqlite" and own_url is not None and is_memory_sqlite(own_url):
            raise EntryValidationError(
                "url",
                "an in-memory SQLite database exists per connection (each thread and the "
                "async engine would see a different, empty one); use InMemoryStore",
            )
        self._schema = self._engines.schema = validate_schema_name(schema_name)
        self._engines.vectors = vectors
        #: The ``migrate=`` option as given (None: decided by what the store is on).
        self._migrate_option = migrate
        self._on_callers_engine = own is None
        self._replica = self._replica_engines(replica_url, dialect, engine_kwargs)
        self._initialized = False
        router = ReadRouter(self._engines, self._replica, replica_window)
        self._runner = _StoreRunner(
            self._engines,
            self._wrap,
            self.ensure_initialized,
            self.async_ensure_initialized,
            router,
            # Through a caller's session: the session's own ensure (no DDL by default).
            in_session=EngineRunner(
                self._engines,
                self._wrap,
                self._ensure_in_session,
                self._async_ensure_in_session,
                router,
            ),
        )

    def _replica_engines(
        self, url: str | URL | None, dialect: str, engine_kwargs: dict[str, Any] | None
    ) -> Engines | None:
        if url is None:
            return None
        if dialect != "postgresql":
            raise EntryValidationError("replica_url", "read replicas are for PostgreSQL only")
        parsed = migrate.normalize_url(url)
        if parsed.get_backend_name() != "postgresql":
            raise EntryValidationError("replica_url", f"not a PostgreSQL URL: {redact_url(parsed)}")
        replica = Engines(
            parsed,
            engine_kwargs=engine_kwargs,
            defaults=self._engine_options,
            async_in_threads=ASYNC_IN_THREADS["postgresql"],
        )
        replica.schema = self._engines.schema
        return replica

    # ------------------------------------------------------------------ engines
    def _engine_options(self, url: URL) -> dict[str, Any]:
        """Per-backend engine arguments; presets override this."""
        return {}

    @property
    def engine(self) -> Engine:
        """The sync engine (with our schema translation applied).

        Raises:
            MissingEngineError: The store was given only an ``async_engine=``.
        """
        return self._engines.sync_engine()

    @property
    def async_engine(self) -> AsyncEngine:
        """The async engine (native async driver, schema translation applied).

        Raises:
            MissingEngineError: The store's async methods run on its sync engine
                in worker threads (given only a sync ``engine=``, or a SQLite
                store without ``async_url=``): it has no async engine.
        """
        return self._engines.async_engine()

    @property
    def schema_name(self) -> str | None:
        """The schema our tables live in (None: the default one / SQLite)."""
        return self._schema

    @property
    def migrates(self) -> bool:
        """Whether the store runs our migrations by itself (on first use, ``initialize()``).

        From the ``migrate=`` option; by default ``True`` for a store built
        from a URL, ``False`` for one on your engine.  Operations through your
        session run them only when ``migrate=True`` was given.
        """
        if self._migrate_option is not None:
            return self._migrate_option
        return not self._on_callers_engine

    @property
    def vectors(self) -> bool:
        """Whether the store keeps vectors (built with ``vectors=True``)."""
        return self._engines.vectors

    @property
    def has_replica(self) -> bool:
        """Whether reads may go to a read replica (``replica_url`` was given)."""
        return self._replica is not None

    # ------------------------------------------------------------------ errors
    @contextmanager
    def _wrap(self, what: str, engines: Engines | None = None) -> Iterator[None]:
        """Turn driver errors raised inside into :mod:`firefly_orm.errors` naming ``what``.

        ``engines``: the server the work ran on (default: the primary), named in
        the message.  The one place errors are classified, for the sync and the
        async path alike (see :meth:`_translated`).  Errors of a caller's own
        objects, flushed before our statements in the caller's session
        (:func:`~firefly_orm.sql._uow.is_callers_error`), pass unchanged: the
        app's ``except IntegrityError`` still sees them.
        """
        try:
            yield
        except FireflyOrmError:
            raise
        except Exception as exc:
            if is_callers_error(exc):
                raise
            translated = self._translated(what, exc, engines or self._engines)
            if translated is None:
                raise
            raise translated from exc

    def _translated(self, what: str, exc: Exception, engines: Engines) -> FireflyOrmError | None:
        """Our error for a driver error of ``what`` on ``engines`` (``None``: not a driver error).

        :class:`DatabaseConnectionError` when the server could not be reached or
        the connection failed (see :func:`_is_connection_problem`), or no pooled
        connection came in time; :class:`StoreError` otherwise.
        """
        if isinstance(exc, sa.exc.TimeoutError):  # no pooled connection within `timeout`
            return DatabaseConnectionError(
                f"{what} timed out waiting for a connection to {engines.display_url()}: {exc}"
            )
        if isinstance(exc, UnicodeError):
            return StoreError(f"{what} failed: text could not be encoded ({exc})")
        if isinstance(exc, sa.exc.IntegrityError):
            return StoreError(
                f"{what} violated a constraint on {engines.display_url()}: {self._short(exc)}"
            )
        if isinstance(exc, sa.exc.DBAPIError):
            kind = DatabaseConnectionError if _is_connection_problem(exc) else StoreError
            return kind(f"{what} failed on {engines.display_url()}: {self._short(exc)}")
        if isinstance(exc, sa.exc.SQLAlchemyError):
            return StoreError(f"{what} failed on {engines.display_url()}: {self._short(exc)}")
        if isinstance(exc, OSError):
            text = scrub_secret(str(exc), self._secrets())
            return DatabaseConnectionError(f"{what} failed on {engines.display_url()}: {text}")
        return None

    def _where(self) -> str:
        return self._engines.display_url()

    def _secrets(self) -> tuple[str, ...]:
        replica = self._replica.secrets() if self._replica is not None else ()
        return self._engines.secrets() + replica

    def _short(self, exc: sa.exc.SQLAlchemyError) -> str:
        """The driver's message, first line only, our URLs' secrets scrubbed."""
        orig = getattr(exc, "orig", None)
        text = str(orig) if orig is not None else str(exc).split("\n", 1)[0]
        return scrub_secret(text.strip().split("\n", 1)[0], self._secrets())

    # ------------------------------------------------------------------ lifecycle
    def initialize(self, *, migrate: bool | None = None) -> None:
        """Create or upgrade our tables, or check them (idempotent; thread- and process-safe).

        Args:
            migrate: ``True`` runs the Alembic migrations (under an advisory
                lock on PostgreSQL, ``BEGIN IMMEDIATE`` on SQLite).  ``False``
                never runs DDL: it only reads the schema's revision and raises
                :class:`MigrationRequiredError` when it is not at head — for
                processes whose role has DML rights only, and for apps whose
                own Alembic migrates our tables.  ``None`` (default): the
                store's ``migrate=`` option (:attr:`migrates`: ``True`` for a
                store built from a URL, ``False`` on your engine).

        Raises:
            MigrationRequiredError: Not at head and not migrating.  When our
                tables are at head in another schema (a store built without
                the ``schema_name=`` your app uses), the message names that
                schema and says to check ``schema_name=``.
        """
        if not self._initialized:
            self._initialize(*self._plan(migrate, in_session=False))

    def _plan(self, migrate: bool | None, *, in_session: bool) -> tuple[bool, str]:
        """Whether to migrate, and what a refusal adds when the store chose not to.

        ``migrate``: the caller's explicit choice (``None``: the store's option;
        through a session, no DDL unless the store was built with ``migrate=True``).
        """
        if migrate is not None:
            return migrate, ""
        if in_session:
            if self._migrate_option is None:
                return False, NO_DDL_IN_SESSION
            return self._migrate_option, ""
        if self.migrates or self._migrate_option is False:
            return self.migrates, ""
        return False, NO_DDL_ON_CALLERS_ENGINE

    def _initialize(self, migrate: bool, hint: str) -> None:
        """:meth:`initialize` once planned (see :meth:`_plan`)."""
        acquire_migration_lock()
        try:
            if self._initialized:
                return
            # The connection is opened here, inside _wrap, as on the async path:
            # one classification of connection failures for both.
            with self._wrap("initialize"), refusal_explained(hint):
                with self._engines.sync_engine("write" if migrate else "default").connect() as conn:
                    (upgrade if migrate else require_head)(conn, self._schema, self.vectors)
                self._after_initialize()
            self._runner.router.wrote()  # the replica may lag behind a fresh schema
            self._initialized = True
        finally:
            release_migration_lock()
        logger.debug("store initialised on %s", self._where())

    def _after_initialize(self) -> None:
        """Hook for presets (e.g. warming the pool); runs once, under the init lock."""

    async def async_initialize(self, *, migrate: bool | None = None) -> None:
        """Async twin of :meth:`initialize` (Alembic runs on the async engine via run_sync)."""
        if not self._initialized:
            await self._async_initialize(*self._plan(migrate, in_session=False))

    async def _async_initialize(self, migrate: bool, hint: str) -> None:
        """Async twin of :meth:`_initialize`."""
        await async_acquire_migration_lock()
        try:
            if self._initialized:
                return
            with self._wrap("initialize"), refusal_explained(hint):
                mode: Mode = "write" if migrate else "default"
                async with self._engines.async_target(mode).connect() as conn:
                    await conn.run_sync(
                        upgrade if migrate else require_head, self._schema, self.vectors
                    )
            self._runner.router.wrote()
            self._initialized = True
        finally:
            release_migration_lock()

    def ensure_initialized(self) -> None:
        """Initialise on first use (called by every operation)."""
        if not self._initialized:
            self.initialize()

    async def async_ensure_initialized(self) -> None:
        """Async twin of :meth:`ensure_initialized`."""
        if not self._initialized:
            await self.async_initialize()

    def _ensure_in_session(self) -> None:
        """Initialise on first use through a caller's session: migrate only if told to."""
        if not self._initialized:
            self._initialize(*self._plan(None, in_session=True))

    async def _async_ensure_in_session(self) -> None:
        """Async twin of :meth:`_ensure_in_session`."""
        if not self._initialized:
            await self._async_initialize(*self._plan(None, in_session=True))

    def close(self) -> None:
        """Dispose the engines this store created (never a caller's engine).

        The store can be used again afterwards (it builds new engines).  Inside
        a running event loop prefer ``await store.async_close()``.
        """
        self._engines.close()
        if self._replica is not None:
            self._replica.close()
        self._initialized = False

    async def async_close(self) -> None:
        """Async twin of :meth:`close`."""
        await self._engines.aclose()
        if self._replica is not None:
            await self._replica.aclose()
        self._initialized = False

    # ------------------------------------------------------------------ statistics
    def analyze(self) -> bool:
        """Refresh the query planner's statistics of our table, in a transaction of its own.

        PostgreSQL: ``ANALYZE <schema>.memory_entries`` (and ``memory_vectors``
        on a store built with ``vectors=True``: without its statistics the planner
        takes a freshly imported vector table for one row and scans it).  Until a table is
        analyzed the planner guesses how many rows a conversation has; after
        a bulk import it guesses far too few and reads the whole conversation
        and sorts it instead of walking the index (autovacuum analyzes the
        table only later).  :meth:`ConversationMemory.import_conversations
        <firefly_orm.conversation.ConversationMemory.import_conversations>`
        calls this after its commit when it wrote many turns
        (:data:`~firefly_orm.conversation._transfer.ANALYZE_AFTER_ROWS`).

        SQLite: nothing (returns ``False``).  Its planner already serves every
        read of ours from our indexes without statistics, and ``ANALYZE`` there
        changed no history read's plan (it only made the head lookup sort its
        one row).

        A role that may not analyze the table (not its owner: the README's
        DML-only application role) gets a logged WARNING, not an error; the
        statistics then wait for autovacuum.

        Returns:
            ``True`` when the database refreshed the statistics.

        Raises:
            StoreError: The database failed (e.g. the connection was lost).
        """
        if self._engines.dialect_name != "postgresql":
            return False
        return self._analyzed(
            self._runner.call("analyze", _analyze_table, self.vectors, write=True)
        )

    async def async_analyze(self) -> bool:
        """Async twin of :meth:`analyze` (runs on the native async driver)."""
        if self._engines.dialect_name != "postgresql":
            return False
        return self._analyzed(
            await self._runner.acall("analyze", _analyze_table, self.vectors, write=True)
        )

    def _analyzed(self, warnings: list[str]) -> bool:
        for warning in warnings:
            logger.warning(
                "ANALYZE of the memory table on %s was skipped by the server: %s "
                "(its planner statistics wait for autovacuum)",
                self._where(),
                warning,
            )
        if not warnings:
            logger.debug("analyzed the memory table on %s", self._where())
        return not warnings

    # ------------------------------------------------------------------ embedding
    def bind_session(self, session: Session | AsyncSession) -> SessionBoundStore:
        """A view of this store whose every write joins ``session``'s transaction.

        Give it to the memory layers to make their writes part of your
        transaction::

            with Session(engine) as session:
                session.add(Order(...))
                memory = MemoryManager(store=store.bind_session(session))
                memory.add_turn(cid, prompt, answer)
                session.commit()          # the order and the turn, or neither

        Each operation runs in a SAVEPOINT of your transaction; your commit or
        rollback decides.  A sync ``Session`` gives the sync methods, an
        ``AsyncSession`` the ``async_*`` ones.  Through your session the store
        runs no DDL unless it was built with ``migrate=True``: its first
        operation checks our tables are at head and raises
        :class:`~firefly_orm.errors.MigrationRequiredError` otherwise.
        """
        return SessionBoundStore(self, session)

    def __repr__(self) -> str:
        schema = f", schema_name={self._schema!r}" if self._schema else ""
        if self._replica is not None:
            schema += f", replica_url={self._replica.display_url()!r}"
        return f"{type(self).__name__}({self._where()!r}{schema})"


class _StoreRunner(EngineRunner):
    """A store's own runner; joined to a caller's session, it initialises the session's way.

    ``in_session``: the same engines, router and error mapping, with the
    ensure callbacks of work through a caller's session (which runs no DDL
    unless the store was built with ``migrate=True``).
    """

    def __init__(self, *args: Any, in_session: EngineRunner, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_session = in_session

    def join(self, session: Session | AsyncSession) -> SessionRunner:
        return SessionRunner(session, self._in_session)


class SessionBoundStore(StoreOperations):
    """A :class:`SQLAlchemyStore` whose operations join a caller's session.

    Made by :meth:`SQLAlchemyStore.bind_session`: the same operations as the
    store, run by a runner that opens a SAVEPOINT of the caller's transaction
    for each of them (and for each unit of work), so nothing is committed until
    the caller commits.  ``read_only`` is accepted and changes nothing.

    It has no :meth:`SQLAlchemyStore.analyze`: rows written in the caller's
    transaction are not committed yet, so imports through it skip the
    statistics refresh; call ``store.analyze()`` after your commit instead.
    """

    def __init__(self, store: SQLAlchemyStore, session: Session | AsyncSession) -> None:
        self.store = store
        self.session = session
        self._runner = store._runner.join(session)


# --------------------------------------------------------------------------- error kinds

_CONNECTION_WORDS = (
    "connect",
    "unable to open database",
    "server closed",
    "terminating connection",
    "timeout expired",
    "network",
)
#: SQLSTATE classes of connection problems: 08 = connection exception, 57P0x =
#: the server is shutting down or restarting (admin/crash shutdown, cannot connect now).
_CONNECTION_STATES = ("08", "57P0")


def _is_connection_problem(exc: sa.exc.DBAPIError) -> bool:
    """Whether a driver error means the database could not be reached or the connection failed.

    PostgreSQL (psycopg's errors carry a ``sqlstate``): a server-sent SQLSTATE
    of class 08 or 57P0x; or no SQLSTATE at all, which is psycopg's own report
    that no server answered: the host did not resolve, the connection was
    refused or timed out, the server (or a pooler) refused the login, or the
    connection broke.  Those arrive the same way from the sync and the async
    driver, at ``initialize()`` or at any later operation.

    Other errors (a locked SQLite database, a deadlock, a statement timeout, a
    write on a read-only replica, a missing table) are :class:`StoreError`, so
    retry logic keyed on :class:`DatabaseConnectionError` only sees real
    connection problems.
    """
    if exc.connection_invalidated:
        return True
    orig = exc.orig
    if hasattr(orig, "sqlstate"):
        state = getattr(orig, "sqlstate", None)
        if state:
            return bool(state.startswith(_CONNECTION_STATES))
        # statement None: raised while connecting (or by COMMIT/ROLLBACK themselves)
        return isinstance(exc, sa.exc.OperationalError) or exc.statement is None
    if not isinstance(exc, sa.exc.OperationalError | sa.exc.InterfaceError):
        return False
    text = str(orig).lower()
    return any(word in text for word in _CONNECTION_WORDS)
