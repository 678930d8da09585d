"""``make demo`` / ``firefly-orm demo``: agent memory that survives a restart.

A scripted support conversation is added a few turns per run to a
:class:`~firefly_orm.MemoryManager` on an embedded SQLite file.  Each run prints
the turns it adds, the turns evicted under a small token budget, the running
summary of what was dropped, and the working facts; the next run (a new process)
resumes where the last one stopped.

Set ``FIREFLY_ORM_DEMO_PATH`` to choose the database file (default
``.firefly_memory/demo.sqlite3``); delete it to start over.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from firefly_orm.conversation import SUMMARY_TURN_ID, ConversationTurn
from firefly_orm.manager import MemoryManager
from firefly_orm.sql import SQLiteStore

__all__ = ["SCRIPT", "TURNS_PER_RUN", "main", "summarize"]

CONVERSATION_ID = "demo-support-chat"
TURNS_PER_RUN = 4
MAX_TOKENS = 160

SCRIPT: tuple[tuple[str, str], ...] = (
    (
        "Hi, I'm Dana. My order 4411 arrived with a cracked screen.",
        "Sorry to hear that, Dana. I can see order 4411 was delivered on Monday. "
        "Do you want a replacement or a refund?",
    ),
    (
        "A replacement please, same colour, the blue one.",
        "Noted: a blue replacement for order 4411. I need a photo of the damage "
        "before I can ship it.",
    ),
    (
        "I uploaded the photo just now.",
        "Thanks, the photo shows the crack clearly. The replacement is approved "
        "and will ship from the Leeds warehouse.",
    ),
    (
        "How long will shipping take?",
        "Standard shipping from Leeds takes two to three working days. "
        "You'll get a tracking link by email.",
    ),
    (
        "Can I also return the charger? I don't need a second one.",
        "Yes. Keep the charger from the damaged unit; the replacement ships without one, "
        "and I have refunded the charger's price of 19 pounds.",
    ),
    (
        "When will the refund show up?",
        "Card refunds take three to five working days to appear on your statement.",
    ),
    (
        "The tracking link says the parcel is in Manchester.",
        "That is the regional hub. It should reach you tomorrow before noon.",
    ),
    (
        "It arrived and works perfectly. Thanks!",
        "Great to hear, Dana. I have closed the ticket for order 4411. Anything else?",
    ),
    (
        "No, that's all. Please remember I prefer email over phone.",
        "Done: email is now your preferred contact channel.",
    ),
    (
        "One more thing: do you ship to Ireland?",
        "Yes, we ship to Ireland from the Leeds warehouse in four to six working days.",
    ),
    (
        "Great. What is the warranty on the replacement?",
        "The replacement carries a fresh two-year warranty from its delivery date.",
    ),
    (
        "Perfect, goodbye.",
        "Goodbye, Dana. Thanks for shopping with us.",
    ),
)


def summarize(turns: list[ConversationTurn]) -> str:
    """A deterministic, offline summarizer for the demo.

    The first turn may be the previous summary (``turn_id == SUMMARY_TURN_ID``); it is kept,
    then the first sentence of each evicted answer is appended.  A real app would
    use :func:`firefly_orm.create_llm_summarizer` instead.
    """
    parts: list[str] = []
    for turn in turns:
        if turn.turn_id == SUMMARY_TURN_ID:
            parts.append(turn.assistant_response.strip())
            continue
        first = turn.assistant_response.split(". ")[0].strip().rstrip(".")
        parts.append(f"{first}.")
    return " ".join(p for p in parts if p)


def _default_path() -> Path:
    return Path(os.environ.get("FIREFLY_ORM_DEMO_PATH", ".firefly_memory/demo.sqlite3"))


def run(path: Path, out: TextIO = sys.stdout) -> int:
    """One demo run; returns how many turns it added."""
    store = SQLiteStore(path)
    try:
        manager = MemoryManager(
            store=store,
            max_conversation_tokens=MAX_TOKENS,
            summarize_threshold=MAX_TOKENS,
            summarizer=summarize,
        )
        runs = int(manager.get_fact("demo_runs", 0)) + 1
        manager.set_fact("demo_runs", runs, importance=0.2)
        conv = manager.conversation
        done = int(manager.get_fact("script_position", 0))
        out.write(f"== firefly_orm demo, run {runs} (database: {path}) ==\n")
        if done:
            kept = conv.get_turns(CONVERSATION_ID)
            out.write(
                f"Resumed conversation {CONVERSATION_ID!r}: {done} turns so far, "
                f"{len(kept)} kept within {MAX_TOKENS} tokens "
                f"(ids {[t.turn_id for t in kept]}).\n"
            )
        else:
            out.write(f"New conversation {CONVERSATION_ID!r} (budget {MAX_TOKENS} tokens).\n")
        if done >= len(SCRIPT):
            out.write("The scripted conversation is complete; delete the database to replay.\n")
            _show_state(manager, out)
            return 0
        added = 0
        for user, assistant in SCRIPT[done : done + TURNS_PER_RUN]:
            before = {t.turn_id for t in conv.get_turns(CONVERSATION_ID)}
            messages = [
                {"role": "user", "content": user},
                {"role": "assistant", "content": assistant},
            ]
            turn = manager.add_turn(CONVERSATION_ID, user, assistant, messages)
            after = {t.turn_id for t in conv.get_turns(CONVERSATION_ID)}
            added += 1
            out.write(f"\n[turn {turn.turn_id}] ~{turn.token_estimate} tokens\n")
            out.write(f"  user:      {user}\n  assistant: {assistant}\n")
            evicted = sorted(before - after)
            if evicted:
                out.write(f"  evicted turns {evicted} to stay within {MAX_TOKENS} tokens\n")
        manager.set_fact("script_position", done + added, importance=0.2)
        if done == 0:
            manager.set_fact("customer", "Dana", importance=0.9)
            manager.set_fact("order", 4411, importance=0.8)
        if done + added >= 9:
            manager.set_fact("preferred_contact", "email", importance=0.7)
        _show_state(manager, out)
        remaining = len(SCRIPT) - (done + added)
        if remaining:
            out.write(f"\nRun `make demo` again: {remaining} scripted turns to go.\n")
        return added
    finally:
        store.close()


def _show_state(manager: MemoryManager, out: TextIO) -> None:
    conv = manager.conversation
    out.write("\n-- state --\n")
    history = manager.get_message_history(CONVERSATION_ID)
    out.write(f"tokens kept: {conv.get_total_tokens(CONVERSATION_ID)} / {MAX_TOKENS}\n")
    out.write(f"history the next model call gets ({len(history)} messages):\n")
    for message in history:
        text = str(message.get("content", "")) if isinstance(message, dict) else str(message)
        role = message.get("role", "?") if isinstance(message, dict) else type(message).__name__
        out.write(f"  {role:>9}: {text[:60]}{'...' if len(text) > 60 else ''}\n")
    out.write(f"summary of evicted turns: {conv.get_summary(CONVERSATION_ID) or '(none yet)'}\n")
    out.write(manager.get_working_context() + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m firefly_orm.demo``."""
    parser = argparse.ArgumentParser(prog="firefly-orm demo", description=__doc__.splitlines()[0])
    parser.add_argument("--path", type=Path, default=None, help="SQLite database file")
    parser.add_argument("--reset", action="store_true", help="delete the database first")
    args = parser.parse_args(argv)
    path: Path = args.path or _default_path()
    if args.reset:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    run(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
