"""Clean-up helpers shared by the database tests (one place for each)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from pymongo import monitoring


def drop_schema(target: str | sa.Engine, schema: str) -> None:
    """``DROP SCHEMA IF EXISTS <schema> CASCADE`` on a URL or an engine (name quoted)."""
    engine = (
        sa.create_engine(target, poolclass=sa.pool.NullPool) if isinstance(target, str) else target
    )
    try:
        with engine.begin() as conn:
            conn.execute(sa.schema.DropSchema(schema, cascade=True, if_exists=True))
    finally:
        if isinstance(target, str):
            engine.dispose()


def drop_mongo_database(url: str, name: str) -> None:
    """Drop one MongoDB database."""
    import pymongo

    client: Any = pymongo.MongoClient(url, serverSelectionTimeoutMS=5000)
    try:
        client.drop_database(name)
    finally:
        client.close()


def walk_plan(plan: Any) -> list[dict[str, Any]]:
    """Every node of a PostgreSQL ``EXPLAIN (FORMAT JSON)`` result, outermost first."""
    nodes: list[dict[str, Any]] = []
    pending = [plan[0]["Plan"]]
    while pending:
        node = pending.pop(0)
        nodes.append(node)
        pending.extend(node.get("Plans", []))
    return nodes


def plan_nodes(engine: sa.Engine, statement: str, parameters: Any) -> list[dict[str, Any]]:
    """Every node of PostgreSQL's ``EXPLAIN`` plan of a statement, outermost first."""
    with engine.connect() as conn:
        plan = conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + statement, parameters).scalar_one()
    return walk_plan(plan)


class CommandRecorder(monitoring.CommandListener):
    """A pymongo command listener that remembers the commands of one name a client sends
    (``event_listeners=[recorder]``); ``sent`` holds them in order."""

    def __init__(self, command_name: str) -> None:
        self.command_name = command_name
        self.sent: list[dict[str, Any]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == self.command_name:
            self.sent.append(dict(event.command))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def describe_plan(nodes: list[dict[str, Any]]) -> str:
    """A one-line summary of :func:`plan_nodes` (node types, index names, row estimates)."""
    return " > ".join(
        f"{n['Node Type']}{'(' + n['Index Name'] + ')' if 'Index Name' in n else ''}"
        f"[rows={n['Plan Rows']}]"
        for n in nodes
    )


@contextlib.contextmanager
def statements_sent(engine: sa.Engine) -> Iterator[list[tuple[str, bool]]]:
    """Each statement sent on ``engine`` inside the block: (its first word, sent as
    cached SQL text, not a compiled Core statement?)."""
    sent: list[tuple[str, bool]] = []

    def record(_conn: Any, _cursor: Any, sql: str, _params: Any, context: Any, _many: Any) -> None:
        sent.append((sql.split()[0], context.compiled is None))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
