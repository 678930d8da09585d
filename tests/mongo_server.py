"""Find a MongoDB server for the tests (see DESIGN.md, "Testing MongoDB here").

Order: ``FIREFLY_ORM_TEST_MONGO_URL`` -> a testcontainers ``mongo`` container when a
Docker daemon answers -> a SecantusDB server (a MongoDB wire-protocol server) started
as a subprocess on a free loopback port -> ``pytest.skip`` with the reason.

``mongo_url_for_tests()`` is a context manager yielding the URL.  Nested or repeated
uses while one is open share the same server (reference counted), so a conftest
fixture and a test module fixture never start two servers.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any, NoReturn

import pytest

ENV_VAR = "FIREFLY_ORM_TEST_MONGO_URL"
MONGO_IMAGE = "mongo:7"
_START_TIMEOUT = 60.0

_lock = threading.Lock()
_users = 0
_url: str | None = None
_description = ""
_stack: contextlib.ExitStack | None = None


def docker_available() -> bool:
    """True when a Docker daemon answers a ping within two seconds."""
    if not os.environ.get("DOCKER_HOST") and not os.path.exists("/var/run/docker.sock"):
        # No daemon to ask (docker-py would also leak a socket when its probe fails).
        return False
    try:
        from testcontainers.core.docker_client import DockerClient

        docker = DockerClient(timeout=2)
    except Exception:
        return False
    try:
        docker.client.ping()
    except Exception:
        return False
    finally:
        docker.client.close()
    return True


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers_ping(url: str, timeout_ms: int = 500) -> bool:
    from pymongo import MongoClient
    from pymongo.errors import PyMongoError

    client: MongoClient[dict[str, Any]] = MongoClient(
        url, serverSelectionTimeoutMS=timeout_ms, connectTimeoutMS=timeout_ms
    )
    try:
        client.admin.command("ping")
        return True
    except PyMongoError:
        return False
    finally:
        client.close()


@contextlib.contextmanager
def _secantus_server(required: bool) -> Iterator[str]:
    """Start ``python -m secantus`` on a free port; yield its URL; stop it."""
    storage = tempfile.mkdtemp(prefix="firefly-orm-secantus-")
    log_path = os.path.join(storage, "server.log")
    proc: subprocess.Popen[bytes] | None = None
    try:
        for _attempt in range(3):
            port = _free_port()
            data_dir = os.path.join(storage, f"data-{port}")
            with open(log_path, "ab") as log:
                proc = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "secantus",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(port),
                        "--storage-path",
                        data_dir,
                        "--log-level",
                        "WARNING",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            url = f"mongodb://127.0.0.1:{port}/?directConnection=true"
            deadline = time.monotonic() + _START_TIMEOUT
            while proc.poll() is None and time.monotonic() < deadline:
                if _answers_ping(url):
                    yield url
                    return
            _stop(proc)
            proc = None
        with open(log_path, errors="replace") as log:
            tail = log.read()[-2000:]
        _unavailable(f"SecantusDB did not start: {tail}", required)
    finally:
        if proc is not None:
            _stop(proc)
        shutil.rmtree(storage, ignore_errors=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _unavailable(reason: str, required: bool) -> NoReturn:
    if required:
        pytest.fail(f"mongo is required but unavailable: {reason}", pytrace=False)
    pytest.skip(f"mongo unavailable: {reason}")


def _start(stack: contextlib.ExitStack, required: bool) -> tuple[str, str]:
    """Resolve a server in the documented order; return (url, description)."""
    url = os.environ.get(ENV_VAR)
    if url:
        return url, f"${ENV_VAR}"
    if docker_available():
        from testcontainers.community.mongodb import MongoDbContainer

        container = stack.enter_context(MongoDbContainer(MONGO_IMAGE))
        return container.get_connection_url(), f"testcontainers {MONGO_IMAGE}"
    if importlib.util.find_spec("secantus") is not None:
        return stack.enter_context(_secantus_server(required)), "SecantusDB subprocess"
    _unavailable(
        f"{ENV_VAR} is not set, no Docker daemon answers and SecantusDB is not installed",
        required,
    )


@contextlib.contextmanager
def mongo_url_for_tests(*, required: bool = False) -> Iterator[str]:
    """Yield a MongoDB URL for tests.

    Args:
        required: Fail (instead of skip) when no server can be found or started.

    Servers the helper starts are stopped when the last user leaves.
    """
    global _users, _url, _description, _stack
    with _lock:
        if _url is None:
            stack = contextlib.ExitStack()
            try:
                _url, _description = _start(stack, required)
            except BaseException:
                stack.close()
                raise
            _stack = stack
        _users += 1
        url = _url
    try:
        yield url
    finally:
        with _lock:
            _users -= 1
            if _users == 0:
                stack_to_close, _stack, _url = _stack, None, None
                if stack_to_close is not None:
                    stack_to_close.close()


def server_description() -> str:
    """Where the current test server comes from (for reports)."""
    return _description
