"""An S3-compatible server for the tests: ``FIREFLY_ORM_TEST_S3_URL``, else moto's, started here.

The fixture ``s3_url`` (tests/conftest.py) starts moto's HTTP server (the
``moto_server`` command of the ``moto[server]`` package, in the ``dev``
extra) as a separate process on a free loopback port, and stops it after the
session.  S3 clients talk to it over HTTP as to any S3 endpoint.  Without the
command the tests skip, or fail under ``--require-db s3``.

The environment URL is the endpoint (``http://127.0.0.1:9000``); its
credentials come from ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from redis_server import _free_port, _stop  # one way to pick a port and stop a server

ENV_VAR = "FIREFLY_ORM_TEST_S3_URL"
#: Seconds a started server has to answer.
START_TIMEOUT = 60.0
#: Credentials moto accepts (any); a server from the environment uses the AWS variables.
_TEST_KEY = "firefly-test"


class S3Unavailable(RuntimeError):
    """No S3 server could be found or started (the message says why)."""


def _command() -> list[str] | None:
    beside = Path(sys.executable).with_name("moto_server")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("moto_server")
    return None if found is None else [found]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=0.5) as response:
            return int(response.status) < 500
    except OSError:
        return False


@contextlib.contextmanager
def _started(command: list[str]) -> Iterator[str]:
    directory = Path(tempfile.mkdtemp(prefix="firefly-orm-s3-"))
    log = directory / "server.log"
    try:
        port = _free_port()
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [*command, "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=out
            )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + START_TIMEOUT
            while proc.poll() is None and time.monotonic() < deadline:
                if _answers(url):
                    yield url
                    return
                time.sleep(0.1)
            tail = log.read_text(errors="replace")[-2000:]
            raise S3Unavailable(f"moto_server did not answer on {url}: {tail}")
        finally:
            _stop(proc)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def s3_endpoint_for_tests() -> Iterator[str]:
    """Yield an S3 endpoint URL: the environment's, else a moto server started here.

    Raises:
        S3Unavailable: Neither is available.
    """
    url = os.environ.get(ENV_VAR)
    if url:
        yield url
        return
    command = _command()
    if command is None:
        raise S3Unavailable(f"{ENV_VAR} is not set and moto_server is not installed")
    with _started(command) as started:
        yield started


def storage_options(endpoint: str) -> dict[str, Any]:
    """``fsspec`` options for ``s3://`` URLs on ``endpoint``."""
    from_env = os.environ.get(ENV_VAR) == endpoint
    return {
        "key": os.environ.get("AWS_ACCESS_KEY_ID", _TEST_KEY) if from_env else _TEST_KEY,
        "secret": os.environ.get("AWS_SECRET_ACCESS_KEY", _TEST_KEY) if from_env else _TEST_KEY,
        "client_kwargs": {"endpoint_url": endpoint},
        "skip_instance_cache": True,
    }
