"""``firefly-orm`` run inside the test process, seen as a test of the installed script sees it.

Starting the console script costs a process and a fresh import of SQLAlchemy and
Alembic (about a second, more under load) per call; :func:`run_cli` calls
:func:`firefly_orm.cli.main` here instead and returns what
:func:`subprocess.run` would (``returncode``, ``stdout``, ``stderr`` as text), so
the tests' assertions are the same for both.  What a fresh process would see is
rebuilt for the call and undone after it:

* the environment without any ``FIREFLY_AGENTIC_*`` variable, plus ``env``;
* stdin: ``input`` (bytes or text), else empty (the test process's stdin is
  ``/dev/null`` under pytest); stdout and stderr: UTF-8 text streams that are not
  terminals (so progress bars are off unless asked for), read back with
  universal newlines as ``text=True`` does;
* the exit status of ``sys.exit``/``parser.error`` (``SystemExit``), and for an
  exception ``main`` lets through, the traceback on stderr and status 1, as the
  interpreter does;
* warnings with a fresh interpreter's default filters, printed on stderr; log
  records of WARNING and above from loggers without a handler printed on stderr,
  as Python's last-resort handler does in a process (the handlers pytest puts on
  the root logger do not count);
* logging afterwards as it was before (``--verbose`` adds handlers to the
  ``firefly_orm`` and ``alembic`` loggers and sets their level).

Every database connection the command opens must be closed when it returns:
one left open (a store not closed, an engine not disposed) fails the call with
:class:`CliLeakError` (the connections are closed first).

``FIREFLY_ORM_TEST_CLI=subprocess`` runs the installed script instead, with the
same environment and input, for checking that a test means the same both ways.
:func:`run_installed` always does; the few tests that must prove the console
script's wiring and a real process's exit status use it.

Safe under pytest-xdist: no ports, no files; the environment, the working
directory, the standard streams, warnings filters and loggers are restored after
each call.  Not thread-safe: one call at a time in a process (the standard
streams and the environment are the process's).
"""

from __future__ import annotations

import contextlib
import functools
import io
import locale
import logging
import os
import subprocess
import sys
import threading
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

__all__ = ["EXE", "CliLeakError", "clean_environment", "exit_status", "run_cli", "run_installed"]

#: The installed console script, beside this interpreter.
EXE = Path(sys.executable).with_name("firefly-orm")
#: Environment variables a test's command never inherits (the settings' prefix).
DROPPED_PREFIX = "FIREFLY_AGENTIC_"
#: ``subprocess`` here runs every :func:`run_cli` through the installed script.
MODE_VARIABLE = "FIREFLY_ORM_TEST_CLI"
#: The encoding of a child's standard streams and of ``text=True`` decoding.
ENCODING = locale.getpreferredencoding(False)
#: Seconds a subprocess may take.
TIMEOUT = 120.0


class CliLeakError(AssertionError):
    """The command returned with database connections still open."""


