"""The help desk's FastAPI app: tickets, a chat route with memory, the history.

Routes:

* ``POST /tickets`` ``{"customer", "subject"}``: opens a ticket and its
  conversation (owned by the customer) in one transaction.
* ``GET /tickets/{id}``: the ticket, with its count of answered messages.
* ``POST /tickets/{id}/messages`` ``{"text"}``: the chat route (below).
* ``GET /tickets/{id}/messages``: the conversation, turn by turn, from memory.
* ``GET /customers/{customer}/conversations``: the customer's chat list, newest
  first, with titles (``MemoryManager.list_conversations``; a ticket's
  conversation is titled with its subject); ``?cursor=`` pages on.
* ``POST /conversations/{cid}/turns/{turn_id}/edit`` ``{"text"}``: edit an
  earlier message and answer it on a branch: ``branch(cid, turn_id - 1)``
  (the turns before it; a new conversation for turn 0), the agent run on
  that history, ``add_turn`` on the branch; returns the branch's id.  The
  original conversation is left as it was.

The chat route, all async (the memory's ``async_*`` methods, the agent's
``run``; nothing blocks the event loop):

1. reads the ticket and the conversation's context from memory (the newest
   turns within :data:`HISTORY_TOKENS`);
2. runs the agent with it, outside any transaction (a slow model holds no lock);
3. in ONE transaction of the app's session: bumps the ticket's counter, stores
   the turn through ``store.bind_session(session)`` (a SAVEPOINT of that
   transaction), inserts the usage row, commits.  Any failure rolls back all
   three: the ticket, the conversation and the ledger never disagree.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Annotated

import sqlalchemy as sa
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field
from pydantic_ai import Agent
from pydantic_ai.exceptions import AgentRunError
from pydantic_ai.models import Model
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlmodel import col
from sqlmodel.ext.asyncio.session import AsyncSession

from examples.fastapi_chat import migrate
from examples.fastapi_chat.assistant import TicketContext, build_agent, demo_model
from examples.fastapi_chat.models import ReplyUsage, Ticket, utcnow
from firefly_orm import (
    ConversationNotFoundError,
    EntryValidationError,
    MemoryManager,
    SQLAlchemyStore,
    StoreError,
)
from firefly_orm import migrate as firefly_migrate
from firefly_orm.sql import enable_sqlite_savepoints

__all__ = [
    "HISTORY_TOKENS",
    "HelpDesk",
    "NewMessage",
    "NewTicket",
    "Reply",
    "Branched",
    "ChatList",
    "ChatOut",
    "TicketOut",
    "TurnOut",
    "app_from_env",
    "async_url",
    "create_app",
]

logger = logging.getLogger(__name__)

#: Token budget of the history the agent gets; older turns are evicted past it.
HISTORY_TOKENS = 4_000
#: Seconds a SQLite connection waits for another writer's lock.
SQLITE_BUSY_TIMEOUT = 30.0
NOT_SAVED = "the reply could not be saved; nothing was stored, try again"


# --------------------------------------------------------------------------- API shapes

#: Text the app's tables store: no NUL (PostgreSQL's text columns cannot hold it).
NO_NUL = r"^[^\x00]*$"


class NewTicket(BaseModel):
    """Body of ``POST /tickets``."""

    customer: str = Field(min_length=1, max_length=100, pattern=NO_NUL)
    subject: str = Field(min_length=1, max_length=200, pattern=NO_NUL)


class TicketOut(BaseModel):
    """A ticket as the API shows it."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    customer: str
    subject: str
    conversation_id: str
    turns: int


class NewMessage(BaseModel):
    """Body of ``POST /tickets/{id}/messages``."""

    text: str = Field(min_length=1, max_length=4_000)


class Reply(BaseModel):
    """The answer to a message, once it and the turn are stored."""

    ticket_id: int
    turn_id: int
    reply: str
    turns: int


