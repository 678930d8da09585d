"""The store contract suite: one set of tests every :class:`~firefly_orm.MemoryStore` must pass.

firefly_orm runs this suite against each of its own backends (in-memory, file,
SQLite, PostgreSQL, MongoDB), in sync mode (``save``/``load``/...) and in async
mode (``async_save``/``async_load``/...).  Authors of a custom backend can run the
very same suite against theirs.

Requirements: ``pytest`` and ``pytest-asyncio`` (the test methods are coroutines
and carry the ``asyncio`` mark, so pytest-asyncio's strict mode works too; there,
declare an async ``store`` fixture with ``@pytest_asyncio.fixture``).

Usage, in your own test module::

    import pytest
    from firefly_orm.testing import StoreContract

    from mypackage import RedisMemoryStore


    class TestRedisStoreContract(StoreContract):
        @pytest.fixture(params=["sync", "async"])
        def mode(self, request: pytest.FixtureRequest) -> str:
            # Use params=["sync"] if your store has no async_* twins.
            return request.param

        @pytest.fixture
        async def store(self, mode: str):
            store = RedisMemoryStore("redis://localhost/15")
            yield store
            if mode == "async":
                await store.async_close()
            else:
                store.close()

and, in your ``conftest.py``, so that failures show the compared values::

    import pytest

    pytest.register_assert_rewrite("firefly_orm.testing")

Two fixtures are yours to provide (in the subclass or a ``conftest.py``):

* ``store``: a fresh, empty-or-shared store object.  The suite only touches
  namespaces it creates itself (``ffc-<label>-<random token>``) and clears them
  at the end of every test, so pointing it at a shared database is safe.  The
  one exception is ``cleanup_expired()``, which by definition deletes expired
  entries of every namespace.
* ``mode``: ``"sync"`` or ``"async"``.  In sync mode the test calls the sync
  methods *from inside a running event loop* (as a sync helper of an async web
  app or a notebook would), so a store must not call ``asyncio.run()`` there.

What the store must do (each bullet is at least one test):

* ``save`` is an upsert on ``entry_id``; the stored ``version`` is the previous
  one plus one, or ``max(entry.version, 1)`` on insert.  Saving an id that lives
  in another namespace either moves it (ids global) or creates an independent
  entry (ids scoped to a namespace); both are accepted.
* ``load`` returns non-expired entries ordered by ``(created_at, entry_id)``;
  re-saving an entry does not move it; an unknown namespace gives ``[]``.
* ``load_by_key`` returns the newest non-expired match (ties broken by the
  larger ``entry_id``, i.e. the last one in ``load`` order) or ``None``.
* ``delete`` and ``clear`` are idempotent; namespaces are exact, isolated strings.
* Every JSON value round-trips: unicode, 1 MB strings, NUL characters inside
  strings (PostgreSQL JSONB cannot hold ``\\u0000`` as such).  Datetimes come
  back timezone-aware and equal (millisecond precision at least).
* Entries are copied in and out.
* Invalid input raises :class:`~firefly_orm.errors.EntryValidationError` naming
  the field, and nothing is written (call :func:`firefly_orm.entry.validate_entry`
  in your ``save``, and :func:`~firefly_orm.entry.validate_namespace` /
  :func:`~firefly_orm.entry.validate_key` in the readers).
* ``cleanup_expired() -> int`` (and ``async_cleanup_expired``) when the store has it.
* The unit of work obtained through :func:`firefly_orm.uow.unit_of_work_for` /
  :func:`firefly_orm.uow.async_unit_of_work_for` is all-or-nothing and enforces
  ``expected_version`` preconditions with :class:`~firefly_orm.errors.ConcurrencyError`.
  A five-method store gets :class:`~firefly_orm.uow.BestEffortUnitOfWork`, which
  passes these tests in a single process.

To opt out of a test that does not apply to your backend, override it in the
subclass with a method decorated ``@pytest.mark.skip(reason=...)``.
"""

from firefly_orm.testing._contract import StoreContract
from firefly_orm.testing._drivers import MODES, NAMESPACE_PREFIX, StoreDriver, UnitOfWorkDriver

__all__ = ["MODES", "NAMESPACE_PREFIX", "StoreContract", "StoreDriver", "UnitOfWorkDriver"]
