import sqlalchemy as sa
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from sqlalchemy.orm import Session

from firefly_orm import ConversationNotFoundError, MemoryManager, SQLAlchemyStore
from firefly_orm.pydantic_ai import MemoryAgent
from firefly_orm.sql import enable_sqlite_savepoints

engine = sa.create_engine("sqlite:///agents-app.sqlite3")  # the app's engine
enable_sqlite_savepoints(engine)
store = SQLAlchemyStore(engine=engine)
store.initialize(migrate=True)  # our tables (a real app: its Alembic)
sessions: list[Session] = []


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    # while the model runs, the app's session holds no transaction (nor a connection)
    assert not sessions[-1].in_transaction()
    return ModelResponse(parts=[TextPart("Noted.")])


agent = Agent(FunctionModel(model), instructions="Be brief.")


def chat(user_id: str, text: str, conversation_id: str | None = None) -> str:
    """A request handler: the request's session, a memory bound to it and to the user."""
    with Session(engine) as session:
        sessions.append(session)
        memory = MemoryManager(store=store.bind_session(session), user_id=user_id)
        result = MemoryAgent(agent, memory=memory).run_sync(text, conversation_id=conversation_id)
        session.commit()  # the turn was written in a SAVEPOINT of your transaction
        return result.conversation_id


cid = chat("ada", "My order A-1042 is late.")
chat("ada", "Any news?", cid)
try:
    chat("bob", "Show me Ada's chat", cid)  # another user's conversation: not found
except ConversationNotFoundError as exc:
    print(exc)
admin = MemoryManager(store=store)  # unbound: an admin's, never a request handler's
assert [t.user_prompt for t in admin.conversation.get_turns(cid)] == [
    "My order A-1042 is late.",
    "Any news?",
]
assert admin.owner_of(cid) == "ada"
store.close()
engine.dispose()
