"""A drop-in for the Firefly framework's memory module, on firefly_orm.

Migrating code changes one import prefix and nothing else::

    # before
    from fireflyframework_agentic.memory import MemoryManager, WorkingMemory
    from fireflyframework_agentic.memory.database_store import PostgreSQLStore
    from fireflyframework_agentic.exceptions import DatabaseConnectionError
    # after
    from firefly_orm.compat.firefly.memory import MemoryManager, WorkingMemory
    from firefly_orm.compat.firefly.memory.database_store import PostgreSQLStore
    from firefly_orm.compat.firefly.exceptions import DatabaseConnectionError

The modules mirror upstream's layout:

* ``memory``: the eleven names of upstream's ``__all__``;
* ``memory.types``: ``MemoryEntry``, ``MemoryScope``, ``ConversationTurn``;
* ``memory.store``: ``MemoryStore``, ``InMemoryStore``, ``FileStore``, ``SQLiteStore``;
* ``memory.database_store``: ``PostgreSQLStore``, ``MongoDBStore``;
* ``memory.conversation``, ``memory.working``, ``memory.manager``,
  ``memory.summarization``: ``ConversationMemory``, ``WorkingMemory``,
  ``MemoryManager``, ``create_llm_summarizer``;
* ``content.compression``: ``TokenEstimator``;
* ``agents`` / ``agents.delegation``: ``DelegationRouter`` and its strategies
  (``RoundRobinStrategy``, ``CapabilityStrategy``, ``ContentBasedStrategy``),
  on :class:`firefly_orm.pydantic_ai.DelegationRouter` (``pydantic-ai`` extra);
* ``exceptions``: ``FireflyAgenticError``, ``FireflyMemoryError``,
  ``DatabaseStoreError``, ``DatabaseConnectionError``, ``DelegationError``.

Every class is firefly_orm's own (or a thin subclass of it), so the behaviour
is firefly_orm's: conversations persist in the store, summaries fold the
previous summary in, entries are validated before anything is written.  The
database stores keep upstream's *asynchronous* lifecycle:
``await store.initialize()``, ``await store.close()`` and
``await store.cleanup_expired()`` run firefly_orm's ``async_*`` forms on the
native async drivers and never block the event loop (see
:mod:`firefly_orm.compat.firefly.memory.database_store`).
"""
