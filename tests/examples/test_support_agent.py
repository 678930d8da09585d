"""``examples/support_agent``: the pydantic-ai integration end to end, on SQLite and PostgreSQL.

* ``python -m examples.support_agent --db URL`` (a process of its own) opens a
  conversation for the customer, its tools write facts, and the small budget
  evicts older turns, summarized by the LLM summarizer (its scripted model,
  not the fallback).
* A SECOND PROCESS on the same SQLite file or PostgreSQL schema resumes the
  customer's conversation: the agent answers from the facts, the history and
  the summary the first process stored, and its turns continue the ids.
* Another customer in a third process sees none of it.
* The agent's rules, bad input (an unknown order, a bad URL), and that an
  async visit performs no blocking memory operation, in this process.
"""

from __future__ import annotations

import asyncio
import io
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import forked
import pytest
from store_backends import OpenedBackend, backend_params, open_backend

pytest.importorskip("pydantic_ai")

from examples.support_agent import demo
from examples.support_agent.agent import (
    MAX_CONVERSATION_TOKENS,
    ORDERS,
    build_memory,
    build_support,
)
from firefly_orm.bridges import _steps as steps
from firefly_orm.conversation import ConversationTurn
from firefly_orm.manager import MemoryManager
from firefly_orm.store import InMemoryStore

REPO = Path(__file__).resolve().parents[2]
#: Seconds one run of the example may take (interpreter start, imports, a few agent runs).
PROCESS_TIMEOUT = 180.0
ORDER = "A-1042"
ORDER_ANSWER = f"Thanks, Ada. Order {ORDER} is {ORDERS[ORDER].status} ({ORDERS[ORDER].carrier})."


@pytest.fixture(params=backend_params(["sqlite", "postgres"]))
def database(request: pytest.FixtureRequest) -> Iterator[OpenedBackend]:
    """A SQLite file or a PostgreSQL schema of this test (dropped afterwards)."""
    opened = open_backend(request, str(request.param))
    try:
        yield opened
    finally:
        opened.close()


def example_args(opened: OpenedBackend) -> list[str]:
    """``--db`` (and ``--schema``) naming the data of ``opened``'s store."""
    place = opened.place
    if opened.name == "sqlite":
        return ["--db", f"sqlite:///{place.tmp_path / 'db' / 'memory.sqlite3'}"]
    return ["--db", place.postgres(), "--schema", place.name]


