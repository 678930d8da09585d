"""The help desk, offline, in one command.

``python -m examples.fastapi_chat [--db URL] [--ticket ID] [MESSAGE ...]``

Migrates the database through the app's Alembic (the app's tables and
firefly_orm's), starts the app in this process behind FastAPI's ``TestClient``
(no server, no network: the agent runs on an offline ``FunctionModel``), opens
a ticket, or continues ``--ticket ID``, sends the messages (a short script by
default) and prints the replies and the history stored in memory.

The database is ``--db URL``, else ``$FASTAPI_CHAT_DB``, else the SQLite file
``data/fastapi_chat.sqlite3``.  Run it again with ``--ticket ID``: the new
process finds the conversation in the database and the agent remembers it.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from fastapi.testclient import TestClient

from examples.fastapi_chat import migrate
from examples.fastapi_chat.app import create_app

#: What the demo says when no message is given.
SCRIPT = (
    "My printer says it is offline.",
    "I already restarted it twice.",
    "It is the LaserJet on the office Wi-Fi.",
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the scripted session (exit status 0; 1 when a request fails)."""
    parser = argparse.ArgumentParser(
        prog="python -m examples.fastapi_chat", description="Run the help desk offline."
    )
    parser.add_argument(
        "--db", help=f"database URL (default: ${migrate.ENV_DB}, else {migrate.DEFAULT_DB})"
    )
    parser.add_argument("--ticket", type=int, help="continue this ticket instead of opening one")
    parser.add_argument("--customer", default="ada@example.com", help="who opens the ticket")
    parser.add_argument("messages", nargs="*", help="what to say (default: a short script)")
    args = parser.parse_args(argv)

    url = migrate.database_url(args.db)
    shown = sa.make_url(url).render_as_string(hide_password=True)
    migrate.upgrade(url)  # the app's revisions, and firefly_orm's with them
    print(
        f"database {shown}: app at {migrate.current(url)}, "
        f"firefly_orm at {migrate.memory_revision(url)}"
    )

    with TestClient(create_app(url), raise_server_exceptions=False) as client:
        if args.ticket is None:
            response = client.post(
                "/tickets", json={"customer": args.customer, "subject": "Printer offline"}
            )
        else:
            response = client.get(f"/tickets/{args.ticket}")
        if response.status_code not in (200, 201):
            return _failed(response.status_code, response.json())
        ticket: dict[str, Any] = response.json()
        verb = "opened" if args.ticket is None else "continuing"
        print(f"{verb} ticket #{ticket['id']} for {ticket['customer']}: {ticket['subject']}")

        for text in args.messages or SCRIPT:
            response = client.post(f"/tickets/{ticket['id']}/messages", json={"text": text})
            if response.status_code != 200:
                return _failed(response.status_code, response.json())
            print(f"  you:       {text}")
            print(f"  assistant: {response.json()['reply']}")

        turns = client.get(f"/tickets/{ticket['id']}/messages").json()
        print(f"history of ticket #{ticket['id']} ({len(turns)} turns, from memory):")
        for turn in turns:
            print(f"  [{turn['turn_id']}] {turn['user']}")
    print(
        "continue it in a new process: python -m examples.fastapi_chat "
        f"--db '{shown}' --ticket {ticket['id']} 'Any news?'"
    )
    return 0


def _failed(status: int, body: Any) -> int:
    print(f"request failed ({status}): {body}")
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
