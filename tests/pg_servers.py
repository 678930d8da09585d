"""PostgreSQL-side servers the tests start on this machine's loopback: PgBouncer, standbys, a proxy.

* :class:`PgBouncer`: Debian's ``pgbouncer`` (installed by
  ``scripts/ensure-test-servers.sh``) on a free port in front of a PostgreSQL server,
  ``pool_mode = transaction`` unless told otherwise.  As root it drops to the
  ``postgres`` user (PgBouncer refuses to run as root).
* :func:`create_standby`: a hot standby of a disposable cluster
  (:class:`faults.servers.DisposableCluster`): ``pg_createcluster`` for its
  configuration, ``pg_basebackup -R`` for its data, an optional
  ``recovery_min_apply_delay``.  The main cluster (port 5432) is never touched.
* :class:`CommitCutter`: a TCP proxy in front of a PostgreSQL server that, when
  armed, forwards a COMMIT, lets the server commit, and cuts the client's
  connection before the server's answer reaches it: the ambiguous commit.
* The ``pgbouncer_url`` fixture (session): PgBouncer in front of ``postgres_url``.

:func:`unavailable` skips when a server cannot be started, or FAILS under
``--require-db postgres`` or ``CI=true`` (CI installs what these servers need, so
a missing one there is a broken environment, not a reason to skip).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest
import sqlalchemy as sa
from faults.servers import CTL, PG_VERSION, ClusterUnavailable, DisposableCluster

from firefly_orm.testing._secantus import free_port

#: Seconds a starting server gets to answer.
START_TIMEOUT = 30.0
#: Where Debian puts the binary (``/usr/sbin`` is not on every user's PATH).
PGBOUNCER_PATHS = ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer")
#: The PgBouncer binary to use instead of the installed one (a path).
PGBOUNCER_ENV = "FIREFLY_ORM_TEST_PGBOUNCER"
#: The script that installs PgBouncer (the Makefile's test target runs it).
ENSURE_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "ensure-test-servers.sh"


class ServerUnavailable(RuntimeError):
    """A server the tests need could not be started (the reason is the message)."""


def required(config: pytest.Config) -> bool:
    """Whether the PostgreSQL-side servers must be there (``--require-db postgres`` or CI)."""
    raw = str(config.getoption("--require-db") or "")
    named = "postgres" in {name.strip().lower() for name in raw.split(",")}
    return named or os.environ.get("CI", "").lower() in ("true", "1")


def unavailable(config: pytest.Config, what: str, reason: str) -> NoReturn:
    """Skip because ``what`` cannot be started; fail instead when it is :func:`required`."""
    if required(config):
        pytest.fail(
            f"{what} is required (--require-db postgres / CI=true) but unavailable: {reason}",
            pytrace=False,
        )
    pytest.skip(f"{what} unavailable: {reason}")


def _wait_for_port(port: int, proc: subprocess.Popen[bytes] | None, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return True
        time.sleep(0.05)
    return False


# --------------------------------------------------------------------------- PgBouncer


def pgbouncer_binary() -> str | None:
    """The ``pgbouncer`` to run: ``$FIREFLY_ORM_TEST_PGBOUNCER``, PATH, /usr/sbin; else ``None``."""
    chosen = os.environ.get(PGBOUNCER_ENV)
    if chosen is not None:
        return chosen if os.access(chosen, os.X_OK) else None
    found = shutil.which("pgbouncer")
    if found:
        return found
    return next((p for p in PGBOUNCER_PATHS if os.access(p, os.X_OK)), None)


class PgBouncer:
    """A PgBouncer process of the tests' own, on a free loopback port.

    Args:
        target: A SQLAlchemy URL of the PostgreSQL server to pool (its host, port,
            user and password are used; clients name the database themselves).
        pool_mode: ``transaction`` (the mode the store must work behind) or ``session``.
        settings: More ``[pgbouncer]`` settings (they win over the defaults here).
    """

    def __init__(self, target: str, *, pool_mode: str = "transaction", **settings: str) -> None:
        url = sa.engine.make_url(target)
        self.target = url
        self.user = url.username or "postgres"
        self.port = free_port()
        self.pool_mode = pool_mode
        self.settings = settings
        self.process: subprocess.Popen[bytes] | None = None
        self.directory: Path | None = None

    def url_for(self, url: str) -> str:
        """``url`` (a URL of the target server) pointed at this PgBouncer instead."""
        parsed = sa.engine.make_url(url).set(host="127.0.0.1", port=self.port)
        return parsed.render_as_string(hide_password=False)

    @property
    def log(self) -> str:
        """The tail of PgBouncer's log (for failure messages)."""
        if self.directory is None:
            return ""
        with contextlib.suppress(OSError):
            return (self.directory / "pgbouncer.log").read_text(errors="replace")[-3000:]
        return ""

    def _config(self, directory: Path) -> Path:
        host = self.target.host or "127.0.0.1"
        port = self.target.port or 5432
        password = self.target.password or ""
        users = directory / "users.txt"
        users.write_text(f'"{self.user}" "{password}"\n')
        settings = {
            "listen_addr": "127.0.0.1",
            "listen_port": str(self.port),
            "unix_socket_dir": "",
            "auth_type": "trust",
            "auth_file": str(users),
            "pool_mode": self.pool_mode,
            "max_client_conn": "2000",
            "default_pool_size": "20",
            # Retry a failed server login after 1 s, not 15 (a restarted server).
            "server_login_retry": "1",
            # A client waits at most this long for a server connection (server down).
            "query_wait_timeout": "20",
            "ignore_startup_parameters": "extra_float_digits",
            "logfile": "",
            "pidfile": "",
            "admin_users": self.user,
        }
        settings.update(self.settings)
        if os.geteuid() == 0:
            settings["user"] = "postgres"  # PgBouncer will not run as root
        lines = ["[databases]", f"* = host={host} port={port}", "", "[pgbouncer]"]
        lines += [f"{key} = {value}" for key, value in settings.items()]
        config = directory / "pgbouncer.ini"
        config.write_text("\n".join(lines) + "\n")
        return config

    def start(self) -> None:
        """Start it; :class:`ServerUnavailable` when it cannot be started."""
        binary = pgbouncer_binary()
        if binary is None:
            raise ServerUnavailable(f"pgbouncer is not installed (run {ENSURE_SCRIPT})")
        self.directory = Path(tempfile.mkdtemp(prefix="firefly-orm-pgbouncer-"))
        if os.geteuid() == 0:
            try:
                owner = pwd.getpwnam("postgres")
            except KeyError as exc:
                raise ServerUnavailable("running as root and there is no postgres user") from exc
            os.chown(self.directory, owner.pw_uid, owner.pw_gid)
        config = self._config(self.directory)
        with open(self.directory / "pgbouncer.log", "ab") as log:
            self.process = subprocess.Popen(
                [binary, str(config)], stdout=log, stderr=subprocess.STDOUT
            )
        if not _wait_for_port(self.port, self.process, START_TIMEOUT):
            tail = self.log
            self.stop()
            raise ServerUnavailable(f"pgbouncer did not start on port {self.port}: {tail}")

    def stop(self) -> None:
        """Stop it (SIGTERM, then SIGKILL) and remove its directory."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

    def __enter__(self) -> PgBouncer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture(scope="session")
def pgbouncer_url(request: pytest.FixtureRequest, postgres_url: str) -> Iterator[str]:
    """``postgres_url`` through a PgBouncer of the run's own (``pool_mode = transaction``)."""
    bouncer = PgBouncer(postgres_url)
    try:
        bouncer.start()
    except ServerUnavailable as exc:
        unavailable(request.config, "pgbouncer", str(exc))
    try:
        yield bouncer.url_for(postgres_url)
    finally:
        bouncer.stop()


