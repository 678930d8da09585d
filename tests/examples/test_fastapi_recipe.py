"""The FastAPI recipe (``docs/guide/fastapi.md``; code in ``docs_src/fastapi_*.py``).

On SQLite and PostgreSQL (each PostgreSQL test in a schema of its own, made the
connection's default schema with ``search_path`` and dropped afterwards):

* ``python docs_src/fastapi_recipe.py`` runs as a script, and its walk-through
  (every route, sync and async, checked step by step) passes on both databases;
* no transaction is open, and no pooled connection checked out, while the
  model runs, on the sync and async routes and ``MemoryAgent``'s; the turn and
  the app's own write then commit once, on one connection;
* a failure of the app's write after the turn, or of the turn, stores neither;
* deleting a user is one transaction: the app's delete failing keeps the
  user's memory, the erase failing keeps the app's rows;
* the ``ada`` fixture (shown in the guide) erases the user's memory at teardown.

The models are pydantic-ai ``FunctionModel`` s (no network).
"""

from __future__ import annotations

import re
import runpy
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import forked
import pytest
import sqlalchemy as sa
from dbutil import drop_schema
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from docs_src.fastapi_app import create_app
from firefly_orm import MemoryManager
from firefly_orm.entry import TABLE_NAME

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "docs_src" / "fastapi_recipe.py"


# --------------------------------------------------------------------------- databases


