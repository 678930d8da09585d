"""The scripted demo: one browser task per run, resumed by the next process.

Each run opens the browser session on the database (an embedded SQLite file
by default), prints what the session remembers, runs the next task of
:data:`~examples.browser_memory.agent.TASKS` with the offline scripted agent,
and prints each tool call and the browser state afterwards.  Run it again (a
new process) and the next task starts from the stored session: the cookie
banner met in the first run is passed from memory, and the laptop found in
the first run is read from the facts.  ``--reset`` clears the session (only
this one) first.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from examples.browser_memory.agent import TASKS, TaskRun, run_next_task
from examples.browser_memory.stores import (
    DEFAULT_DB,
    DEFAULT_SCHEMA,
    ENV_DB,
    database_url,
    describe,
    open_store,
)
from firefly_orm.compat.flybrowser import BrowserMemoryManager
from firefly_orm.store import MemoryStore

__all__ = ["DEFAULT_SESSION", "build_parser", "main", "run"]

#: The session the demo uses unless ``--session`` is given.
DEFAULT_SESSION = "demo"


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m examples.browser_memory``."""
    parser = argparse.ArgumentParser(
        prog="python -m examples.browser_memory",
        description="A browser agent whose memory survives the process (offline, scripted).",
    )
    parser.add_argument(
        "--db",
        help=f"database URL: sqlite, postgresql or mongodb (default: ${ENV_DB}, else {DEFAULT_DB})",
    )
    parser.add_argument(
        "--schema", help=f"PostgreSQL schema or MongoDB database (default {DEFAULT_SCHEMA})"
    )
    parser.add_argument("--session", default=DEFAULT_SESSION, help="browser session id")
    parser.add_argument(
        "--reset", action="store_true", help="clear this session first (other sessions stay)"
    )
    return parser


def _indented(text: str, prefix: str = "    | ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def _show_call(name: str, args: dict[str, Any], outcome: Any) -> str:
    target = args.get("url") or args.get("key") or ""
    if isinstance(outcome, dict):
        if outcome.get("blocked"):
            said = f"blocked by {outcome['obstacle']}"
        elif "passed" in outcome:
            said = f"{outcome['title']!r}, passed {outcome['passed']}"
        else:
            said = repr(outcome.get("title", outcome.get("error")))
    else:
        said = str(outcome)
    return f"  {name}({target}) -> {said}"


def _report(run: TaskRun, out: TextIO) -> None:
    from pydantic_ai.messages import ModelRequest, ToolReturnPart

    print(f"Task {run.number}/{len(TASKS)}: {run.task.text}", file=out)
    print("  the model was given this browser state:", file=out)
    state = run.model.prompt.split("Browser state:\n", 1)[-1]
    print(_indented(state), file=out)
    returns = [
        part
        for message in run.model.requests[-1]
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]
    outcomes = {part.tool_call_id: part.content for part in returns}
    for number, (name, args) in enumerate(run.model.calls, start=1):
        print(_show_call(name, args, outcomes.get(f"call-{number}")), file=out)
    print(f"  answer: {run.answer}", file=out)


async def run(store: MemoryStore, *, session_id: str, reset: bool, where: str, out: TextIO) -> None:
    """One demo run on ``store`` (see the module docstring)."""
    browser = await BrowserMemoryManager.async_open(store, session_id=session_id)
    if reset:
        await browser.async_clear()
        print(f"Cleared browser session {session_id!r}.", file=out)
    pages, obstacles = browser.page_history, browser.obstacle_cache
    if pages:
        print(
            f"Resumed browser session {session_id!r} from {where} (pages: {len(pages)}, "
            f"known obstacles: {len(obstacles)}, facts: {len(browser.facts)})",
            file=out,
        )
    else:
        print(f"New browser session {session_id!r} on {where}", file=out)
    done = await run_next_task(browser)
    if done is None:
        print(
            f"All {len(TASKS)} tasks are done; run with --reset to start this session over.",
            file=out,
        )
        return
    _report(done, out)
    print("Browser state now:", file=out)
    print(_indented(browser.format_for_prompt()), file=out)
    if done.number < len(TASKS):
        print(f"Run again to resume with task {done.number + 1}.", file=out)


async def _amain(args: argparse.Namespace, out: TextIO) -> None:
    url = database_url(args.db)
    store: Any = open_store(url, args.schema)
    try:
        await run(
            store,
            session_id=args.session,
            reset=args.reset,
            where=describe(url, args.schema),
            out=out,
        )
    finally:
        await store.async_close()


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Parse ``argv`` and run the demo once; the exit status."""
    args = build_parser().parse_args(argv)
    try:
        asyncio.run(_amain(args, out if out is not None else sys.stdout))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
