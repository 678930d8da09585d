from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms import MockLLM
from llama_index.core.memory import ChatMemoryBuffer

from firefly_orm import ConversationMemory, SQLiteStore
from firefly_orm.integrations.llama_index import FireflyChatStore


def turn(message: str) -> int:
    store = SQLiteStore("llama_index.sqlite3")  # any store: PostgreSQL, MongoDB, Redis...
    try:  # a new store and engine each time: what a restarted process has
        memory = ConversationMemory(store=store, max_tokens=8000, user_id="ada")
        buffer = ChatMemoryBuffer.from_defaults(
            chat_store=FireflyChatStore(memory),
            chat_store_key="support-42",  # one key, one conversation
            token_limit=3000,
        )
        engine = SimpleChatEngine.from_defaults(llm=MockLLM(), memory=buffer)  # a stand-in LLM
        engine.chat(message)  # reads the history, then adds the message and the answer
        return len(buffer.get_all())
    finally:
        store.close()


print(turn("My name is Ada."))  # 2
print(turn("What is my name?"))  # 4