class TurnOut(BaseModel):
    """One stored exchange of a ticket's conversation."""

    turn_id: int
    user: str
    assistant: str
    at: datetime


class ChatOut(BaseModel):
    """One conversation of a customer's chat list."""

    conversation_id: str
    title: str | None
    turns: int
    updated_at: datetime | None


class ChatList(BaseModel):
    """A page of a customer's chat list (``next_cursor``: ``None`` on the last page)."""

    items: list[ChatOut]
    next_cursor: str | None


class Branched(BaseModel):
    """The answer to an edited message, on the branch it started."""

    conversation_id: str
    parent_id: str
    turn_id: int
    reply: str


# --------------------------------------------------------------------------- the service


class HelpDesk:
    """What the routes share: the app's async engine, the memory store on it, the agent.

    Args:
        engine: The app's engine; the memory store uses it too (never disposes it).
        store: firefly_orm's store over ``engine``.
        agent: The help desk agent.
    """

    def __init__(
        self, engine: AsyncEngine, store: SQLAlchemyStore, agent: Agent[TicketContext, str]
    ) -> None:
        self.engine = engine
        self.store = store
        self.agent = agent

    def session(self) -> AsyncSession:
        """A new session of the app (objects stay readable after commit)."""
        return AsyncSession(self.engine, expire_on_commit=False)

    def memory(self, customer: str, session: AsyncSession | None = None) -> MemoryManager:
        """The customer's memory; with ``session``, its writes join that session's transaction."""
        store = self.store if session is None else self.store.bind_session(session)
        return MemoryManager(
            store=store,
            user_id=customer,
            max_conversation_tokens=HISTORY_TOKENS,
            summarize_threshold=HISTORY_TOKENS,
        )

    async def ticket(self, ticket_id: int) -> Ticket:
        """The ticket, or HTTP 404."""
        async with self.session() as session:
            ticket = await session.get(Ticket, ticket_id)
        if ticket is None:
            raise HTTPException(404, f"no ticket {ticket_id}")
        return ticket

    async def open_ticket(self, new: NewTicket) -> Ticket:
        """Create the ticket and its conversation in one transaction."""
        async with self.session() as session:
            try:
                memory = self.memory(new.customer, session)
                conversation_id = await memory.async_new_conversation()
                await memory.async_update_conversation(conversation_id, title=new.subject)
                ticket = Ticket(
                    customer=new.customer, subject=new.subject, conversation_id=conversation_id
                )
                session.add(ticket)
                await session.commit()
            except EntryValidationError as exc:
                raise HTTPException(422, str(exc)) from exc
            except (StoreError, SQLAlchemyError) as exc:
                logger.warning("opening a ticket failed, nothing stored: %s", exc)
                raise HTTPException(503, "the ticket could not be saved, try again") from exc
        return ticket

    async def answer(self, ticket_id: int, text: str) -> Reply:
        """The chat route's work (see the module docstring)."""
        ticket = await self.ticket(ticket_id)
        history = await self.memory(ticket.customer).async_get_context(ticket.conversation_id)
        deps = TicketContext(ticket_id, ticket.customer, ticket.subject)
        try:
            result = await self.agent.run(text, message_history=history, deps=deps)
        except AgentRunError as exc:
            logger.warning("the agent failed on ticket %s, nothing stored: %s", ticket_id, exc)
            raise HTTPException(502, "the assistant is unavailable; nothing was stored") from exc
        usage = result.usage
        async with self.session() as session:
            try:
                bumped = await session.exec(
                    sa.update(Ticket)
                    .where(col(Ticket.id) == ticket_id)
                    .values(turns=col(Ticket.turns) + 1, updated_at=utcnow())
                    .returning(col(Ticket.turns))
                )
                turns = bumped.scalar_one()
                turn = await self.memory(ticket.customer, session).async_add_turn(
                    ticket.conversation_id, text, result.output, result.new_messages()
                )
                session.add(
                    ReplyUsage(
                        ticket_id=ticket_id,
                        turn_id=turn.turn_id,
                        input_tokens=usage.input_tokens,
                        output_tokens=usage.output_tokens,
                    )
                )
                await session.commit()
            except (StoreError, SQLAlchemyError) as exc:
                await session.rollback()
                logger.warning("the reply on ticket %s was not saved: %s", ticket_id, exc)
                raise HTTPException(503, NOT_SAVED) from exc
        return Reply(ticket_id=ticket_id, turn_id=turn.turn_id, reply=result.output, turns=turns)

    async def chats(self, customer: str, cursor: str | None) -> ChatList:
        """A page of the customer's conversations, most recently updated first."""
        try:
            page = await self.memory(customer).async_list_conversations(limit=20, cursor=cursor)
        except EntryValidationError as exc:  # a bad customer id or cursor
            raise HTTPException(422, str(exc)) from exc
        return ChatList(
            items=[
                ChatOut(
                    conversation_id=info.conversation_id,
                    title=info.title,
                    turns=info.turn_count,
                    updated_at=info.updated_at,
                )
                for info in page.items
            ],
            next_cursor=page.next_cursor,
        )

    async def edit(self, conversation_id: str, turn_id: int, text: str) -> Branched:
        """Edit-and-branch (see the module docstring); nothing is stored if the agent fails."""
        missing = HTTPException(404, f"no turn {turn_id} in conversation {conversation_id}")
        try:
            customer = await MemoryManager(store=self.store).async_owner_of(conversation_id)
        except EntryValidationError as exc:
            raise HTTPException(422, str(exc)) from exc
        except ConversationNotFoundError as exc:
            raise missing from exc
        if customer is None:  # the app's conversations all belong to a customer
            raise missing
        memory = self.memory(customer)
        turns = await memory.conversation.async_get_turns(conversation_id)
        if turn_id not in [t.turn_id for t in turns]:
            raise missing
        info = await memory.async_conversation_info(conversation_id)
        if turn_id == 0:  # nothing before it to share: a new conversation
            branch = await memory.async_new_conversation()
        else:
            branch = await memory.async_branch(conversation_id, turn_id - 1)
        title = f"{info.title or 'Chat'} (edited)"
        await memory.async_update_conversation(branch, title=title)
        history = await memory.async_get_context(branch)
        deps = TicketContext(0, customer, title)
        try:
            result = await self.agent.run(text, message_history=history, deps=deps)
        except AgentRunError as exc:
            await memory.async_clear_conversation(branch)  # the branch goes with the run
            logger.warning("the agent failed on an edit of %s: %s", conversation_id, exc)
            raise HTTPException(502, "the assistant is unavailable; nothing was stored") from exc
        turn = await memory.async_add_turn(branch, text, result.output, result.new_messages())
        return Branched(
            conversation_id=branch,
            parent_id=conversation_id,
            turn_id=turn.turn_id,
            reply=result.output,
        )

    async def history(self, ticket_id: int) -> list[TurnOut]:
        """The ticket's stored turns, oldest first."""
        ticket = await self.ticket(ticket_id)
        turns = await self.memory(ticket.customer).conversation.async_get_turns(
            ticket.conversation_id
        )
        return [
            TurnOut(
                turn_id=turn.turn_id,
                user=turn.user_prompt,
                assistant=turn.assistant_response,
                at=turn.timestamp,
            )
            for turn in turns
        ]


