"""Processes forked from one warm interpreter: the suite's "another process", without the start-up.

Many tests prove something across processes: a second process resumes a
conversation, a host application's ``alembic`` command migrates our tables, an
example run twice remembers its first run, several writers race on one database.
A new interpreter pays for importing SQLAlchemy, pydantic, Alembic, the drivers
and the library each time: 1.5 to 3 s of CPU per process, most of the suite's
child-process time.  Here those processes are forks of a server process that
imported them once (the standard library's ``forkserver``), so each costs only
the work it does.

A fork of that server is a new process as far as the tests are concerned: its own
pid, memory, connections and exit status; nothing of the test process (no store,
connection, thread or patched object), since the server is a fresh interpreter
started by ``multiprocessing``, not a fork of pytest's.

* :func:`context` is the ``forkserver`` multiprocessing context, for tests that
  start ``Process`` objects (the spawn context's replacement).
* :func:`run` is :func:`subprocess.run` for a Python command line or a console
  script of this environment (``[sys.executable, "-m", "pkg.mod", ...]``,
  ``[sys.executable, "script.py", ...]``, ``[sys.executable, "-c", code]``, or
  ``[<venv>/bin/alembic, ...]``): the child gets the arguments, the environment,
  the working directory and standard input it was given, and its standard output,
  standard error and exit status come back in a
  :class:`subprocess.CompletedProcess` (``text=True``).  It runs the command as
  the interpreter would: ``runpy`` for ``-m`` and scripts, the console script's
  entry point, ``sys.exit`` codes, a traceback and status 1 for an uncaught
  exception, ``atexit`` handlers at the end.

What a fork cannot give, a real process keeps doing: tests of a console script's
own wiring, of a wheel installed elsewhere, or of an interpreter's start-up
(``PYTHON*`` variables) start the executable itself.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import importlib
import importlib.metadata
import io
import multiprocessing
import multiprocessing.context
import os
import runpy
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cli_runner import exit_status

__all__ = ["PRELOAD", "arun", "context", "run"]

#: What the server imports once (every fork starts with it).  ONE list for the
#: whole suite: the standard library has one fork server per process, and the
#: first user's list is the one it keeps.
PRELOAD = (
    "sqlalchemy",
    "sqlmodel",
    "alembic.config",
    "alembic.command",
    "psycopg",
    "pymongo",
    "firefly_orm",
    "firefly_orm.sql",
    "firefly_orm.migrate",
    "firefly_orm.file_store",
    "firefly_orm.mongo",
    "firefly_orm.artifacts",
    "firefly_orm.conversation",
    "firefly_orm.cli",
    "faults.harness",
    "faults.artifact_writer",
    "faults.filestore_crash",
    "faults.mongo_fault_child",
)

#: Seconds a :func:`run` may take, as the tests' ``subprocess.run`` calls allowed.
TIMEOUT = 180.0


def context() -> multiprocessing.context.ForkServerContext:
    """The ``forkserver`` context, its server importing :data:`PRELOAD` once."""
    forkserver = multiprocessing.get_context("forkserver")
    forkserver.set_forkserver_preload(list(PRELOAD))
    return forkserver


def run(
    args: Sequence[str | os.PathLike[str]],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    timeout: float = TIMEOUT,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(args, capture_output=True, text=True, ...)``, in a fork of the server.

    Raises:
        subprocess.TimeoutExpired: The child ran longer than ``timeout`` (it is killed).
        ValueError: ``args`` is neither a Python command line nor a console script here.
    """
    argv = [os.fspath(a) for a in args]
    target = _target(argv)
    with tempfile.TemporaryDirectory(prefix="forked-") as scratch:
        streams = {name: Path(scratch) / name for name in ("stdin", "stdout", "stderr")}
        streams["stdin"].write_text(input or "", encoding="utf-8")
        streams["stdout"].touch()
        streams["stderr"].touch()
        spec = {
            "target": target,
            "cwd": os.fspath(cwd) if cwd is not None else os.getcwd(),
            "env": dict(os.environ if env is None else env),
            "streams": {k: str(v) for k, v in streams.items()},
        }
        process = context().Process(target=_child, args=(spec,))
        process.start()
        process.join(timeout)
        if process.exitcode is None:
            process.kill()
            process.join()
            raise subprocess.TimeoutExpired(argv, timeout)
        out = streams["stdout"].read_text(encoding="utf-8", errors="replace")
        err = streams["stderr"].read_text(encoding="utf-8", errors="replace")
    # Killed by a signal: a negative signal number, as subprocess reports it.
    return subprocess.CompletedProcess(argv, process.exitcode, out, err)


