"""Last-N and budgeted reads are indexed scans that stop early (issue 18).

* ``get_recent_messages`` / ``get_recent``: one ``ORDER BY key DESC LIMIT n``
  statement whose plan walks the namespace-key index backwards, no sort, on
  SQLite and PostgreSQL (the statement checked is the one the read ran,
  captured from the driver, with many other conversations in the table).
* The budgeted history read fetches few rows beyond those it returns: its
  batches after the first read only older turns, sized from the stored
  estimates (counted at the repository, which hands back every row fetched).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from dbutil import describe_plan, plan_nodes
from store_backends import OpenedBackend, backend_params, open_backend

from firefly_orm.conversation import ConversationMemory
from firefly_orm.sql._ops import SQLEntryRepository

INDEX = "ix_memory_entries_namespace_key"
CONVERSATIONS = 20
TURNS = 200


@pytest.fixture(params=backend_params(["sqlite", "postgres"]))
def sql_env(request: pytest.FixtureRequest) -> Iterator[OpenedBackend]:
    opened = open_backend(request, str(request.param))
    try:
        yield opened
    finally:
        opened.close()


def _pair(n: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"q{n}"}, {"role": "assistant", "content": f"a{n}"}]


def _fill(memory: ConversationMemory, conversations: int = 3) -> None:
    """Conversations ``c0``... of ``TURNS`` turns each (one import, then ANALYZE)."""
    memory.import_conversations(
        [
            {
                "conversation_id": f"c{c}",
                "turns": [
                    {
                        "user_prompt": f"q{n}",
                        "assistant_response": f"a{n}",
                        "raw_messages": {"format": "json", "messages": _pair(n)},
                    }
                    for n in range(TURNS)
                ],
            }
            for c in range(conversations)
        ]
    )


def _captured(engine: sa.Engine, run: Callable[[], Any]) -> tuple[Any, list[tuple[str, Any]]]:
    """What ``run()`` returns, and every statement (with its parameters) it sent."""
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, ctx: Any, many: bool) -> None:
        seen.append((statement, params))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        result = run()
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    return result, seen


def _check_plan(store: Any, statement: str, params: Any) -> str:
    """Assert the statement walks the namespace-key index without a sort; its plan."""
    if store.engine.dialect.name == "sqlite":
        with store.engine.connect() as conn:
            rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params).all()
        plan = " | ".join(str(row[-1]) for row in rows)
        assert f"USING INDEX {INDEX}" in plan, plan
        assert "TEMP B-TREE" not in plan, plan  # no sort
        return plan
    nodes = plan_nodes(store.engine, statement, params)
    plan = describe_plan(nodes)
    assert any(n.get("Index Name") == INDEX for n in nodes), plan
    assert any(n.get("Scan Direction") == "Backward" for n in nodes), plan
    assert not any(n["Node Type"] in ("Sort", "Seq Scan", "Incremental Sort") for n in nodes), plan
    return plan


def test_last_n_reads_are_one_indexed_statement_without_a_sort(sql_env: OpenedBackend) -> None:
    store = sql_env.store
    memory = ConversationMemory(store=store)
    _fill(memory, CONVERSATIONS)  # other conversations' rows around it
    memory.get_recent_messages("c3", 1)  # warm-up: connect, compile
    for read, expected in (
        (lambda: memory.get_recent_messages("c7", 6), _pair(197) + _pair(198) + _pair(199)),
        (lambda: [t.user_prompt for t in memory.get_recent("c7", 3)], ["q197", "q198", "q199"]),
    ):
        result, seen = _captured(store.engine, read)
        assert result == expected
        ((statement, params),) = seen  # one statement
        assert "ORDER BY" in statement and "LIMIT" in statement, statement
        print(_check_plan(store, statement, params))


def _count_rows_fetched(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Rows each turn read hands back (every row a SQL read fetches), one entry per read."""
    counts: list[int] = []
    for name in ("list_contents", "list_contents_before"):
        original = getattr(SQLEntryRepository, name)

        def counted(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            rows = _original(self, *args, **kwargs)
            counts.append(len(rows))
            return rows

        monkeypatch.setattr(SQLEntryRepository, name, counted)
    return counts


@pytest.mark.parametrize(
    ("fitting", "bound"),
    [(10, 32), (40, 40 + 12), (150, 150 + 12)],
    ids=["inside-the-first-batch", "past-it", "many-batches"],
)
def test_the_budgeted_history_read_fetches_few_rows_beyond_its_window(
    sql_env: OpenedBackend, monkeypatch: pytest.MonkeyPatch, fitting: int, bound: int
) -> None:
    """Before: growing batches re-read the newest rows (160 rows for 40, 672 for 150)."""
    store = sql_env.store
    probe = ConversationMemory(store=store)
    _fill(probe)
    per_turn = probe.get_recent("c1", 1)[0].token_estimate
    # Room for ``fitting`` turns, not one more.
    memory = ConversationMemory(store=store, max_tokens=fitting * per_turn + per_turn // 2)
    counts = _count_rows_fetched(monkeypatch)
    history = memory.get_message_history("c1")
    assert history == [m for n in range(TURNS - fitting, TURNS) for m in _pair(n)]
    assert fitting <= sum(counts) <= bound, counts
    assert len(counts) <= 3, counts


def test_a_message_limit_reads_only_as_many_turns_as_it_can_need(
    sql_env: OpenedBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = sql_env.store
    _fill(ConversationMemory(store=store))
    memory = ConversationMemory(store=store, max_messages=6, max_tokens=100_000)
    counts = _count_rows_fetched(monkeypatch)
    assert memory.get_message_history("c2") == _pair(197) + _pair(198) + _pair(199)
    assert counts == [7]  # max_messages + 1 turns always find where the window starts


def test_a_last_n_read_of_a_chat_fetches_one_turn_per_two_messages(
    sql_env: OpenedBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: ``n`` turns for the last ``n`` messages (twice the rows a chat needs)."""
    store = sql_env.store
    memory = ConversationMemory(store=store)
    _fill(memory)
    counts = _count_rows_fetched(monkeypatch)
    assert memory.get_recent_messages("c2", 20) == [
        m for n in range(TURNS - 10, TURNS) for m in _pair(n)
    ]
    # An odd count: the 7th newest is an answer, which cannot open a history.
    assert memory.get_recent_messages("c2", 7) == _pair(197) + _pair(198) + _pair(199)
    assert counts == [11, 4]  # one statement each, of n // 2 + 1 turns
