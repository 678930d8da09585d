"""Servers of the fault suite's own, to restart and kill: PostgreSQL clusters, MongoDB.

* :class:`DisposableCluster`: a PostgreSQL cluster (``pg_createcluster`` on a free
  port, trust auth), restarted, stopped and SIGKILLed by the server-restart tests and
  dropped at the end.  The main cluster (port 5432) is never touched.
* :class:`MongoServer`: a SecantusDB server keeping its port and data directory across
  restarts, with a short transaction lifetime (``python servers.py mongo-server ...``
  is its process).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

SERVERS = Path(__file__).resolve()


# --------------------------------------------------------------------------- PostgreSQL cluster


class ClusterUnavailable(RuntimeError):
    """A disposable cluster could not be created (the reason is the message)."""


PG_VERSION = "15"
CTL = ["pg_ctlcluster", "--skip-systemctl-redirect"]


def _run(command: list[str], timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class DisposableCluster:
    """A PostgreSQL 15 cluster of its own on a free port (``pg_createcluster``), trust auth.

    Use :meth:`create` (raises :class:`ClusterUnavailable` with the reason), then
    :meth:`restart`, :meth:`stop_immediate` / :meth:`start`, :meth:`kill_postmaster` /
    :meth:`start_retrying`, and :meth:`drop` at the end.  Never the main cluster: the
    name is fresh and the port is not 5432.
    """

    def __init__(self, name: str, port: int) -> None:
        if port == 5432 or name == "main":
            raise ValueError("the disposable cluster must not be the main one")
        self.name = name
        self.port = port
        self.created = False

    @property
    def url(self) -> str:
        """A psycopg URL to the ``postgres`` database of the cluster."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    @classmethod
    def create(cls) -> DisposableCluster:
        """Create and start a new cluster; :class:`ClusterUnavailable` when impossible."""
        from firefly_orm.testing.secantus import free_port

        missing = [
            t
            for t in ("pg_createcluster", "pg_ctlcluster", "pg_dropcluster")
            if not shutil.which(t)
        ]
        if missing:
            raise ClusterUnavailable(f"{', '.join(missing)} not found (postgresql-common)")
        cluster = cls(f"faults{uuid.uuid4().hex[:8]}", free_port())
        done = _run(
            [
                "pg_createcluster",
                PG_VERSION,
                cluster.name,
                "-p",
                str(cluster.port),
                "--",
                "--auth=trust",
            ]
        )
        if done.returncode != 0:
            raise ClusterUnavailable(f"pg_createcluster failed: {done.stderr.strip()[-500:]}")
        cluster.created = True
        try:
            cluster.start()
        except BaseException:
            cluster.drop()
            raise
        return cluster

    def _ctl(self, *args: str) -> None:
        done = _run([*CTL, PG_VERSION, self.name, *args])
        if done.returncode != 0:
            raise ClusterUnavailable(
                f"pg_ctlcluster {' '.join(args)} failed: {(done.stderr or done.stdout).strip()}"
            )

    def start(self) -> None:
        """Start the cluster (returns once it accepts connections)."""
        self._ctl("start")

    def restart(self) -> None:
        """``restart -m fast``: disconnect every client, shut down cleanly, start."""
        self._ctl("restart", "-m", "fast")

    def stop_immediate(self) -> None:
        """``stop -m immediate``: the postmaster and backends quit without a checkpoint."""
        self._ctl("stop", "-m", "immediate")

    def start_retrying(self, timeout: float = 30.0) -> None:
        """:meth:`start`, retried while a killed postmaster's leftovers are still around."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.start()
                return
            except ClusterUnavailable:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def data_directory(self) -> Path:
        """The cluster's data directory (from ``pg_lsclusters``)."""
        done = _run(["pg_lsclusters", "--no-header", PG_VERSION, self.name])
        return Path(done.stdout.split()[5])

    def kill_postmaster(self) -> None:
        """SIGKILL the postmaster (its backends exit when they notice); wait until it is gone."""
        pid = int((self.data_directory() / "postmaster.pid").read_text().split("\n", 1)[0])
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.02)

    def drop(self) -> None:
        """Stop and delete the cluster (idempotent)."""
        if self.created:
            _run(["pg_dropcluster", "--stop", PG_VERSION, self.name])
            self.created = False


# --------------------------------------------------------------------------- MongoDB server

#: Seconds an open transaction of a killed client lives on the suite's own MongoDB
#: servers (mongod's ``transactionLifetimeLimitSeconds``, 60 by default).  A writer
#: killed inside a transaction leaves it open, holding its documents, until then:
#: the writers of that conversation wait that long.
TRANSACTION_LIFETIME = 1.0


class MongoServer:
    """A SecantusDB server of the suite's own (``harness.py mongo-server``), restartable.

    Unlike :func:`firefly_orm.testing.secantus.secantus_server` it keeps its port
    and data directory across :meth:`stop` / :meth:`start`, and open transactions
    of killed clients expire after :data:`TRANSACTION_LIFETIME` seconds.
    """

    def __init__(
        self, storage: Path, lifetime: float = TRANSACTION_LIFETIME, *, durable: bool = False
    ) -> None:
        from firefly_orm.testing.secantus import free_port

        self.storage = storage
        self.lifetime = lifetime
        self.durable = durable
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The server's URL."""
        return f"mongodb://127.0.0.1:{self.port}/?directConnection=true"

    def start(self, timeout: float = 60.0) -> None:
        """Start the server; return once it answers a ping (else RuntimeError)."""
        from firefly_orm.testing.secantus import answers_ping

        log = open(self.storage.with_suffix(".log"), "ab")  # noqa: SIM115 - the child keeps it
        with log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    str(SERVERS),
                    "mongo-server",
                    str(self.port),
                    str(self.storage),
                    str(self.lifetime),
                    "durable" if self.durable else "fast",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            if answers_ping(self.url) is None:
                return
        self.stop()
        raise RuntimeError(f"the MongoDB server on port {self.port} did not start")

    def kill(self) -> None:
        """SIGKILL the server."""
        process, self.process = self.process, None
        if process is not None:
            process.kill()
            process.wait()

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s)."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def serve_mongo(port: int, storage: str, lifetime: float, durable: bool) -> None:
    """Run a SecantusDB replica-set server until SIGTERM (the child of :class:`MongoServer`).

    ``durable``: every commit is synced to disk before it is acknowledged.
    """
    from secantus.server import SecantusDBServer

    server = SecantusDBServer(
        host="127.0.0.1",
        port=port,
        storage_path=storage,
        enable_test_commands=False,
        transaction_lifetime_seconds=lifetime,
        sync_on_commit=durable,
    )

    def stop(signum: int, frame: Any) -> None:
        server.stop()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    server.start()
    server.wait()


# --------------------------------------------------------------------------- entry point


def main(argv: list[str]) -> int:
    """``servers.py mongo-server PORT STORAGE LIFETIME durable|fast``: a MongoDB server."""
    if len(argv) == 5 and argv[0] == "mongo-server":
        serve_mongo(int(argv[1]), argv[2], float(argv[3]), argv[4] == "durable")
        return 0
    print(f"usage: {SERVERS.name} mongo-server PORT STORAGE LIFETIME durable|fast", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
