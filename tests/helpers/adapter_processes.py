"""The second process of the framework adapters' resume tests, and the store it opens.

:func:`run_second_process` runs ``python -m helpers.<module> STORE LOCATION
SCHEMA *args`` on the test's SQLite file or PostgreSQL schema and returns what
it printed; the helper module opens that store with :func:`open_store`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import forked
from store_backends import OpenedBackend

REPO = Path(__file__).resolve().parents[2]


def open_store(kind: str, location: str, schema: str) -> Any:
    """The SQLite file (``kind="sqlite"``) or PostgreSQL schema a test made."""
    from firefly_orm.sql import PostgreSQLStore, SQLiteStore

    if kind == "sqlite":
        return SQLiteStore(location)
    return PostgreSQLStore(location, schema_name=schema)


def run_second_process(module: str, backend: OpenedBackend, *args: str) -> str:
    """Run ``helpers.<module>`` on ``backend``'s data (sqlite or postgres); its stdout."""
    place = backend.place
    if backend.name == "sqlite":
        location = str(place.tmp_path / "db" / "memory.sqlite3")
    else:
        location = place.postgres()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO), str(REPO / "tests"), env.get("PYTHONPATH")])
    )
    done = forked.run(  # another process: a fork of a warm interpreter
        [sys.executable, "-m", f"helpers.{module}", backend.name, location, place.name, *args],
        cwd=REPO,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()
