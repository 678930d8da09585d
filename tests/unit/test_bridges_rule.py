"""Every crossing between sync and async code lives in ``firefly_orm/bridges/``.

The three landings (threads, the loop thread, the step driver) are listed with
their users in :mod:`firefly_orm.bridges`.  A module outside ``bridges/`` that
starts a thread hand-off or an event loop of its own is a fourth, undeclared
mechanism: this test reads every module's syntax tree and fails on a call of
``asyncio.to_thread``, ``asyncio.run_coroutine_threadsafe``, ``asyncio.run``,
``loop.run_in_executor``, ``asyncio.get_running_loop`` (and ``new_event_loop`` /
``run_until_complete``, a private loop by another name), whether reached as an
attribute or imported by name.  Docstrings and comments may name them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import firefly_orm

PACKAGE = Path(firefly_orm.__file__).parent
BRIDGES = PACKAGE / "bridges"

#: Reached as ``<anything>.<name>`` (``loop.run_in_executor``, ``asyncio.to_thread``).
ATTRIBUTES = frozenset(
    {
        "to_thread",
        "run_coroutine_threadsafe",
        "run_in_executor",
        "get_running_loop",
        "new_event_loop",
        "run_until_complete",
    }
)
#: Reached as ``asyncio.<name>`` only (``run`` is too common a name otherwise).
ASYNCIO_ATTRIBUTES = frozenset({"run"})


def offences(source: str, filename: str = "<source>") -> list[str]:
    """``line: name`` for each bridge call in ``source`` (empty when there is none)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Attribute):
            on_asyncio = isinstance(node.value, ast.Name) and node.value.id == "asyncio"
            if node.attr in ATTRIBUTES or (on_asyncio and node.attr in ASYNCIO_ATTRIBUTES):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and node.module == "asyncio":
            for alias in node.names:
                if alias.name in ATTRIBUTES | ASYNCIO_ATTRIBUTES:
                    found.append(f"{node.lineno}: from asyncio import {alias.name}")
    return found


def test_bridge_calls_only_in_bridges() -> None:
    outside = [
        f"{path.relative_to(PACKAGE.parent)}:{offence}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if BRIDGES not in path.parents
        for offence in offences(path.read_text(encoding="utf-8"), str(path))
    ]
    assert outside == [], (
        "sync/async crossings outside firefly_orm/bridges/ (use a bridge function, "
        "see firefly_orm/bridges/__init__.py):\n" + "\n".join(outside)
    )


def test_the_bridges_use_them() -> None:
    # The rule is not vacuous: the landings themselves are found by the same reading.
    inside = {
        path.name: offences(path.read_text(encoding="utf-8"))
        for path in sorted(BRIDGES.glob("*.py"))
    }
    assert any("to_thread" in o for o in inside["_threads.py"])
    assert any("asyncio.run" in o for o in inside["_threads.py"])
    assert any("run_coroutine_threadsafe" in o for o in inside["_loop_thread.py"])


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import asyncio\nasyncio.run(main())", ["2: asyncio.run"]),
        ("await asyncio.to_thread(f)", ["1: asyncio.to_thread"]),
        ("loop.run_in_executor(None, f)", ["1: loop.run_in_executor"]),
        ("asyncio.run_coroutine_threadsafe(c, loop)", ["1: asyncio.run_coroutine_threadsafe"]),
        ("from asyncio import get_running_loop as g", ["1: from asyncio import get_running_loop"]),
        ("from asyncio import run", ["1: from asyncio import run"]),
        ('"""asyncio.run(main()) in a docstring"""\n# asyncio.to_thread', []),
        ("runner.run(work)\nasyncio.sleep(1)\nasyncio.Lock()", []),
    ],
)
def test_what_counts(source: str, expected: list[str]) -> None:
    assert offences(source) == expected