@dataclass
class Db:
    """One test's database, for the app's sync and async engines."""

    url: str
    async_url: str
    sqlite: bool

    @contextmanager
    def connect(self) -> Iterator[sa.Connection]:
        engine = sa.create_engine(self.url, poolclass=sa.pool.NullPool)
        try:
            with engine.begin() as conn:
                yield conn
        finally:
            engine.dispose()

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        with self.connect() as conn:
            return [tuple(row) for row in conn.exec_driver_sql(sql)]

    def refuse(self, verb: str, table: str) -> None:
        """A trigger that makes the database refuse every ``verb`` (INSERT...) on ``table``."""
        name = f"refuse_{verb.lower()}_{table}"
        with self.connect() as conn:
            if self.sqlite:
                conn.exec_driver_sql(
                    f"CREATE TRIGGER {name} BEFORE {verb} ON {table} "
                    "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
                )
            else:
                conn.exec_driver_sql(
                    f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql "
                    "AS $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$"
                )
                conn.exec_driver_sql(
                    f"CREATE TRIGGER {name} BEFORE {verb} ON {table} "
                    f"FOR EACH ROW EXECUTE FUNCTION {name}()"
                )

    def accept(self, verb: str, table: str) -> None:
        name = f"refuse_{verb.lower()}_{table}"
        with self.connect() as conn:
            conn.exec_driver_sql(
                f"DROP TRIGGER {name}" if self.sqlite else f"DROP TRIGGER {name} ON {table}"
            )


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    if request.param == "sqlite":
        file = tmp_path / "app.sqlite3"
        yield Db(f"sqlite:///{file}", f"sqlite+aiosqlite:///{file}", sqlite=True)
        return
    admin_url: str = request.getfixturevalue("postgres_url")
    schema = "recipe_" + uuid.uuid4().hex[:10]
    engine = sa.create_engine(admin_url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.execute(sa.schema.CreateSchema(schema))
    engine.dispose()
    url = (
        sa.make_url(admin_url)
        .update_query_dict({"options": f"-csearch_path={schema}"})
        .render_as_string(hide_password=False)
    )
    try:
        yield Db(url, url, sqlite=False)  # psycopg 3 serves both engines
    finally:
        drop_schema(admin_url, schema)


# --------------------------------------------------------------------------- the script


def test_the_recipe_runs_as_a_script(tmp_path: Path) -> None:
    done = forked.run([sys.executable, str(RECIPE)], cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "fastapi recipe: ok"
    assert list(tmp_path.iterdir()) == []  # its database lived in a temporary directory


@pytest.fixture(scope="module")
def walk_through() -> Callable[[str, str], None]:
    """The script's walk-through (running the script once, on SQLite, to get it)."""
    found = runpy.run_path(str(RECIPE))["walk_through"]
    return cast(Callable[[str, str], None], found)


def test_the_walk_through(db: Db, walk_through: Callable[[str, str], None]) -> None:
    walk_through(db.url, db.async_url)
    # its users' teardown left nothing of theirs: no memory rows, no app rows
    assert db.rows(f"SELECT count(*) FROM {TABLE_NAME} WHERE user_id IS NOT NULL") == [(0,)]
    assert db.rows("SELECT count(*) FROM users") == [(0,)]


# --------------------------------------------------------------------------- the app


class Probe:
    """A model that records, when it is called, the connections checked out of the app's pools."""

    def __init__(self) -> None:
        self.app: FastAPI | None = None
        self.seen: list[tuple[int, int]] = []
        self.on_call: Callable[[], None] = lambda: None

    def checked_out(self) -> tuple[int, int]:
        assert self.app is not None
        state = self.app.state
        sync_pool: Any = state.engine.pool
        async_pool: Any = state.async_engine.sync_engine.pool
        return (sync_pool.checkedout(), async_pool.checkedout())

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.seen.append(self.checked_out())
        self.on_call()
        return ModelResponse(parts=[TextPart(f"reply {len(self.seen)}")])


@pytest.fixture
def probe() -> Probe:
    return Probe()


@pytest.fixture
def app(db: Db, probe: Probe) -> FastAPI:
    app = create_app(db.url, db.async_url, model=FunctionModel(probe))
    probe.app = app
    return app


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


# --8<-- [start:fixture]
@pytest.fixture
def ada(app: FastAPI, client: TestClient) -> Iterator[dict[str, str]]:
    """A user for one test: the headers that sign in as her.

    Teardown erases whatever the test left in memory for her (it may have
    failed half-way), then her rows of the app.
    """
    assert client.post("/users", json={"id": "ada", "name": "Ada"}).status_code == 201
    yield {"X-User": "ada"}
    MemoryManager(store=app.state.store).erase_user("ada")  # every row tagged with her
    with app.state.engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM chats WHERE user_id = 'ada'"))
        conn.execute(sa.text("DELETE FROM users WHERE id = 'ada'"))
    # --8<-- [end:fixture]


def open_chat(client: TestClient, headers: dict[str, str]) -> dict[str, Any]:
    response = client.post("/chats", headers=headers)
    assert response.status_code == 201, response.text
    chat: dict[str, Any] = response.json()
    return chat


def chat_path(route: str, chat: dict[str, Any]) -> str:
    return f"{'/async' if route == 'async' else ''}/chats/{chat['id']}/messages"


def turns_of(app: FastAPI, conversation_id: str) -> list[str]:
    turns = MemoryManager(store=app.state.store).conversation.get_turns(conversation_id)
    return [t.user_prompt for t in turns]


#: Every write a statement makes, also inside a data-modifying CTE; an upsert's
#: ``DO UPDATE SET`` is not a write of its own.
WRITE = re.compile(r'(?<!DO )\b(INSERT INTO|UPDATE|DELETE FROM)\s+"?(\w+)"?', re.IGNORECASE)


@dataclass
class Log:
    """Writes, commits, rollbacks and the model call, in order, each with its DBAPI connection."""

    events: list[tuple[int, str]] = field(default_factory=list)

    def statement(self, conn: sa.Connection, _c: Any, statement: str, *_: Any) -> None:
        for verb, table in WRITE.findall(statement):
            self.events.append((self._id(conn), f"{verb.split()[0].upper()} {table}"))

    def commit(self, conn: sa.Connection) -> None:
        self.events.append((self._id(conn), "COMMIT"))

    @staticmethod
    def _id(conn: sa.Connection) -> int:
        return id(conn.connection.dbapi_connection)


@contextmanager
def logged(app: FastAPI, probe: Probe) -> Iterator[Log]:
    log = Log()
    engines = [app.state.engine, app.state.async_engine.sync_engine]
    for engine in engines:
        sa.event.listen(engine, "before_cursor_execute", log.statement)
        sa.event.listen(engine, "commit", log.commit)
    probe.on_call = lambda: log.events.append((0, "MODEL"))
    try:
        yield log
    finally:
        for engine in engines:
            sa.event.remove(engine, "before_cursor_execute", log.statement)
            sa.event.remove(engine, "commit", log.commit)


# --------------------------------------------------------------------------- the model call


@pytest.mark.parametrize("route", ["sync", "async", "assistant"])
def test_nothing_is_held_while_the_model_runs(
    route: str, app: FastAPI, client: TestClient, probe: Probe, ada: dict[str, str]
) -> None:
    # the probe sees a connection held by a transaction (it is not blind)
    with app.state.engine.begin():
        assert probe.checked_out() == (1, 0)

    chat = open_chat(client, ada)
    if route == "assistant":
        first = client.post("/assistant", json={"text": "one"}, headers=ada)
        body = {"text": "two", "conversation_id": first.json()["conversation_id"]}
        with logged(app, probe) as log:
            second = client.post("/assistant", json=body, headers=ada)
        written = {f"INSERT {TABLE_NAME}"}
    else:
        first = client.post(chat_path(route, chat), json={"text": "one"}, headers=ada)
        with logged(app, probe) as log:
            second = client.post(chat_path(route, chat), json={"text": "two"}, headers=ada)
        written = {f"INSERT {TABLE_NAME}", "UPDATE chats"}
        assert turns_of(app, chat["conversation_id"]) == ["one", "two"]
        assert client.get("/chats", headers=ada).json()[0]["messages"] == 2
    assert first.status_code == second.status_code == 200, second.text
    assert (first.json()["turn_id"], second.json()["turn_id"]) == (0, 1)
    assert probe.seen == [(0, 0), (0, 0)]  # no connection checked out during either call

    kinds = [kind for _, kind in log.events]
    model = kinds.index("MODEL")
    assert not [k for k in kinds[:model] if k != "COMMIT"], kinds  # nothing written before
    after = log.events[model + 1 :]
    assert {kind for _, kind in after if kind != "COMMIT"} >= written, kinds
    if route != "assistant":  # the app's write and the turn: one connection, one COMMIT
        assert [kind for _, kind in after][-1] == "COMMIT"
        assert [kind for _, kind in after].count("COMMIT") == 1, kinds
        assert len({conn for conn, _ in after}) == 1, kinds


# --------------------------------------------------------------------------- one unit of work


@pytest.mark.parametrize("route", ["sync", "async"])
def test_a_failed_write_stores_neither_the_turn_nor_the_apps_row(
    route: str, db: Db, app: FastAPI, client: TestClient, ada: dict[str, str]
) -> None:
    chat = open_chat(client, ada)
    assert client.post(chat_path(route, chat), json={"text": "one"}, headers=ada).status_code == 200

    db.refuse("UPDATE", "chats")  # the app's write, after the turn
    failed = client.post(chat_path(route, chat), json={"text": "two"}, headers=ada)
    assert failed.status_code == 503
    assert turns_of(app, chat["conversation_id"]) == ["one"]  # the turn went with it
    db.accept("UPDATE", "chats")

    db.refuse("INSERT", TABLE_NAME)  # the turn itself
    failed = client.post(chat_path(route, chat), json={"text": "two"}, headers=ada)
    assert failed.status_code == 503
    assert client.get("/chats", headers=ada).json()[0]["messages"] == 1
    db.accept("INSERT", TABLE_NAME)

    retried = client.post(chat_path(route, chat), json={"text": "two"}, headers=ada)
    assert retried.status_code == 200 and retried.json()["turn_id"] == 1  # no gap left
    assert turns_of(app, chat["conversation_id"]) == ["one", "two"]


@pytest.mark.parametrize("route", ["sync", "async"])
def test_deleting_a_user_is_one_transaction(
    route: str, db: Db, app: FastAPI, client: TestClient, ada: dict[str, str]
) -> None:
    path = "/async/me" if route == "async" else "/me"
    chat = open_chat(client, ada)
    assert client.post(chat_path(route, chat), json={"text": "one"}, headers=ada).status_code == 200
    memory = MemoryManager(store=app.state.store)
    mine = memory.user_conversations("ada")
    assert mine == [chat["conversation_id"]]
    bob = {"X-User": "bob"}
    assert client.post("/users", json={"id": "bob", "name": "Bob"}).status_code == 201
    bobs = open_chat(client, bob)

    db.refuse("DELETE", "users")  # the app's delete fails: her memory stays
    assert client.delete(path, headers=ada).status_code == 500
    assert memory.user_conversations("ada") == mine
    assert turns_of(app, chat["conversation_id"]) == ["one"]
    db.accept("DELETE", "users")

    db.refuse("DELETE", TABLE_NAME)  # the erase fails: her rows stay
    assert client.delete(path, headers=ada).status_code == 500
    assert db.rows("SELECT id FROM users ORDER BY id") == [("ada",), ("bob",)]
    assert [c["id"] for c in client.get("/chats", headers=ada).json()] == [chat["id"]]
    db.accept("DELETE", TABLE_NAME)

    assert client.delete(path, headers=ada).status_code == 204
    assert memory.user_conversations("ada") == []
    assert turns_of(app, chat["conversation_id"]) == []
    assert db.rows("SELECT id FROM users") == [("bob",)]
    assert memory.user_conversations("bob") == [bobs["conversation_id"]]  # his stay
    assert client.delete(path, headers=ada).status_code == 404
    assert client.delete(path, headers=bob).status_code == 204