def run_example(opened: OpenedBackend, *args: str) -> str:
    """Run ``python -m examples.support_agent`` in a new process; its output."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    done = forked.run(  # another process: a fork of a warm interpreter
        [sys.executable, "-m", "examples.support_agent", *example_args(opened), *args],
        cwd=opened.place.tmp_path,
        env=env,
        timeout=PROCESS_TIMEOUT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def replies(output: str) -> list[str]:
    return [
        line.removeprefix("agent> ") for line in output.splitlines() if line.startswith("agent> ")
    ]


def ids(turns: list[ConversationTurn]) -> list[int]:
    return [t.turn_id for t in turns]


def test_a_second_process_resumes_the_customer(database: OpenedBackend) -> None:
    first = run_example(database)
    assert "New conversation for customer 'ada'." in first
    assert replies(first) == [
        "Nice to meet you, Ada. How can I help?",
        ORDER_ANSWER,
        f"Yes, Ada: the courier can leave order {ORDER} with a neighbour; I added a note.",
        f"Done, Ada: the invoice for order {ORDER} is on its way to your email.",
        "You are welcome, Ada. Have a good day!",
    ]

    # what the first process left in the database
    store = database.reopen()
    memory = MemoryManager(store=store)
    (cid,) = memory.user_conversations("ada")
    conversation = memory.conversation
    kept = conversation.get_turns(cid)
    assert 0 < len(kept) < len(demo.FIRST_VISIT), "expected older turns to be evicted"
    assert ids(kept) == list(range(len(demo.FIRST_VISIT) - len(kept), len(demo.FIRST_VISIT)))
    assert conversation.get_total_tokens(cid) <= MAX_CONVERSATION_TOKENS
    summary = conversation.get_summary(cid)
    # the scripted summary model's words, not the extractive fallback's
    assert summary is not None and summary.startswith("The customer said: Hi, my name is Ada")
    assert ORDER in summary
    for turn in kept:
        assert turn.metadata["agent"] == "support"
        assert turn.metadata["usage"]["total_tokens"] > 0
    ada = memory.for_user("ada")
    assert ada.get_fact("customer_name") == "Ada"
    assert ada.get_fact("order_id") == ORDER

    # a new process resumes the conversation: facts, history and summary reach the model
    second = run_example(database)
    assert f"Resuming conversation {cid} of customer 'ada'" in second
    name, order, recap = replies(second)
    assert name == "Your name is Ada."
    assert order == ORDER_ANSWER
    # the first visit's evicted turns reach the model through the summary only
    assert recap.startswith("Here is what I remember: The customer said: ")
    assert f"My order {ORDER} has not arrived yet" in recap
    assert recap.endswith(
        "Most recently you said: Hello again, do you remember my name?; Where is my order now?"
    )
    assert memory.user_conversations("ada") == [cid]
    resumed = conversation.get_turns(cid)
    total = len(demo.FIRST_VISIT) + len(demo.RETURN_VISIT)
    assert ids(resumed)[-1] == total - 1
    assert [t.user_prompt for t in resumed][-1] == demo.RETURN_VISIT[-1]

    # another customer, another process: nothing of ada's
    bob = run_example(database, "--customer", "bob", "Where is my order now?", "What is my name?")
    assert replies(bob) == [
        "Which order is it? Please give me its id (like A-1042).",
        "I do not know your name yet.",
    ]
    (bob_cid,) = memory.user_conversations("bob")
    assert bob_cid != cid
    assert memory.user_conversations("ada") == [cid]


async def test_the_agent_rules_and_an_unknown_order(monkeypatch: pytest.MonkeyPatch) -> None:
    def blocking(store: Any, op: Any) -> Any:
        op.close()
        raise AssertionError("a blocking memory operation inside the async demo")

    monkeypatch.setattr(steps, "run", blocking)
    store = InMemoryStore()
    out = io.StringIO()
    cid = await demo.run(
        store,
        "cy",
        ["My name is Cy.", "My order Z-9999 is lost.", "Where is my order now?"],
        out=out,
    )
    assert replies(out.getvalue()) == [
        "Nice to meet you, Cy. How can I help?",
        "I could not find that order. Could you check its id?",
        "Which order is it? Please give me its id (like A-1042).",
    ]
    memory = build_support(store).memory_for("cy")
    assert await memory.async_get_fact("customer_name") == "Cy"
    assert await memory.async_get_fact("order_id") is None  # the unknown order wrote nothing
    assert len(await memory.conversation.async_get_turns(cid)) >= 1
    # --new starts another conversation for the same customer
    other = await demo.run(store, "cy", ["Thanks."], new=True, out=io.StringIO())
    assert other != cid
    assert await build_memory(store).async_user_conversations("cy") == [other, cid]


def test_a_bad_database_url_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        demo.main(["--db", "mysql://app:secret@db/app"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert "not a SQLite or PostgreSQL URL" in error and "secret" not in error
    with pytest.raises(SystemExit):
        demo.main(["--db", "sqlite://"])
    assert "needs a file" in capsys.readouterr().err


def test_the_in_process_entry_point(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'desk.sqlite3'}"
    assert demo.main(["--db", url, "Hi, my name is Ada."]) == 0
    assert "agent> Nice to meet you, Ada. How can I help?" in capsys.readouterr().out
    assert asyncio.run(_facts(url)) == {"customer_name": "Ada"}


async def _facts(url: str) -> dict[str, Any]:
    store = demo.open_store(url)
    try:
        memory = build_support(store).memory_for("ada")
        return dict(await memory.working.async_items())
    finally:
        await store.async_close()
