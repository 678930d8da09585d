"""Start a local SecantusDB server (a MongoDB wire-protocol server) for tests and benches.

Used where no MongoDB URL is given and no Docker daemon answers (see the
README's "Testing"): :func:`secantus_server` runs ``python -m secantus`` (the
test-only ``SecantusDB`` package, GPL, never a runtime dependency) on a free
loopback port and yields its URL.  Nothing here imports it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["ServerDidNotStart", "answers_ping", "free_port", "secantus_server"]

#: Seconds a starting server gets to answer a ping.
START_TIMEOUT = 60.0


class ServerDidNotStart(RuntimeError):
    """The server did not answer; the message ends with its log's tail."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def answers_ping(url: str, timeout_ms: int = 500) -> str | None:
    """``None`` when the MongoDB server at ``url`` answers a ping, else the error text."""
    from pymongo import MongoClient
    from pymongo.errors import PyMongoError

    client: MongoClient[dict[str, Any]] = MongoClient(
        url, serverSelectionTimeoutMS=timeout_ms, connectTimeoutMS=timeout_ms
    )
    try:
        client.admin.command("ping")
        return None
    except PyMongoError as exc:
        return str(exc)
    finally:
        client.close()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextlib.contextmanager
def secantus_server(*, attempts: int = 3, start_timeout: float = START_TIMEOUT) -> Iterator[str]:
    """Start ``python -m secantus`` on a free port, yield its URL, stop it afterwards.

    Tries ``attempts`` ports (another process may take a free port first);
    raises :class:`ServerDidNotStart` when none answers within ``start_timeout``.
    """
    storage = tempfile.mkdtemp(prefix="firefly-orm-secantus-")
    log_path = os.path.join(storage, "server.log")
    proc: subprocess.Popen[bytes] | None = None
    try:
        for _attempt in range(attempts):
            port = free_port()
            command = [sys.executable, "-m", "secantus", "--host", "127.0.0.1"]
            command += [
                "--port",
                str(port),
                "--storage-path",
                os.path.join(storage, f"data-{port}"),
            ]
            command += ["--log-level", "WARNING"]
            with open(log_path, "ab") as log:
                proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
            url = f"mongodb://127.0.0.1:{port}/?directConnection=true"
            deadline = time.monotonic() + start_timeout
            while proc.poll() is None and time.monotonic() < deadline:
                if answers_ping(url) is None:
                    yield url
                    return
            _stop(proc)
            proc = None
        with open(log_path, errors="replace") as log:
            tail = log.read()[-2000:]
        raise ServerDidNotStart(f"SecantusDB did not start: {tail}")
    finally:
        if proc is not None:
            _stop(proc)
        shutil.rmtree(storage, ignore_errors=True)
