"""Fork server for the migration crash tests: run a migration, kill -9 it after SQL statement k.

Run as ``python tests/faults/migration_crash.py``.  The process imports
firefly_orm, SQLAlchemy and Alembic once, then reads one JSON request per line
on stdin::

    {"entry": "cli", "action": "upgrade", "url": "sqlite:///x.db", "schema": null,
     "kill_after": 7}

and answers each with one JSON line on stdout::

    {"killed": true, "exit_code": null, "statements": 7, "error": null}

A request ``{"race": [request, ...]}`` forks one child per request (``kill_after``
unused), waits until every child is ready, then releases them at the same
moment (one closed pipe) and answers ``{"results": [{"error": ..., "exit_code":
..., "started": ..., "ended": ...}, ...]}``: the concurrent migrators of
``test_migration_faults``, each a process of its own that imported the library
before the race, so their migrations really run at once (a started interpreter
spends seconds importing first, which spreads the racers out).

For each request it forks a child (single-threaded parent, so fork is safe)
that counts every statement SQLAlchemy sends to a DBAPI cursor (an
``after_cursor_execute`` listener on every engine) and, when ``kill_after`` is
k > 0, sends itself SIGKILL right after the k-th one: the database sees exactly
what a process killed at that moment leaves behind.  With ``kill_after`` 0 the
child runs to the end and reports how many statements the migration took.

Entries (``entry``), each the way a user reaches the migrations:

* ``cli``: ``firefly-orm migrate`` / ``firefly-orm downgrade base`` (``firefly_orm.cli.main``);
* ``library``: ``migrate.upgrade(url)`` / ``migrate.downgrade(url, "base")``;
* ``alembic``: ``alembic.command.upgrade`` / ``downgrade`` on a config with a URL only
  (our ``env.py`` connects by itself, as ``alembic upgrade head`` does);
* ``alembic-cli`` (upgrade only): the ``alembic`` console script's own function,
  ``alembic -c alembic.ini -x url=URL [-x schema=S] upgrade head`` in the checkout;
* ``store``: ``SQLiteStore`` / ``PostgreSQLStore`` ``.initialize()`` (upgrade only).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from alembic import command
from sqlalchemy import event
from sqlalchemy.engine import Engine

from firefly_orm import cli, migrate
from firefly_orm.sql import PostgreSQLStore, SQLiteStore

REPO = Path(__file__).resolve().parents[2]


def _run(entry: str, action: str, url: str, schema: str | None) -> None:
    """Run one migration the way ``entry`` does; raise on failure."""
    if entry == "cli":
        where = ["--url", url, *(["--schema", schema] if schema else [])]
        args = ["migrate", *where] if action == "upgrade" else ["downgrade", "base", *where]
        code = cli.main(args)
        if code != 0:
            raise RuntimeError(f"firefly-orm exited with {code}")
    elif entry == "library":
        if action == "upgrade":
            migrate.upgrade(url, schema_name=schema)
        else:
            migrate.downgrade(url, "base", schema_name=schema)
    elif entry == "alembic":
        cfg = migrate.make_config(url=url, schema_name=schema)
        if action == "upgrade":
            command.upgrade(cfg, "head")
        else:
            command.downgrade(cfg, "base")
    elif entry == "alembic-cli" and action == "upgrade":
        from alembic.config import main as alembic_main

        os.chdir(REPO)  # as the console script is run from a checkout
        where = ["-x", f"url={url}", *(["-x", f"schema={schema}"] if schema else [])]
        alembic_main(argv=["-c", str(REPO / "alembic.ini"), *where, "upgrade", "head"])
    elif entry == "store" and action == "upgrade":
        store: Any
        if url.startswith("sqlite"):
            store = SQLiteStore(url.removeprefix("sqlite:///"))
        else:
            store = PostgreSQLStore(url, schema_name=schema, pool_min_size=0)
        try:
            store.initialize()
        finally:
            store.close()
    else:
        raise ValueError(f"unknown entry/action {entry!r}/{action!r}")


def _child(request: dict[str, Any], write_fd: int) -> None:
    """In the forked child: count statements, die after the k-th, report the count."""
    kill_after = int(request["kill_after"])
    count = 0

    def after_execute(*_args: Any) -> None:
        nonlocal count
        count += 1
        if count == kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    event.listen(Engine, "after_cursor_execute", after_execute)
    error: str | None = None
    try:
        _run(request["entry"], request["action"], request["url"], request.get("schema"))
    except BaseException as exc:  # reported to the test, which fails on it
        error = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    with os.fdopen(write_fd, "w") as out:
        out.write(json.dumps({"statements": count, "error": error}))


def _racer(request: dict[str, Any], ready_fd: int, go_fd: int, write_fd: int) -> None:
    """In a forked child: say ready, wait for the start, migrate, report."""
    os.write(ready_fd, b"r")
    os.read(go_fd, 1)  # returns (empty) when the parent closes the other end: the start
    started = time.monotonic()
    error: str | None = None
    try:
        _run(request["entry"], request["action"], request["url"], request.get("schema"))
    except BaseException as exc:  # reported to the test, which fails on it
        error = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    ended = time.monotonic()
    with os.fdopen(write_fd, "w") as out:
        out.write(json.dumps({"error": error, "started": started, "ended": ended}))


def _race(requests: list[dict[str, Any]]) -> dict[str, Any]:
    """Fork one child per request, start them at once; their results."""
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    children: list[tuple[int, int]] = []
    for request in requests:
        read_fd, write_fd = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child never returns
            os.close(go_w)  # else the start (its closing) never comes
            os.close(ready_r)
            os.close(read_fd)
            os.dup2(2, 1)
            try:
                _racer(request, ready_w, go_r, write_fd)
            finally:
                os._exit(0)
        os.close(write_fd)
        children.append((pid, read_fd))
    os.close(ready_w)
    os.close(go_r)
    ready = b""
    while len(ready) < len(requests):
        chunk = os.read(ready_r, len(requests))
        if not chunk:
            break  # a child died before it was ready: its result says so
        ready += chunk
    os.close(ready_r)
    os.close(go_w)  # the start: every child's read returns now
    results = []
    for pid, read_fd in children:
        with os.fdopen(read_fd) as pipe:
            reported = pipe.read()
        _, status = os.waitpid(pid, 0)
        result: dict[str, Any] = json.loads(reported) if reported else {"error": "no report"}
        result["exit_code"] = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        results.append(result)
    return {"results": results}


def serve() -> None:
    """Answer requests from stdin until it closes."""
    # Our revision files read once here (the process's cached ScriptDirectory),
    # not again in every forked child: a server that imported the library.
    migrate.head()
    for line in sys.stdin:
        request = json.loads(line)
        if "race" in request:
            print(json.dumps(_race(request["race"])), flush=True)
            continue
        read_fd, write_fd = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child never returns
            os.close(read_fd)
            os.dup2(2, 1)  # the child's prints must not mix with our answers
            try:
                _child(request, write_fd)
            finally:
                os._exit(0)
        os.close(write_fd)
        with os.fdopen(read_fd) as pipe:
            reported = pipe.read()
        _, status = os.waitpid(pid, 0)
        answer: dict[str, Any] = json.loads(reported) if reported else {}
        answer.setdefault("statements", None)
        answer.setdefault("error", None)
        answer["killed"] = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        answer["exit_code"] = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    serve()
