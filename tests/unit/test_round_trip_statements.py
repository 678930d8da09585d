"""The one-statement append's SQL is built once per process, not per turn.

Building the data-modifying CTE and its cache key costs more than its round trip
on localhost (a lost ``functools.cache`` made PostgreSQL appends 2.5x slower in the
bench while every round-trip count stayed the same), so the builders are cached.
"""

from __future__ import annotations

import pytest

from firefly_orm.sql import _statements as st


@pytest.mark.parametrize("builder", [st.append_turn_statement, st.bump_head_statement])
@pytest.mark.parametrize("by_owner", [False, True])
def test_the_append_statements_are_built_once(builder: object, by_owner: bool) -> None:
    assert callable(builder)
    assert builder(by_owner) is builder(by_owner)
