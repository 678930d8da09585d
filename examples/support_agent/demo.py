"""The scripted support desk: each run a new process, the customer's memory resumed.

``python -m examples.support_agent [--db URL] [--schema NAME] [--customer ID] [--new]
[MESSAGE ...]``

The database is ``--db URL`` (``sqlite:///path`` or ``postgresql+psycopg://...``),
else ``$SUPPORT_AGENT_DB``, else the SQLite file ``data/support_agent.sqlite3``.
The first run opens a conversation for the customer (``--customer``, default
``ada``) and sends :data:`FIRST_VISIT`; each later run resumes the customer's
latest conversation and sends :data:`RETURN_VISIT` (or the MESSAGEs given;
``--new`` starts another conversation).  Each reply is printed, then what the
conversation's memory holds: the turns kept within the budget, the summary of
the evicted ones, and the customer's facts.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from examples.support_agent.agent import MAX_CONVERSATION_TOKENS, build_support
from firefly_orm import migrate
from firefly_orm.errors import redact_url
from firefly_orm.manager import MemoryManager
from firefly_orm.sql import SQLAlchemyStore
from firefly_orm.store import MemoryStore

__all__ = [
    "DEFAULT_CUSTOMER",
    "DEFAULT_DB",
    "ENV_DB",
    "FIRST_VISIT",
    "RETURN_VISIT",
    "build_parser",
    "main",
    "open_store",
    "run",
]

#: The environment variable naming the database (``--db`` wins).
ENV_DB = "SUPPORT_AGENT_DB"
#: The database when neither ``--db`` nor :data:`ENV_DB` is given.
DEFAULT_DB = "sqlite:///data/support_agent.sqlite3"
#: The customer the demo talks to unless ``--customer`` is given.
DEFAULT_CUSTOMER = "ada"

#: What the customer says on the first run.
FIRST_VISIT = (
    "Hi, my name is Ada.",
    "My order A-1042 has not arrived yet.",
    "Can the courier leave it with a neighbour if I am out?",
    "Please also send me the invoice.",
    "Thank you, that is all for now.",
)
#: What the customer says on every later run (a new process).
RETURN_VISIT = (
    "Hello again, do you remember my name?",
    "Where is my order now?",
    "What have we discussed so far?",
)


def open_store(url: str, schema: str | None = None) -> SQLAlchemyStore:
    """A SQLite or PostgreSQL store on ``url`` (migrated on first use; no I/O here).

    Raises:
        ValueError: Not a SQLite or PostgreSQL URL (the message hides any password).
    """
    parsed = migrate.normalize_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        if parsed.database in (None, "", ":memory:"):
            raise ValueError("a SQLite URL needs a file: sqlite:///path/to/file.sqlite3")
        from firefly_orm import SQLiteStore

        return SQLiteStore(Path(parsed.database))
    if backend == "postgresql":
        from firefly_orm import PostgreSQLStore

        return PostgreSQLStore(parsed, schema_name=schema or migrate.DEFAULT_SCHEMA)
    raise ValueError(f"not a SQLite or PostgreSQL URL: {redact_url(url)}")


async def run(
    store: MemoryStore,
    customer: str,
    messages: Sequence[str] = (),
    *,
    new: bool = False,
    out: TextIO | None = None,
) -> str:
    """One visit of ``customer``: send the messages, print the replies and the memory.

    Returns:
        The conversation id.
    """
    out = out if out is not None else sys.stdout
    support = build_support(store)
    memory = support.memory_for(customer)
    latest = [] if new else await memory.async_user_conversations(customer, limit=1)
    conversation_id = latest[0] if latest else None
    if conversation_id is None:
        out.write(f"New conversation for customer {customer!r}.\n")
        script = messages or FIRST_VISIT
    else:
        turns = await memory.conversation.async_get_turns(conversation_id)
        out.write(
            f"Resuming conversation {conversation_id} of customer {customer!r}: "
            f"{len(turns)} turn(s) kept (ids {[t.turn_id for t in turns]}).\n"
        )
        script = messages or RETURN_VISIT
    for text in script:
        result = await support.run(
            text,
            conversation_id=conversation_id,
            user_id=customer,
            new_conversation=conversation_id is None,  # --new: not the latest conversation
        )
        conversation_id = result.conversation_id
        out.write(f"\n{customer}> {text}\nagent> {result.output}\n")
    assert conversation_id is not None
    await _show_memory(memory, conversation_id, out)
    return conversation_id


async def _show_memory(memory: MemoryManager, conversation_id: str, out: TextIO) -> None:
    conversation = memory.conversation
    turns = await conversation.async_get_turns(conversation_id)
    total = await conversation.async_get_total_tokens(conversation_id)
    summary = await conversation.async_get_summary(conversation_id)
    facts = await memory.async_get_working_context()
    out.write(
        f"\n-- memory of conversation {conversation_id} --\n"
        f"turns kept: {[t.turn_id for t in turns]} "
        f"({total} of {MAX_CONVERSATION_TOKENS} tokens)\n"
        f"summary of the evicted turns: {summary or '(none yet)'}\n"
        f"{facts or 'Working Memory: (empty)'}\n"
        f"tokens used by the last run: {turns[-1].metadata['usage']['total_tokens']}\n"
    )


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m examples.support_agent``."""
    parser = argparse.ArgumentParser(
        prog="python -m examples.support_agent",
        description="A support agent whose memory survives the process (offline, scripted).",
    )
    parser.add_argument(
        "--db", help=f"database URL, sqlite or postgresql (default: ${ENV_DB}, else {DEFAULT_DB})"
    )
    parser.add_argument("--schema", help=f"PostgreSQL schema (default {migrate.DEFAULT_SCHEMA})")
    parser.add_argument("--customer", default=DEFAULT_CUSTOMER, help="the customer's user id")
    parser.add_argument(
        "--new", action="store_true", help="start a new conversation instead of resuming"
    )
    parser.add_argument("messages", nargs="*", metavar="MESSAGE", help="what the customer says")
    return parser


async def _visit(store: SQLAlchemyStore, args: argparse.Namespace) -> str:
    try:
        return await run(store, args.customer, args.messages, new=args.new)
    finally:
        await store.async_close()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m examples.support_agent``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    url = args.db or os.environ.get(ENV_DB) or DEFAULT_DB
    try:
        store = open_store(url, args.schema)
    except ValueError as exc:
        parser.error(str(exc))
    print(f"Support desk on {redact_url(url)}")
    asyncio.run(_visit(store, args))
    return 0
