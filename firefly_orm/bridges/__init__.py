"""The crossings between sync and async code, named and housed in one place.

firefly_orm writes every piece of I/O logic once and reaches it from both worlds
through exactly these bridges (and no others):

* **SQL**: each operation is a sync function over a ``Session``/``Connection``;
  the async path awaits the same function through SQLAlchemy's ``run_sync`` on
  the native async driver (aiosqlite, psycopg async).  See :mod:`firefly_orm.sql`.
  A sync ``close()`` of a store whose async engine was used, called once no
  loop runs, disposes that engine with ``asyncio.run`` on the caller's thread
  (its own loop has ended; see :meth:`firefly_orm.sql.engines.Engines.close`).
  A store given only the app's sync engine runs its async work on that
  engine's pool, each call in a worker thread
  (:class:`~firefly_orm.sql.engines.ThreadedEngine`, through
  :func:`~firefly_orm.bridges.twins.call_blocking`): no second, async pool.
* :mod:`firefly_orm.bridges.loop_thread`: one shared event-loop thread on which
  sync code drives async-only libraries (MongoDB, the LLM summarizer).
* :mod:`firefly_orm.bridges.twins`: derives the ``async_*`` twins of a store
  whose I/O is sync (in-memory, files, custom stores), and the async face of
  their units of work.
* :mod:`firefly_orm.bridges.steps`: the step driver every memory layer uses: an
  operation is a generator of steps (a transaction, a call out such as the
  summarizer, a back-off sleep) written once and performed either by
  :func:`~firefly_orm.bridges.steps.run` or by :func:`~firefly_orm.bridges.steps.arun`.
"""
