"""``firefly-orm usage``: the turns' usage summed per user, conversation, day (issue 32)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from cli_runner import run_cli as run

from firefly_orm.conversation import ConversationMemory
from firefly_orm.sql import SQLiteStore


def test_usage_report(tmp_path: Path) -> None:
    path = tmp_path / "usage.sqlite3"
    store = SQLiteStore(path)
    store.initialize()
    try:
        mem = ConversationMemory(store=store)
        first = mem.new_conversation(user_id="ann")
        second = mem.new_conversation(user_id="ann")
        for cid, n in ((first, 3), (first, 4), (second, 10)):
            usage = {"requests": 1, "input_tokens": n, "output_tokens": n, "total_tokens": 2 * n}
            mem.add_turn(cid, "q", "a", metadata={"usage": usage})
    finally:
        store.close()
    url = ["--url", f"sqlite:///{path}"]

    result = run("usage", "--user", "ann", "--json", *url)
    assert result.returncode == 0, result.stderr
    [total] = json.loads(result.stdout)
    assert (total["turns"], total["input_tokens"], total["total_tokens"]) == (3, 17, 34)

    result = run("usage", "--user", "ann", "--by", "conversation", "--json", *url)
    rows = {row["group"]: row["input_tokens"] for row in json.loads(result.stdout)}
    assert rows == {first: 7, second: 10}

    result = run("usage", "--conversation", first, "--by", "day", *url)
    assert result.returncode == 0, result.stderr
    header, line = result.stdout.splitlines()
    assert header.split()[:3] == ["day", "turns", "requests"]
    assert line.split()[:4] == [datetime.now(UTC).strftime("%Y-%m-%d"), "2", "2", "7"]

    assert (
        run("usage", "--user", "ann", "--since", "2999-01-01", "--json", *url).stdout.count(
            '"turns": 0'
        )
        == 1
    )
    assert run("usage", *url).returncode == 2  # neither --user nor --conversation
    assert run("usage", "--user", "ann", "--since", "yesterday", *url).returncode == 2