def clean_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``os.environ`` without ``FIREFLY_AGENTIC_*`` variables, plus ``env``."""
    environ = {k: v for k, v in os.environ.items() if not k.upper().startswith(DROPPED_PREFIX)}
    environ.update(env or {})
    return environ


def run_installed(
    *args: str,
    env: Mapping[str, str] | None = None,
    input: bytes | str | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """The installed ``firefly-orm ARGS`` in a child process (text output)."""
    data = input.encode(ENCODING) if isinstance(input, str) else input
    done = subprocess.run(
        [str(EXE), *args],
        input=data,
        capture_output=True,
        timeout=TIMEOUT,
        env=clean_environment(env),
        cwd=cwd,
        check=False,
    )
    return subprocess.CompletedProcess(
        done.args, done.returncode, _text(done.stdout), _text(done.stderr)
    )


def run_cli(
    *args: str,
    env: Mapping[str, str] | None = None,
    input: bytes | str | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """``firefly-orm ARGS`` in this process; what :func:`run_installed` would return.

    Args:
        args: The command line after ``firefly-orm``.
        env: Variables to set for the call (after the ``FIREFLY_AGENTIC_*`` ones
            are removed).
        input: What the command reads on stdin (text is encoded as UTF-8).
        cwd: The working directory during the call.

    Raises:
        CliLeakError: The command left database connections open.
    """
    if os.environ.get(MODE_VARIABLE, "").strip().lower() == "subprocess":
        return run_installed(*args, env=env, input=input, cwd=cwd)
    from firefly_orm.cli import main

    data = input.encode(ENCODING) if isinstance(input, str) else (input or b"")
    stdin = io.TextIOWrapper(io.BytesIO(data), encoding=ENCODING)
    stdout = _output_stream("strict")
    stderr = _output_stream("backslashreplace")
    with contextlib.ExitStack() as stack:
        stack.enter_context(_environment(env))
        if cwd is not None:
            stack.enter_context(contextlib.chdir(cwd))
        stack.enter_context(_standard_streams(stdin, stdout, stderr))
        stack.enter_context(_logging_restored())
        stack.enter_context(_fresh_warnings())
        opened = stack.enter_context(_connections_opened())
        code = exit_status(functools.partial(main, list(args)))
        leaked = _close_open(opened)
    stdout.flush()
    stderr.flush()
    result = subprocess.CompletedProcess(
        ["firefly-orm", *args], code, _captured(stdout), _captured(stderr)
    )
    if leaked:
        raise CliLeakError(
            f"firefly-orm {' '.join(args)} returned with {leaked} database connection(s) "
            f"still open (a store not closed or an engine not disposed); exit {code}, "
            f"stderr: {result.stderr!r}"
        )
    return result


# --------------------------------------------------------------------------- the call


def exit_status(call: Callable[[], Any]) -> int:
    """``call()``'s exit status as the interpreter would make it.

    A returned ``None`` is 0 and an ``int`` is itself; ``SystemExit`` gives its code
    (a non-integer code is printed on stderr, status 1); another exception prints
    its traceback on stderr, status 1.  (Also used by ``tests/forked.py``.)
    """
    try:
        result = call()
        return 0 if result is None else int(result)
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code
        print(exc.code, file=sys.stderr)
        return 1
    except Exception:
        sys.stderr.write(traceback.format_exc())
        return 1


def _output_stream(errors: str) -> io.TextIOWrapper:
    """A child's stdout or stderr: encoded text on a pipe (not a terminal)."""
    return io.TextIOWrapper(io.BytesIO(), encoding=ENCODING, errors=errors, newline="\n")


def _captured(stream: io.TextIOWrapper) -> str:
    buffer = stream.buffer
    assert isinstance(buffer, io.BytesIO)
    return _text(buffer.getvalue())


def _text(raw: bytes) -> str:
    """``raw`` decoded as ``subprocess.run(text=True)`` does (universal newlines)."""
    return io.TextIOWrapper(io.BytesIO(raw), encoding=ENCODING, newline=None).read()


@contextlib.contextmanager
def _environment(env: Mapping[str, str] | None) -> Iterator[None]:
    """``os.environ`` as :func:`clean_environment` makes it, restored after."""
    saved = dict(os.environ)
    wanted = clean_environment(env)
    try:
        for name in [name for name in os.environ if name not in wanted]:
            del os.environ[name]
        os.environ.update(wanted)
        yield
    finally:
        for name in [name for name in os.environ if name not in saved]:
            del os.environ[name]
        os.environ.update(saved)


@contextlib.contextmanager
def _standard_streams(stdin: TextIO, stdout: TextIO, stderr: TextIO) -> Iterator[None]:
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = stdin, stdout, stderr
    try:
        yield
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved


# --------------------------------------------------------------------------- warnings, logging