# --------------------------------------------------------------------------- routes

router = APIRouter()


def help_desk(request: Request) -> HelpDesk:
    """The app's :class:`HelpDesk` (made at start-up)."""
    desk: HelpDesk = request.app.state.help_desk
    return desk


Desk = Annotated[HelpDesk, Depends(help_desk)]


@router.post("/tickets", status_code=201)
async def open_ticket(body: NewTicket, desk: Desk) -> TicketOut:
    """Open a ticket (and its conversation)."""
    return TicketOut.model_validate(await desk.open_ticket(body))


@router.get("/tickets/{ticket_id}")
async def get_ticket(ticket_id: int, desk: Desk) -> TicketOut:
    """The ticket."""
    return TicketOut.model_validate(await desk.ticket(ticket_id))


@router.post("/tickets/{ticket_id}/messages")
async def post_message(ticket_id: int, body: NewMessage, desk: Desk) -> Reply:
    """Answer a message; the turn, the ticket and the usage row are stored together."""
    return await desk.answer(ticket_id, body.text)


@router.get("/tickets/{ticket_id}/messages")
async def get_messages(ticket_id: int, desk: Desk) -> list[TurnOut]:
    """The ticket's conversation, from memory."""
    return await desk.history(ticket_id)


@router.get("/customers/{customer}/conversations")
async def list_chats(customer: str, desk: Desk, cursor: str | None = None) -> ChatList:
    """The customer's chat list with titles, newest first (keyset pages)."""
    return await desk.chats(customer, cursor)


