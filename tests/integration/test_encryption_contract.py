"""The store contract suite (firefly_orm.testing) on protected stores, sync and async.

``protect(store, encryption=...)`` must be a store like any other: upserts,
versions, copies, ordering, units of work, erasing a user and full-text search
(its namespaces keep their search text, ``searchable=``), all through the
envelope.  Run on the in-memory store, async, to keep the suite's time; the layer
suites cover every backend in both modes (``test_encryption.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from store_backends import open_backend

from firefly_orm.privacy import Encryption, KeyRing, generate_key, protect
from firefly_orm.testing import StoreContract
from firefly_orm.testing._drivers import NAMESPACE_PREFIX

#: Every namespace encrypted; the contract's own keep their search text (searchable=).
ENCRYPTION = Encryption(KeyRing({"k1": generate_key()}), searchable=[NAMESPACE_PREFIX])


class TestProtectedStoreContract(StoreContract):
    """The contract on ``protect(InMemoryStore())``, async (the wrapper's async paths and
    the staged unit of work under them); SQL and every other backend run the layers
    through the wrapper in ``test_encryption.py``."""

    @pytest.fixture(
        params=[("memory", "async")],
        ids=lambda p: f"{p[0]}-{p[1]}",
    )
    def case(self, request: pytest.FixtureRequest) -> tuple[str, str]:
        """``(backend name, mode)``."""
        name, mode = request.param
        return str(name), str(mode)

    @pytest.fixture
    def mode(self, case: tuple[str, str]) -> str:
        return case[1]

    @pytest.fixture
    async def store(
        self, request: pytest.FixtureRequest, case: tuple[str, str]
    ) -> AsyncIterator[Any]:
        opened = open_backend(request, case[0])
        try:
            yield protect(opened.store, encryption=ENCRYPTION)
        finally:
            if case[1] == "async":
                await opened.aclose()
            else:
                opened.close()