async def arun(
    args: Sequence[str | os.PathLike[str]], **options: Any
) -> subprocess.CompletedProcess[str]:
    """:func:`run` (same keywords) from a coroutine: the wait happens in an executor thread."""
    call = functools.partial(run, args, **options)
    return await asyncio.get_running_loop().run_in_executor(None, call)


def _target(argv: list[str]) -> dict[str, Any]:
    """What the command line runs: ``{"kind": "module" | "path" | "code" | "entry", ...}``."""
    program, rest = argv[0], argv[1:]
    if Path(program).name.startswith("python") or program == sys.executable:
        if rest[:1] == ["-m"] and len(rest) >= 2:
            return {"kind": "module", "name": rest[1], "argv": [rest[1], *rest[2:]]}
        if rest[:1] == ["-c"] and len(rest) >= 2:
            return {"kind": "code", "code": rest[1], "argv": ["-c", *rest[2:]]}
        if rest and not rest[0].startswith("-"):
            return {"kind": "path", "path": rest[0], "argv": rest}
        raise ValueError(f"forked.run: unsupported interpreter options in {argv!r}")
    script = Path(program)
    if script.parent != Path(sys.executable).parent:
        raise ValueError(f"forked.run: {program!r} is not a console script of this environment")
    [entry] = [
        e for e in importlib.metadata.entry_points(group="console_scripts") if e.name == script.name
    ]
    return {"kind": "entry", "value": entry.value, "argv": [program, *rest]}


def _child(spec: dict[str, Any]) -> None:
    """In the fork: become the command's process, run it, exit with its status."""
    code = 1
    try:
        _become(spec)
        code = _execute(spec["target"])
    finally:
        with contextlib.suppress(Exception):
            atexit._run_exitfuncs()  # what the interpreter runs at exit
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _become(spec: dict[str, Any]) -> None:
    """Working directory, environment, standard streams and ``sys.path`` of the command."""
    os.chdir(spec["cwd"])
    os.environ.clear()
    os.environ.update(spec["env"])
    streams = spec["streams"]
    for fd, name, mode in (
        (0, "stdin", os.O_RDONLY),
        (1, "stdout", os.O_WRONLY),
        (2, "stderr", os.O_WRONLY),
    ):
        opened = os.open(streams[name], mode)
        os.dup2(opened, fd)
        os.close(opened)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False))
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False), errors="backslashreplace", line_buffering=True
    )
    target = spec["target"]
    first = {
        "module": os.getcwd(),
        "code": "",
        "path": str(Path(target.get("path", ".")).resolve().parent),
        "entry": str(Path(sys.executable).parent),
    }[target["kind"]]
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [first, *extra, *(p for p in sys.path if p not in extra and p != first)]
    sys.argv = list(target["argv"])


def _execute(target: dict[str, Any]) -> int:
    """Run the command; its exit status as the interpreter would give it."""
    return exit_status(functools.partial(_run_target, target))


def _run_target(target: dict[str, Any]) -> object:
    """Run what ``target`` names (``python -m``, a script, ``-c``, a console script)."""
    kind = target["kind"]
    if kind == "module":
        runpy.run_module(target["name"], run_name="__main__", alter_sys=True)
    elif kind == "path":
        runpy.run_path(target["path"], run_name="__main__")
    elif kind == "code":
        exec(compile(target["code"], "<string>", "exec"), {"__name__": "__main__"})
    else:
        module, _, attribute = target["value"].partition(":")
        entry: Any = importlib.import_module(module)
        for part in attribute.split("."):
            entry = getattr(entry, part)
        return entry()
    return None
