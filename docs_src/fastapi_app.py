"""A FastAPI + SQLModel app whose routes keep each user's chat memory in the app's own session.

The code of ``docs/guide/fastapi.md``; ``docs_src/fastapi_recipe.py`` runs it.

* One memory per request, from a dependency: the request's ``Session`` (or
  ``AsyncSession``) and user -> a ``MemoryManager`` bound to both.
* The chat routes, sync (``def``) and async (``async def``): read the context,
  end the transaction, call the model with no transaction open, then store the
  turn and the app's own rows in ONE transaction of the app's session.
* ``DELETE /me``: the user's rows and their memory go in one transaction.
* ``POST /assistant``: ``MemoryAgent`` for a route that writes nothing of its own.

An app has either the sync or the async routes; this one has both so that both
are tested.  Its tables are created with ``create_all`` to keep the recipe short;
a real app migrates them with its Alembic (``migrate.run_with_host`` in its
env.py: ``examples/fastapi_chat``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Annotated

import sqlalchemy as sa
from fastapi import APIRouter, Depends, FastAPI, Header, HTTPException, Request
from pydantic import BaseModel, Field
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.orm import registry
from sqlmodel import Field as Column
from sqlmodel import Session, SQLModel, col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from firefly_orm import (
    EntryValidationError,
    MemoryManager,
    NotFoundError,
    SQLAlchemyStore,
    StoreError,
)
from firefly_orm.pydantic_ai import MemoryAgent
from firefly_orm.sql import enable_sqlite_savepoints

__all__ = [
    "MEMORY_TOKENS",
    "Answer",
    "Chat",
    "ChatOut",
    "NewMessage",
    "NewUser",
    "User",
    "create_app",
    "offline_model",
]

#: The token budget of a conversation's memory (older turns are evicted past it).
MEMORY_TOKENS = 4_000


# --8<-- [start:models]
class AppModel(SQLModel, registry=registry(metadata=sa.MetaData())):
    """The app's tables, on a MetaData of their own (firefly_orm's table is on another)."""


class User(AppModel, table=True):
    __tablename__ = "users"

    id: str = Column(primary_key=True, max_length=64)
    name: str = Column(max_length=100)


class Chat(AppModel, table=True):
    """One chat of a user; its turns live in firefly_orm's memory."""

    __tablename__ = "chats"

    id: int | None = Column(default=None, primary_key=True)
    user_id: str = Column(foreign_key="users.id", index=True, max_length=64)
    conversation_id: str = Column(unique=True, max_length=32)
    messages: int = 0  # the app's own counter, written with each turn
    # --8<-- [end:models]


class NewUser(BaseModel):
    """Body of ``POST /users``."""

    id: str = Field(min_length=1, max_length=64, pattern=r"^[\w.@-]+$")
    name: str = Field(min_length=1, max_length=100)


class NewMessage(BaseModel):
    """Body of the chat routes (``conversation_id`` only for ``POST /assistant``)."""

    text: str = Field(min_length=1, max_length=4_000)
    conversation_id: str | None = None


class ChatOut(BaseModel):
    """A chat as the API shows it."""

    id: int
    conversation_id: str
    messages: int


class Answer(BaseModel):
    """What a chat route returns once the turn is stored."""

    conversation_id: str
    turn_id: int
    reply: str


# --8<-- [start:dependencies]
def get_session(request: Request) -> Iterator[Session]:
    """The request's session (closed, and rolled back if not committed, after the response)."""
    with Session(request.app.state.engine) as session:
        yield session


def current_user(x_user: Annotated[str, Header(min_length=1, max_length=64)]) -> str:
    """The request's user id (your authentication goes here)."""
    return x_user


def get_memory(
    request: Request,
    session: Annotated[Session, Depends(get_session)],
    user_id: Annotated[str, Depends(current_user)],
) -> MemoryManager:
    """The request user's memory, its writes joining the request's session.

    Every write runs in a SAVEPOINT of the session's transaction: the app's
    ``session.commit()`` keeps them with the app's rows, a rollback drops both.
    ``user_id=``: new conversations are the user's, and ``erase_user`` finds them.
    """
    store: SQLAlchemyStore = request.app.state.store
    return MemoryManager(
        store=store.bind_session(session),
        user_id=user_id,
        max_conversation_tokens=MEMORY_TOKENS,
        summarize_threshold=MEMORY_TOKENS,
    )


SessionDep = Annotated[Session, Depends(get_session)]
UserDep = Annotated[str, Depends(current_user)]
MemoryDep = Annotated[MemoryManager, Depends(get_memory)]  # same session as SessionDep
# --8<-- [end:dependencies]


