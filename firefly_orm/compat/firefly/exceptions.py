"""Upstream's memory exception names, as aliases of firefly_orm's exceptions.

Upstream's hierarchy is ``FireflyAgenticError > FireflyMemoryError >
DatabaseStoreError > DatabaseConnectionError``; here the names are bound to
:class:`~firefly_orm.errors.FireflyOrmError` (the first two),
:class:`~firefly_orm.errors.StoreError` and
:class:`~firefly_orm.errors.DatabaseConnectionError`, so ``except`` clauses
written for upstream catch what firefly_orm raises (every firefly_orm error
is a ``FireflyMemoryError``; every driver failure a ``DatabaseStoreError``).

Where upstream raised a plain ``ValueError`` (a bad ``schema_name``, a missing
backend URL) firefly_orm raises :class:`~firefly_orm.errors.EntryValidationError`
or :class:`~firefly_orm.config.ConfigurationError`, both ``ValueError`` subclasses.
``DelegationError`` (upstream's delegation failure) is firefly_orm's
:class:`~firefly_orm.errors.DelegationError`.
The compatible database stores start the message of a connection failure in
``initialize()`` with ``"Failed to connect to <database>: "`` as upstream did.
"""

from __future__ import annotations

from firefly_orm.errors import (
    DatabaseConnectionError,
    DelegationError,
    FireflyOrmError,
    StoreError,
)

__all__ = [
    "DatabaseConnectionError",
    "DatabaseStoreError",
    "DelegationError",
    "FireflyAgenticError",
    "FireflyMemoryError",
]

#: Upstream's root exception.
FireflyAgenticError = FireflyOrmError
#: Upstream's memory exception (every firefly_orm error is one).
FireflyMemoryError = FireflyOrmError
#: Upstream's database-store exception: a storage backend failed.
DatabaseStoreError = StoreError