# --------------------------------------------------------------------------- standbys


def _as_postgres(command: list[str]) -> list[str]:
    """``command`` run as the ``postgres`` user when we are root (cluster files are theirs)."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def create_standby(
    primary: DisposableCluster, *, apply_delay: float = 0.0, synchronous: bool = False
) -> DisposableCluster:
    """A hot standby of ``primary`` (a ``DisposableCluster``), started and streaming.

    ``apply_delay``: seconds the standby waits before applying each commit
    (``recovery_min_apply_delay``).  ``synchronous``: the primary waits for the
    standby to have each commit before acknowledging it (``synchronous_standby_names``),
    so a promoted standby has every acknowledged commit.

    Returns a ``DisposableCluster`` (``drop()`` it); :class:`ServerUnavailable`
    when it cannot be made.
    """
    if not shutil.which("pg_basebackup"):
        raise ServerUnavailable("pg_basebackup not found")
    standby = DisposableCluster(f"standby{os.urandom(4).hex()}", free_port())
    done = subprocess.run(
        [
            "pg_createcluster",
            PG_VERSION,
            standby.name,
            "-p",
            str(standby.port),
            "--",
            "--auth=trust",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise ServerUnavailable(f"pg_createcluster failed: {done.stderr.strip()[-500:]}")
    standby.created = True
    try:
        data = standby.data_directory()
        for child in data.iterdir():
            if child.is_dir():
                shutil.rmtree(child)
            else:
                child.unlink()
        backup = subprocess.run(
            _as_postgres(
                [
                    "pg_basebackup",
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(primary.port),
                    "-U",
                    "postgres",
                    "-D",
                    str(data),
                    "-R",
                    "-X",
                    "stream",
                    "-c",
                    "fast",
                ]
            ),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if backup.returncode != 0:
            raise ServerUnavailable(f"pg_basebackup failed: {backup.stderr.strip()[-500:]}")
        # In the data directory (pg_dropcluster removes it): -R put primary_conninfo there.
        with open(data / "postgresql.auto.conf", "a") as auto:
            auto.write(
                f"hot_standby = on\nrecovery_min_apply_delay = '{int(apply_delay * 1000)}ms'\n"
            )
        standby.start()
        if synchronous:
            _sql(primary.url, "ALTER SYSTEM SET synchronous_standby_names = '*'")
            _sql(primary.url, "SELECT pg_reload_conf()")
        _wait_streaming(primary.url, synchronous)
    except (ClusterUnavailable, OSError, subprocess.SubprocessError) as exc:
        standby.drop()
        raise ServerUnavailable(str(exc)) from exc
    except BaseException:
        standby.drop()
        raise
    return standby


def _sql(url: str, statement: str) -> list[tuple[object, ...]]:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            result = conn.exec_driver_sql(statement)
            return [tuple(row) for row in result] if result.returns_rows else []
    finally:
        engine.dispose()


def _wait_streaming(primary_url: str, synchronous: bool, timeout: float = START_TIMEOUT) -> None:
    """Until the primary sees a streaming standby (a synchronous one, when asked)."""
    wanted = "sync" if synchronous else None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = _sql(primary_url, "SELECT state, sync_state FROM pg_stat_replication")
        if any(row[0] == "streaming" and wanted in (None, row[1]) for row in rows):
            return
        time.sleep(0.1)
    raise ServerUnavailable(f"the standby did not start streaming within {timeout:g}s")


def _ctl(cluster: DisposableCluster, *args: str) -> None:
    done = subprocess.run(
        [*CTL, PG_VERSION, cluster.name, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise ServerUnavailable(
            f"pg_ctlcluster {' '.join(args)} failed: {(done.stderr or done.stdout).strip()}"
        )


def promote(cluster: DisposableCluster) -> None:
    """Promote a standby to a primary (``pg_ctlcluster promote``; waits for it)."""
    _ctl(cluster, "promote")


def stop_fast(cluster: DisposableCluster) -> None:
    """``stop -m fast``: clients disconnected, a clean shutdown (standbys get all the WAL)."""
    _ctl(cluster, "stop", "-m", "fast")


# --------------------------------------------------------------------------- the ambiguous commit


def _read_exact(sock: socket.socket, size: int) -> bytes:
    chunks: list[bytes] = []
    while size:
        chunk = sock.recv(size)
        if not chunk:
            raise ConnectionError("closed")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _read_message(sock: socket.socket) -> tuple[bytes, bytes]:
    """One typed protocol message: ``(type byte, whole message bytes)``."""
    head = _read_exact(sock, 5)
    (length,) = struct.unpack("!I", head[1:])
    return head[:1], head + _read_exact(sock, length - 4)


def _is_commit(kind: bytes, message: bytes) -> bool:
    """A simple Query or a Parse whose statement is ``COMMIT``."""
    if kind == b"Q":
        text = message[5:]
    elif kind == b"P":
        name_end = message.index(b"\x00", 5)
        text = message[name_end + 1 :]
    else:
        return False
    return text.split(b"\x00", 1)[0].strip().rstrip(b";").upper() == b"COMMIT"


class CommitCutter:
    """A TCP proxy in front of PostgreSQL that can cut a connection right after its COMMIT.

    Clients connect to :attr:`port` (use :meth:`url_for`: it turns SSL and GSS
    encryption off, the proxy reads the plain protocol).  Once :meth:`arm` is
    called, the next COMMIT any client sends is forwarded; when the server
    answers that it committed, the proxy closes both sides instead of passing
    the answer on.  The transaction is committed; the client sees its connection
    lost during COMMIT.
    """

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._armed = threading.Event()
        self._tag = b"COMMIT"
        self._lock = threading.Lock()
        self.cuts = 0
        self._sockets: set[socket.socket] = set()
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True, name="commit-cutter")
        self._thread.start()

    def url_for(self, url: str) -> str:
        """``url`` (of the target server) through this proxy, without SSL / GSS encryption."""
        parsed = sa.engine.make_url(url).set(host="127.0.0.1", port=self.port)
        parsed = parsed.update_query_dict({"sslmode": "disable", "gssencmode": "disable"})
        return parsed.render_as_string(hide_password=False)

    def arm(self, tag: bytes = b"COMMIT") -> None:
        """Cut the connection that sends the next COMMIT, once the server committed it.

        ``tag``: cut instead after the server completes the next statement whose
        command tag starts with it (``b"SELECT"``, ``b"INSERT"``...: for a
        statement run in autocommit, committed as it completes).
        """
        self._tag = tag
        self._armed.set()

    def close(self) -> None:
        """Stop accepting and close every connection."""
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() below
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()
            self._sockets.clear()
        self._thread.join(timeout=5)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            for sock in (client, server):  # one message per send: no Nagle delays
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets.update((client, server))
            state = {"commit_sent": False}
            threading.Thread(
                target=self._upstream, args=(client, server, state), daemon=True
            ).start()
            threading.Thread(
                target=self._downstream, args=(client, server, state), daemon=True
            ).start()

    def _cut(self, client: socket.socket, server: socket.socket) -> None:
        for sock in (client, server):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def _upstream(
        self, client: socket.socket, server: socket.socket, state: dict[str, bool]
    ) -> None:
        """Client to server: the startup packet, then typed messages (COMMITs watched)."""
        try:
            head = _read_exact(client, 4)
            (length,) = struct.unpack("!I", head)
            server.sendall(head + _read_exact(client, length - 4))
            while True:
                kind, message = _read_message(client)
                if self._armed.is_set() and _is_commit(kind, message):
                    state["commit_sent"] = True
                server.sendall(message)
        except (OSError, ConnectionError, ValueError):
            self._cut(client, server)

    def _downstream(
        self, client: socket.socket, server: socket.socket, state: dict[str, bool]
    ) -> None:
        """Server to client: typed messages, except the armed COMMIT's CommandComplete."""
        try:
            while True:
                kind, message = _read_message(server)
                tag = self._tag
                watched = state["commit_sent"] if tag == b"COMMIT" else self._armed.is_set()
                if kind == b"C" and watched and message[5:].startswith(tag):
                    state["commit_sent"] = False
                    with self._lock:
                        cut = self._armed.is_set()
                        if cut:
                            self._armed.clear()
                            self.cuts += 1
                    if cut:
                        self._cut(client, server)
                        return
                client.sendall(message)
        except (OSError, ConnectionError, ValueError):
            self._cut(client, server)
