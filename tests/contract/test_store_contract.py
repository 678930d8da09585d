"""The store contract suite (firefly_orm.testing) against every backend, sync and async.

The stores come from the one backend registry (``tests/store_backends.py``): each
contract backend in each mode it supports, including a minimal custom store that
only has the five protocol methods, exactly as a third-party backend author would
write it (sync mode only, best-effort unit of work).  The fixtures are provided
in the subclass, the way the ``firefly_orm.testing`` docstring tells authors to.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from store_backends import contract_params, open_backend

from firefly_orm.testing import StoreContract


class TestStoreContract(StoreContract):
    """Every contract backend of the registry x the modes it supports."""

    @pytest.fixture(params=contract_params())
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
            yield opened.store
        finally:
            if case[1] == "async":
                await opened.aclose()
            else:
                opened.close()