# --8<-- [start:async-dependencies]
async def get_async_session(request: Request) -> AsyncIterator[AsyncSession]:
    """The request's async session."""
    async with AsyncSession(request.app.state.async_engine) as session:
        yield session


async def get_async_memory(
    request: Request,
    session: Annotated[AsyncSession, Depends(get_async_session)],
    user_id: Annotated[str, Depends(current_user)],
) -> MemoryManager:
    """:func:`get_memory` for ``async def`` routes: bound to an AsyncSession (async_* methods)."""
    store: SQLAlchemyStore = request.app.state.store
    return MemoryManager(
        store=store.bind_session(session),
        user_id=user_id,
        max_conversation_tokens=MEMORY_TOKENS,
        summarize_threshold=MEMORY_TOKENS,
    )


AsyncSessionDep = Annotated[AsyncSession, Depends(get_async_session)]
AsyncMemoryDep = Annotated[MemoryManager, Depends(get_async_memory)]
# --8<-- [end:async-dependencies]


def agent_of(request: Request) -> Agent[None, str]:
    """The app's pydantic-ai agent (made at start-up)."""
    agent: Agent[None, str] = request.app.state.agent
    return agent


def users_chat(chat: Chat | None, user_id: str) -> Chat:
    """``chat`` if it is the user's, else HTTP 404 (another user's chat is not found either)."""
    if chat is None or chat.user_id != user_id:
        raise HTTPException(404, "no such chat")
    return chat


router = APIRouter()


@router.post("/users", status_code=201)
def sign_up(body: NewUser, session: SessionDep) -> NewUser:
    """Create a user (no memory yet)."""
    session.add(User(id=body.id, name=body.name))
    try:
        session.commit()
    except sa.exc.IntegrityError as exc:
        raise HTTPException(409, "that user exists") from exc
    return body


# --8<-- [start:sync-routes]
@router.post("/chats", status_code=201)
def open_chat(session: SessionDep, memory: MemoryDep, user_id: UserDep) -> ChatOut:
    """Open a chat: the app's row and the (empty) conversation, one transaction."""
    conversation_id = memory.new_conversation()  # the user's, in a SAVEPOINT
    chat = Chat(user_id=user_id, conversation_id=conversation_id)
    session.add(chat)
    session.commit()
    return ChatOut.model_validate(chat, from_attributes=True)


@router.post("/chats/{chat_id}/messages")
def post_message(
    chat_id: int,
    body: NewMessage,
    request: Request,
    session: SessionDep,
    memory: MemoryDep,
    user_id: UserDep,
) -> Answer:
    """One exchange: read, call the model outside any transaction, write once."""
    chat = users_chat(session.get(Chat, chat_id), user_id)
    conversation_id = chat.conversation_id  # plain values: ORM objects expire below

    # 1. Read what the model gets, then end the read transaction: while the
    #    model thinks, no transaction is open and no connection is held.
    context = memory.get_context(conversation_id)
    session.rollback()  # it wrote nothing

    # 2. The model call (seconds, maybe a timeout or an error: nothing to undo).
    result = agent_of(request).run_sync(body.text, message_history=context)

    # 3. One unit of work: the turn and the app's own write, one COMMIT.
    try:
        turn = memory.add_turn(conversation_id, body.text, result.output, result.new_messages())
        session.exec(
            sa.update(Chat).where(col(Chat.id) == chat_id).values(messages=col(Chat.messages) + 1)
        )
        session.commit()
    except (StoreError, sa.exc.SQLAlchemyError) as exc:
        session.rollback()  # neither the turn nor the counter
        raise HTTPException(503, "not saved, try again") from exc
    return Answer(conversation_id=conversation_id, turn_id=turn.turn_id, reply=result.output)


@router.delete("/me", status_code=204)
def delete_me(session: SessionDep, memory: MemoryDep, user_id: UserDep) -> None:
    """Delete the user: the app's rows and everything memory holds of them, one transaction."""
    user = session.get(User, user_id)
    if user is None:
        raise HTTPException(404, "no such user")
    session.exec(sa.delete(Chat).where(col(Chat.user_id) == user.id))
    session.delete(user)
    memory.erase_user(user.id)  # every row of theirs: conversations, summaries, facts
    session.commit()  # all of it, or (on any error above) none of it
    # --8<-- [end:sync-routes]


