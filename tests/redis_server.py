"""Find a Redis server for the tests: ``FIREFLY_ORM_TEST_REDIS_URL``, else one started here.

The fixture starts Debian's ``redis-server`` (installed by
``scripts/ensure-test-servers.sh``, run by ``make test``) on a free loopback port, with
no persistence, in a temporary directory, and stops it when the last user
leaves.  ``FIREFLY_ORM_TEST_REDIS_SERVER=/path/to/redis-server`` picks another
binary.  Without a binary the tests skip, or fail under ``--require-db redis``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from shared_server import SharedServer

ENV_VAR = "FIREFLY_ORM_TEST_REDIS_URL"
BINARY_VAR = "FIREFLY_ORM_TEST_REDIS_SERVER"
#: Seconds a started server has to answer.
START_TIMEOUT = 30.0


class RedisUnavailable(RuntimeError):
    """No Redis server could be found or started (the message says why)."""


def _binary() -> str | None:
    chosen = os.environ.get(BINARY_VAR)
    if chosen:
        return chosen
    return shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@contextlib.contextmanager
def started_server(binary: str, *, attempts: int = 3) -> Iterator[str]:
    """Start ``binary`` on a free port (no persistence); yield its URL; stop it after."""
    directory = Path(tempfile.mkdtemp(prefix="firefly-orm-redis-"))
    log = directory / "server.log"
    proc: subprocess.Popen[bytes] | None = None
    try:
        for _ in range(attempts):
            port = _free_port()
            command = [binary, "--port", str(port), "--bind", "127.0.0.1"]
            command += ["--save", "", "--appendonly", "no", "--dir", str(directory)]
            command += ["--logfile", str(log), "--daemonize", "no"]
            proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + START_TIMEOUT
            while proc.poll() is None and time.monotonic() < deadline:
                if _answers(port):
                    yield f"redis://127.0.0.1:{port}/0"
                    return
                time.sleep(0.05)
            _stop(proc)
            proc = None
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise RedisUnavailable(f"{binary} did not answer on any of {attempts} ports:\n{tail}")
    finally:
        if proc is not None:
            _stop(proc)
        shutil.rmtree(directory, ignore_errors=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _start(stack: contextlib.ExitStack) -> str:
    url = os.environ.get(ENV_VAR)
    if url:
        return url
    binary = _binary()
    if binary is None:
        raise RedisUnavailable(
            f"{ENV_VAR} is not set and redis-server is not installed "
            "(scripts/ensure-test-servers.sh installs it)"
        )
    return stack.enter_context(started_server(binary))


@contextlib.contextmanager
def redis_url_for_tests() -> Iterator[str]:
    """Yield a Redis URL; nested users share one server (reference counted).

    Raises:
        RedisUnavailable: None can be found or started.
    """
    with _SERVER.use() as url:
        yield url


_SERVER: SharedServer[str] = SharedServer(_start)


def drop_prefix(url: str, prefix: str) -> None:
    """Delete every key of a store's ``prefix`` (a test's data)."""
    from redis import Redis

    client = Redis.from_url(url)
    try:
        pattern = prefix.encode() + b":*"
        batch: list[bytes] = []
        for key in client.scan_iter(match=pattern, count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                client.delete(*batch)
                batch.clear()
        if batch:
            client.delete(*batch)
    finally:
        client.close()


def raw_dump(url: str, prefix: str) -> str:
    """Everything a store of ``prefix`` holds, read around firefly_orm, as one text.

    Every key name with its value: strings as they are, the members of sets and
    sorted sets (the privacy tests look for plaintext in all of it).
    """
    from redis import Redis

    client = Redis.from_url(url)
    try:
        lines: list[str] = []
        for key in sorted(client.scan_iter(match=prefix.encode() + b":*", count=1000)):
            kind = client.type(key)
            values: list[Any] = []
            if kind == b"string":
                values = [client.get(key) or b""]
            elif kind == b"set":
                values = sorted(client.smembers(key))
            elif kind == b"zset":
                values = list(client.zrange(key, 0, -1))
            lines.append(repr(key) + " " + " ".join(repr(v) for v in values))
            lines.extend(bytes(v).decode("utf-8", "replace") for v in values)
        return "\n".join(lines)
    finally:
        client.close()


def search_words(url: str, prefix: str) -> set[str]:
    """The words of a store's full-text index (the names of its word sets)."""
    from redis import Redis

    client = Redis.from_url(url)
    try:
        return {
            key.rpartition(b"\0")[2].decode()
            for key in client.scan_iter(match=prefix.encode() + b":w:*", count=1000)
        }
    finally:
        client.close()
