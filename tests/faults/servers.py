"""Servers of the fault suite's own, to restart and kill: PostgreSQL clusters, MongoDB.

* :class:`DisposableCluster`: a PostgreSQL cluster (``pg_createcluster`` on a
  reserved port, trust auth), restarted, stopped and SIGKILLed by the server-restart
  tests, put back in order by :meth:`DisposableCluster.reset` between tests and
  dropped at the end.  The main cluster (port 5432) is never touched.
* :class:`MongoServer`: a SecantusDB server keeping its port and data directory across
  restarts, with a short transaction lifetime (``python servers.py mongo-server ...``
  is its process).
* :func:`reserve_port`: a port for a server that is stopped and started again on it.
  It lies below the kernel's ephemeral range, so no client connection of any process
  takes it as its local port while the server is down (what the ports of
  ``firefly_orm.testing._secantus.free_port`` risk), and it is locked for this
  process, so two pytest-xdist workers never pick the same one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

SERVERS = Path(__file__).resolve()


# --------------------------------------------------------------------------- ports

#: One byte per port of this file is locked (``lockf``) by the process using the port.
PORT_LOCKS = Path(tempfile.gettempdir()) / "firefly-orm-test-ports.lock"
#: Ports a test never reserves (well-known servers).
PORTS_IN_USE_ELSEWHERE = frozenset({5432, 6432, 27017, 27018, 27019})
_ports_lock = threading.Lock()
_ports_fd: int | None = None
_reserved: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def _bindable(port: int) -> bool:
    """Whether nothing listens on (or holds) ``port`` on the loopback addresses."""
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:  # no IPv6 here
            continue
        with sock:
            try:
                sock.bind((host, port))
            except OSError as exc:
                if family == socket.AF_INET6 and exc.errno == 99:  # ::1 not configured
                    continue
                return False
    return True


def reserve_port() -> int:
    """A free port below the ephemeral range, held for this process until :func:`release_port`.

    Two processes never get the same port (a ``lockf`` byte lock per port, dropped
    by the kernel when the process ends), and a port below the ephemeral range is
    never given to a client connection, so a server can stop and start again on it.
    """
    global _ports_fd
    low = _ephemeral_range()[0]
    first = 20000 if low > 21000 else 1024
    with _ports_lock:
        if _ports_fd is None:
            _ports_fd = os.open(PORT_LOCKS, os.O_RDWR | os.O_CREAT, 0o666)
        for _ in range(500):
            port = random.randrange(first, low)
            if port in _reserved or port in PORTS_IN_USE_ELSEWHERE:
                continue
            try:
                fcntl.lockf(_ports_fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port)
            except OSError:
                continue  # another process holds it
            if _bindable(port):
                _reserved.add(port)
                return port
            fcntl.lockf(_ports_fd, fcntl.LOCK_UN, 1, port)
    raise RuntimeError("no free port to reserve")


def release_port(port: int) -> None:
    """Give back a port of :func:`reserve_port` (idempotent)."""
    with _ports_lock:
        if port in _reserved and _ports_fd is not None:
            _reserved.discard(port)
            with contextlib.suppress(OSError):
                fcntl.lockf(_ports_fd, fcntl.LOCK_UN, 1, port)


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
        """Create and start a new cluster; :class:`ClusterUnavailable` when impossible.

        Its port comes from :func:`reserve_port` (released by :meth:`drop`).
        """
        missing = [
            t
            for t in ("pg_createcluster", "pg_ctlcluster", "pg_dropcluster")
            if not shutil.which(t)
        ]
        if missing:
            raise ClusterUnavailable(f"{', '.join(missing)} not found (postgresql-common)")
        cluster = cls(f"faults{uuid.uuid4().hex[:8]}", reserve_port())
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
            release_port(cluster.port)
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

    def running(self) -> bool:
        """Whether ``pg_lsclusters`` sees the cluster online."""
        done = _run(["pg_lsclusters", "--no-header", PG_VERSION, self.name])
        fields = done.stdout.split()
        return done.returncode == 0 and len(fields) > 3 and fields[3] == "online"

    def reset(self) -> None:
        """Put the cluster back as :meth:`create` left it, for the next test.

        What the fault tests leave behind: the cluster stopped or killed (started
        again), a synchronous standby named in ``postgresql.auto.conf`` (reset: the
        standby is gone, commits would wait for it forever), sessions still
        connected (terminated), schemas (but ``public``) and databases of the test
        (dropped).
        :class:`ClusterUnavailable` when that fails: the caller makes a new cluster.
        """
        import psycopg

        if not self.running():
            self.start_retrying()
        try:
            with psycopg.connect(
                host="127.0.0.1",
                port=self.port,
                user="postgres",
                dbname="postgres",
                autocommit=True,
                connect_timeout=10,
            ) as conn:
                conn.execute("SET synchronous_commit = local")  # never wait for a standby
                conn.execute("ALTER SYSTEM RESET ALL")
                conn.execute("SELECT pg_reload_conf()")
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
                )
                if conn.execute("SELECT pg_is_in_recovery()").fetchone() != (False,):
                    raise ClusterUnavailable("the cluster is a standby")
                databases = conn.execute(
                    "SELECT datname FROM pg_database "
                    "WHERE datname NOT IN ('postgres', 'template0', 'template1')"
                ).fetchall()
                for (name,) in databases:
                    conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
                schemas = conn.execute(
                    "SELECT nspname FROM pg_namespace WHERE nspname NOT IN "
                    "('information_schema', 'public') AND nspname NOT LIKE 'pg\\_%'"
                ).fetchall()
                for (name,) in schemas:
                    conn.execute(f'DROP SCHEMA "{name}" CASCADE')
        except psycopg.Error as exc:
            raise ClusterUnavailable(f"reset failed: {exc}") from exc

    def drop(self) -> None:
        """Stop and delete the cluster (idempotent); its port is released."""
        if self.created:
            _run(["pg_dropcluster", "--stop", PG_VERSION, self.name])
            self.created = False
        release_port(self.port)


# --------------------------------------------------------------------------- MongoDB server

#: Seconds an open transaction of a killed client lives on the suite's own MongoDB
#: servers (mongod's ``transactionLifetimeLimitSeconds``, 60 by default).  A writer
#: killed inside a transaction leaves it open, holding its documents, until then:
#: the writers of that conversation wait that long.
TRANSACTION_LIFETIME = 1.0


class MongoServer:
    """A SecantusDB server of the suite's own (``harness.py mongo-server``), restartable.

    Unlike :func:`firefly_orm.testing._secantus.secantus_server` it keeps its port
    and data directory across :meth:`stop` / :meth:`start`, and open transactions
    of killed clients expire after :data:`TRANSACTION_LIFETIME` seconds.
    """

    def __init__(
        self, storage: Path, lifetime: float = TRANSACTION_LIFETIME, *, durable: bool = False
    ) -> None:
        self.storage = storage
        self.lifetime = lifetime
        self.durable = durable
        self.port = reserve_port()  # kept across restarts: see reserve_port
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The server's URL."""
        return f"mongodb://127.0.0.1:{self.port}/?directConnection=true"

    def start(self, timeout: float = 60.0) -> None:
        """Start the server; return once it answers a ping (else RuntimeError)."""
        from firefly_orm.testing._secantus import answers_ping

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

    def close(self) -> None:
        """:meth:`kill` the server and release its port (its data is thrown away)."""
        self.kill()
        release_port(self.port)

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