# --8<-- [start:async-routes]
@router.post("/async/chats/{chat_id}/messages")
async def post_message_async(
    chat_id: int,
    body: NewMessage,
    request: Request,
    session: AsyncSessionDep,
    memory: AsyncMemoryDep,
    user_id: UserDep,
) -> Answer:
    """:func:`post_message` in an ``async def`` route: the same three steps, awaited."""
    chat = users_chat(await session.get(Chat, chat_id), user_id)
    conversation_id = chat.conversation_id

    context = await memory.async_get_context(conversation_id)
    await session.rollback()  # no transaction, no connection held during the model call

    result = await agent_of(request).run(body.text, message_history=context)

    try:
        turn = await memory.async_add_turn(
            conversation_id, body.text, result.output, result.new_messages()
        )
        await session.exec(
            sa.update(Chat).where(col(Chat.id) == chat_id).values(messages=col(Chat.messages) + 1)
        )
        await session.commit()
    except (StoreError, sa.exc.SQLAlchemyError) as exc:
        await session.rollback()
        raise HTTPException(503, "not saved, try again") from exc
    return Answer(conversation_id=conversation_id, turn_id=turn.turn_id, reply=result.output)


@router.delete("/async/me", status_code=204)
async def delete_me_async(
    session: AsyncSessionDep, memory: AsyncMemoryDep, user_id: UserDep
) -> None:
    """:func:`delete_me` in an ``async def`` route."""
    user = await session.get(User, user_id)
    if user is None:
        raise HTTPException(404, "no such user")
    await session.exec(sa.delete(Chat).where(col(Chat.user_id) == user.id))
    await session.delete(user)
    await memory.async_erase_user(user.id)
    await session.commit()
    # --8<-- [end:async-routes]


@router.get("/chats")
async def my_chats(session: AsyncSessionDep, user_id: UserDep) -> list[ChatOut]:
    """The user's chats and their message counts (the app's own rows)."""
    chats = await session.exec(select(Chat).where(Chat.user_id == user_id).order_by(col(Chat.id)))
    return [ChatOut.model_validate(chat, from_attributes=True) for chat in chats]


# --8<-- [start:memory-agent]
@router.post("/assistant")
async def ask_assistant(body: NewMessage, request: Request, user_id: UserDep) -> Answer:
    """MemoryAgent: for a route that writes nothing of its own, one call does the three steps.

    Its memory is on the unbound store (its own short transactions, none
    open while the model runs).  Another user's conversation is not found
    (``ConversationNotFoundError``, a ``NotFoundError``), as a missing one.
    """
    assistant: MemoryAgent[None, str] = request.app.state.assistant
    try:
        result = await assistant.run(  # no id: a new conversation (not the user's current one)
            body.text,
            conversation_id=body.conversation_id,
            user_id=user_id,
            new_conversation=body.conversation_id is None,
        )
    except (NotFoundError, EntryValidationError) as exc:  # another user's conversation, a bad id
        raise HTTPException(404, "no such conversation") from exc
    return Answer(
        conversation_id=result.conversation_id, turn_id=result.turn_id, reply=result.output
    )
    # --8<-- [end:memory-agent]


# --8<-- [start:app]
def create_app(url: str, async_url: str, *, model: Model | None = None) -> FastAPI:
    """The app on one database, through a sync and an async engine.

    Args:
        url: A sync SQLAlchemy URL (``sqlite:///app.db``, ``postgresql+psycopg://...``).
        async_url: The same database for the async engine (``sqlite+aiosqlite:///app.db``,
            ``postgresql+psycopg://...``).
        model: The agent's model (default: :func:`offline_model`; in production
            ``"openai:gpt-4o"`` or any pydantic-ai model).
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = sa.create_engine(url)
        async_engine: AsyncEngine = create_async_engine(async_url)
        if engine.dialect.name == "sqlite":
            enable_sqlite_savepoints(engine)  # SAVEPOINTs inside the app's transactions
            enable_sqlite_savepoints(async_engine)
        # One store on the app's engines: it opens no pool of its own.
        store = SQLAlchemyStore(engine=engine, async_engine=async_engine)
        AppModel.metadata.create_all(engine)  # a real app: its Alembic
        store.initialize(migrate=True)  # our tables (a real app: run_with_host in its env.py)
        agent = Agent(model or offline_model(), output_type=str, instructions="Be brief.")
        app.state.engine, app.state.async_engine = engine, async_engine
        app.state.store, app.state.agent = store, agent
        app.state.assistant = MemoryAgent(agent, memory=MemoryManager(store=store))
        try:
            yield
        finally:
            store.close()  # the app's engines stay the app's: dispose them here
            await async_engine.dispose()
            engine.dispose()

    app = FastAPI(lifespan=lifespan)
    app.include_router(router)
    return app
    # --8<-- [end:app]


def offline_model() -> FunctionModel:
    """A model that needs no network: it says how many earlier messages it was given."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        earlier = len(messages) - 1  # the last one is this request
        return ModelResponse(parts=[TextPart(f"noted ({earlier} earlier messages)")])

    return FunctionModel(reply, model_name="offline")
