"""The crossings between sync and async code: three landings, housed here and nowhere else.

firefly_orm writes every piece of I/O logic once and reaches it from both worlds.
Where one world calls into the other it lands on one of three landings, each a
module of this package.  No module outside ``firefly_orm/bridges/`` calls
``asyncio.to_thread``, ``run_coroutine_threadsafe``, ``asyncio.run``,
``run_in_executor`` or ``get_running_loop`` (``tests/unit/test_bridges_rule.py``
reads every module to keep it so).  Adding a user means adding it to the list
of its landing below.

1. **Threads** (:mod:`firefly_orm.bridges._threads`): blocking sync code run from
   async code in a worker thread (:func:`~firefly_orm.bridges._threads.call_blocking`),
   and once the other way, a sync ``close()`` finishing an async clean-up
   (:func:`~firefly_orm.bridges._threads.finish_from_sync`).  Users:

   * :class:`~firefly_orm.bridges.twins.AsyncTwins` (the public mixin built on
     this landing): the ``async_*`` twins of the in-memory store (inline, no
     thread), the file store, the Redis store (:class:`~firefly_orm.redis.RedisStore`,
     whose ``async_initialize`` / ``async_close`` call :func:`call_blocking` too)
     and custom sync stores (in a thread);
   * :class:`~firefly_orm.bridges._threads.SyncBackedAsyncUnitOfWork`: the async
     unit of work of every store whose unit of work is sync
     (:func:`firefly_orm.uow.async_unit_of_work_for`, ``AsyncTwins``, the
     MongoDB store);
   * SQL on a caller's sync engine: :class:`~firefly_orm.sql._engines.ThreadedEngine`
     and ``ThreadedConnection`` run the async methods in worker threads, and
     ``SQLAlchemyStore.async_run_in_unit_of_work`` runs a whole unit of work as
     one worker-thread call (``ThreadedEngine.run``), which
     :func:`firefly_orm.uow.arun_in_unit_of_work` prefers when a store has it.
     On a native async driver SQL needs no landing of ours: SQLAlchemy's
     greenlets run the same sync function on the caller's loop (``run_sync``;
     a store's own operation or unit of work is one ``greenlet_spawn``, the
     mechanism under ``run_sync``, in :mod:`firefly_orm.sql._runners`);
   * :class:`~firefly_orm.sql._engines.Engines`' ``close()``: disposing async
     engines from sync code (``finish_from_sync``);
   * the SQLite connect hook's wait for a lock before switching the file to WAL
     (:func:`~firefly_orm.bridges._threads.pause`): on an aiosqlite engine that
     hook runs on the caller's event loop (in SQLAlchemy's greenlet), and the
     wait lets the loop run;
   * the step driver's :class:`~firefly_orm.bridges._steps.StoreCall` (a store
     without ``async_*`` methods) and :class:`~firefly_orm.bridges._steps.CallOut`
     (a sync call-out, such as a sync summarizer, from async code).
   * :class:`~firefly_orm.privacy.ProtectedStore`: the ``async_*`` methods over
     a wrapped store without them, ``async_cleanup_expired``, and
     :func:`~firefly_orm.privacy.async_rotate_keys` listing a store's namespaces.

2. **The loop thread** (:mod:`firefly_orm.bridges._loop_thread`): one event loop
   in a daemon thread on which sync code drives async-only libraries, so their
   clients stay bound to one live loop.  Users:

   * :class:`~firefly_orm.mongo.MongoDBStore`: every database operation (pymongo's
     async client and Beanie), sync methods waiting on it, async methods
     awaiting it from the caller's loop;
   * the LLM summarizer's sync call
     (:class:`~firefly_orm.summarization.LLMSummarizer`, pydantic-ai);
   * the step driver's :class:`~firefly_orm.bridges._steps.CallOut`: an async
     call-out (an async summarizer) from sync code;
   * :func:`~firefly_orm.bridges._loop_thread.lifecycle_call` and
     :func:`~firefly_orm.bridges._loop_thread.loop_running` (does a loop run in
     this thread?): upstream's awaitable ``initialize()`` / ``close()`` /
     ``cleanup_expired()`` on the compat layer's SQL and MongoDB stores
     (:mod:`firefly_orm.compat.firefly.memory`), the summarizer and ``CallOut``.

3. **The step driver** (:mod:`firefly_orm.bridges._steps`): a memory layer's
   operation is a generator of steps (a transaction, a store call, a call-out,
   a back-off sleep) written once and performed by
   :func:`~firefly_orm.bridges._steps.run` (sync) or
   :func:`~firefly_orm.bridges._steps.arun` (async); each step crosses through
   landing 1 or 2.  Users: the conversation layer (:mod:`firefly_orm.conversation`),
   working memory (:mod:`firefly_orm.working`), long-term memory
   (:mod:`firefly_orm.long_term`), artifacts (:mod:`firefly_orm.artifacts`,
   including the Flyte layout's import and export), the manager
   (:mod:`firefly_orm.manager`), the agent integration
   (:mod:`firefly_orm.pydantic_ai`), the Google ADK services
   (:mod:`firefly_orm.integrations.adk`), the upstream import, the command line's
   maintenance commands and key rotation (:func:`firefly_orm.privacy.rotate_keys`).
   Their public ``<name>`` / ``async_<name>`` methods are derived by
   :func:`~firefly_orm.bridges._steps.sync_method` /
   :func:`~firefly_orm.bridges._steps.async_method`, typed as
   :class:`~firefly_orm.bridges._steps.LayerMethod` so every type checker binds
   them.

**Why an async unit of work on MongoDB hops twice.**  ``await uow.run_sync(work)``
on the MongoDB store runs ``work`` in a worker thread (landing 1), and each
query ``work`` makes goes from there to the loop thread (landing 2); so does
the commit.  Both hops are inherent to sync transaction functions over an
async-only driver.  ``work`` is plain sync code over ``uow.entries`` (the step
driver's transactions are written once, for both worlds) and must wait for
the result of each query.  It may not wait on the caller's loop thread (that
would stall the caller's loop) nor on the loop thread (a loop cannot wait for
its own work: :meth:`~firefly_orm.bridges._loop_thread.LoopThread.call` refuses).
A thread that may block is left, the worker thread.  Saving the commit's
worker hop would need an async commit path for staged units of work
(:class:`~firefly_orm.uow.StagedUnitOfWork` commits in sync code); the hop
costs a thread hand-off, small next to the network round trips it waits for.
Single calls (``async_save``, ``async_load``...) hop once, straight to the
loop thread.
"""
