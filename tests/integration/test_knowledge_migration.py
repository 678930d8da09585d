"""Migration 0008 (the knowledge graph's tables): upgrade, model == schema, downgrade."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from dbutil import drop_schema

from firefly_orm import migrate
from firefly_orm.sql._graph import GRAPH_TABLES, graph_metadata

BEFORE = "0007_search_skips_null_text"
NAMES = {table.name for table in GRAPH_TABLES}


def _diff(url: str, schema: str | None) -> list[object]:
    """Autogenerate's comparison of the graph tables' model with the database."""
    target = sa.MetaData()
    for table in graph_metadata.tables.values():
        table.to_metadata(target, schema=schema)  # type: ignore[arg-type]
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(
                conn,
                opts={
                    "compare_type": True,
                    "include_schemas": schema is not None,
                    "include_name": lambda name, type_, parent: (
                        name == schema if type_ == "schema" else type_ != "table" or name in NAMES
                    ),
                },
            )
            return list(compare_metadata(ctx, target))
    finally:
        engine.dispose()


def _graph_tables(url: str, schema: str | None) -> set[str]:
    engine = sa.create_engine(url)
    try:
        return NAMES & set(sa.inspect(engine).get_table_names(schema=schema))
    finally:
        engine.dispose()


def _indexes(url: str, schema: str | None) -> dict[str, list[str | None]]:
    engine = sa.create_engine(url)
    try:
        found = sa.inspect(engine).get_indexes("knowledge_facts", schema=schema)
        return {index["name"] or "": list(index["column_names"]) for index in found}
    finally:
        engine.dispose()


def _round_trip(url: str, schema: str | None) -> None:
    migrate.upgrade(url, schema_name=schema)
    assert _graph_tables(url, schema) == NAMES
    assert _diff(url, schema) == []
    # The traversal indexes: outward (subject, predicate, valid_to), inward (object).
    indexes = _indexes(url, schema)
    assert indexes["ix_knowledge_facts_subject"] == ["subject_id", "predicate", "valid_to"]
    assert indexes["ix_knowledge_facts_object"] == ["object_id"]
    migrate.downgrade(url, BEFORE, schema_name=schema)
    assert _graph_tables(url, schema) == set()
    assert migrate.current(url, schema_name=schema) == BEFORE
    migrate.upgrade(url, schema_name=schema)
    assert _diff(url, schema) == []
    assert migrate.current(url, schema_name=schema) == migrate.head()


def test_sqlite_knowledge_tables_upgrade_and_downgrade(tmp_path: Path) -> None:
    _round_trip(f"sqlite:///{tmp_path / 'graph.sqlite3'}", None)


def test_the_comparison_can_fail(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'graph.sqlite3'}"
    migrate.upgrade(url, revision=BEFORE)
    assert _diff(url, None) != []  # the tables are missing: autogenerate says so


@pytest.fixture
def pg_schema(postgres_url: str) -> Iterator[str]:
    schema = "kg_" + uuid.uuid4().hex[:10]
    yield schema
    drop_schema(postgres_url, schema)


@pytest.mark.postgres
def test_postgres_knowledge_tables_upgrade_and_downgrade(postgres_url: str, pg_schema: str) -> None:
    _round_trip(postgres_url, pg_schema)
    assert _graph_tables(postgres_url, "public") == set()  # all in the store's schema