@contextlib.contextmanager
def _fresh_warnings() -> Iterator[None]:
    """A fresh interpreter's warnings filters, warnings printed on (the call's) stderr."""

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        text = warnings.formatwarning(message, category, filename, lineno, line)
        (file or sys.stderr).write(text)

    with warnings.catch_warnings():
        warnings.resetwarnings()
        # CPython's defaults without -W or PYTHONWARNINGS (lowest priority first)
        warnings.simplefilter("ignore", ResourceWarning)
        warnings.simplefilter("ignore", ImportWarning)
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
        warnings.showwarning = show
        yield


class _LastResort(logging.Handler):
    """On the root logger: what :data:`logging.lastResort` prints in a process.

    A record of WARNING or above that met no handler on its way up (the handlers
    the root logger had before the call, pytest's, do not count) goes to
    ``logging.lastResort``, which writes it to the current ``sys.stderr``.
    """

    def __init__(self, ignored: Sequence[logging.Handler]) -> None:
        super().__init__(logging.WARNING)
        self.ignored = {id(handler) for handler in ignored} | {id(self)}

    def emit(self, record: logging.LogRecord) -> None:
        logger: logging.Logger | None = logging.getLogger(record.name)
        while logger is not None:
            if any(id(handler) not in self.ignored for handler in logger.handlers):
                return
            logger = logger.parent if logger.propagate else None
        if logging.lastResort is not None:
            logging.lastResort.handle(record)


_LoggerState = tuple[int, list[logging.Handler], bool, bool]


@contextlib.contextmanager
def _logging_restored() -> Iterator[None]:
    """Every logger's level, handlers, propagation and disabled flag restored after;
    the root logger at WARNING (a process's) with the last-resort emulation meanwhile."""
    root = logging.getLogger()
    loggers = [root, *(logging.getLogger(name) for name in list(logging.root.manager.loggerDict))]
    saved: dict[str, _LoggerState] = {
        logger.name: (logger.level, list(logger.handlers), logger.propagate, logger.disabled)
        for logger in loggers
    }
    last_resort = _LastResort(root.handlers)
    root.addHandler(last_resort)
    root.setLevel(logging.WARNING)
    try:
        yield
    finally:
        root.removeHandler(last_resort)
        for name in list(logging.root.manager.loggerDict):
            if name not in saved:  # made during the call: as new
                logger = logging.getLogger(name)
                saved[name] = (logging.NOTSET, [], True, False)
        for name, (level, handlers, propagate, disabled) in saved.items():
            logger = root if name == root.name else logging.getLogger(name)
            for handler in [h for h in logger.handlers if h not in handlers]:
                logger.removeHandler(handler)
                handler.close()
            logger.handlers[:] = handlers
            logger.setLevel(level)
            logger.propagate = propagate
            logger.disabled = disabled


# --------------------------------------------------------------------------- connections


@contextlib.contextmanager
def _connections_opened() -> Iterator[list[Any]]:
    """The DBAPI connections any SQLAlchemy pool opens on this thread meanwhile."""
    import sqlalchemy as sa

    opened: list[Any] = []
    thread = threading.get_ident()

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        if threading.get_ident() == thread:
            opened.append(dbapi_connection)

    sa.event.listen(sa.pool.Pool, "connect", on_connect)
    try:
        yield opened
    finally:
        sa.event.remove(sa.pool.Pool, "connect", on_connect)


def _is_open(connection: Any) -> bool:
    closed = getattr(connection, "closed", None)  # psycopg: a bool
    if isinstance(closed, bool):
        return not closed
    try:  # sqlite3: any attribute access on a closed connection raises
        connection.in_transaction  # noqa: B018
    except Exception:
        return False
    return True


def _close_open(opened: list[Any]) -> int:
    """Close the connections in ``opened`` still open; how many there were."""
    leaked = [connection for connection in opened if _is_open(connection)]
    for connection in leaked:
        with contextlib.suppress(Exception):
            connection.close()
    opened.clear()
    return len(leaked)
