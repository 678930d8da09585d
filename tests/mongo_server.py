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
from collections.abc import Iterator
from typing import NoReturn

import pytest
from shared_server import SharedServer

from firefly_orm.testing._secantus import ServerDidNotStart, secantus_server

ENV_VAR = "FIREFLY_ORM_TEST_MONGO_URL"
MONGO_IMAGE = "mongo:7"


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


@contextlib.contextmanager
def _secantus_server(required: bool) -> Iterator[str]:
    """A SecantusDB server started for this run (skip or fail when it does not start)."""
    with contextlib.ExitStack() as stack:
        try:
            url = stack.enter_context(secantus_server())
        except ServerDidNotStart as exc:
            _unavailable(str(exc), required)
        yield url


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
    with _SERVER.use(required) as (url, _description):
        yield url


def server_description() -> str:
    """Where the current test server comes from (for reports)."""
    return "" if _SERVER.value is None else _SERVER.value[1]


#: The one server of this process (its first user's ``required`` decides whether a
#: missing server skips or fails).
_SERVER: SharedServer[tuple[str, str]] = SharedServer(_start)