@router.post("/conversations/{conversation_id}/turns/{turn_id}/edit")
async def edit_message(
    conversation_id: str, turn_id: int, body: NewMessage, desk: Desk
) -> Branched:
    """Edit an earlier message: answer the edit on a branch, return the branch's id."""
    return await desk.edit(conversation_id, turn_id, body.text)


# --------------------------------------------------------------------------- the app


def async_url(url: str) -> sa.URL:
    """The async-driver form of ``url``: aiosqlite for SQLite, psycopg (3) for PostgreSQL."""
    parsed = firefly_migrate.normalize_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return parsed.set(drivername="sqlite+aiosqlite")
    if backend == "postgresql":
        return parsed.set(drivername="postgresql+psycopg")
    raise ValueError(f"the help desk runs on SQLite or PostgreSQL, not {backend}")


def create_app(database_url: str, *, model: Model | None = None) -> FastAPI:
    """The help desk app on ``database_url`` (migrated by :mod:`examples.fastapi_chat.migrate`).

    Args:
        database_url: The app's database (SQLite or PostgreSQL; firefly_orm's
            tables are in the same database, in the connection's default schema).
        model: The agent's model (default: :func:`~.assistant.demo_model`, offline).

    At start-up the app checks that its Alembic has migrated the database: its
    own revision (:class:`RuntimeError` otherwise) and firefly_orm's, which the
    memory store checks (``initialize(migrate=False)`` raises
    :class:`~firefly_orm.errors.MigrationRequiredError` naming the command);
    neither migrates anything.
    """
    url = async_url(database_url)
    expected = migrate.head()
    agent = build_agent(model if model is not None else demo_model())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        sqlite = url.get_backend_name() == "sqlite"
        engine = create_async_engine(
            url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT} if sqlite else {}
        )
        if sqlite:
            enable_sqlite_savepoints(engine)  # SAVEPOINTs in the app's transactions
        try:
            async with engine.connect() as connection:
                at = await connection.run_sync(migrate.current_revision)
            if at != expected:
                raise RuntimeError(
                    f"the database is not migrated (at {at or 'nothing'}, {expected} "
                    "expected): run `python -m examples.fastapi_chat.migrate --db URL upgrade`"
                )
            # firefly_orm's tables: checked, never migrated (the app's upgrade did it)
            store = SQLAlchemyStore(async_engine=engine, schema_name=migrate.MEMORY_SCHEMA)
            await store.async_initialize(migrate=False)
            app.state.help_desk = HelpDesk(engine, store, agent)
            try:
                yield
            finally:
                await store.async_close()
        finally:
            await engine.dispose()

    app = FastAPI(title="firefly_orm help desk", lifespan=lifespan)
    app.include_router(router)
    return app


def app_from_env() -> FastAPI:
    """The app on ``$FASTAPI_CHAT_DB`` (else the demo's SQLite file), for an ASGI server's
    ``--factory`` option.  Migrate first: ``python -m examples.fastapi_chat.migrate upgrade``."""
    return create_app(migrate.database_url())
