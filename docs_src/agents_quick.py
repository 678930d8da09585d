from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel

from firefly_orm import MemoryManager, SQLiteStore
from firefly_orm.pydantic_ai import MemoryAgent

store = SQLiteStore("data/support.sqlite3")
# Any model ("openai:gpt-4o", ...); TestModel answers offline.
support = MemoryAgent(Agent(TestModel()), memory=MemoryManager(store=store))

first = support.run_sync("My order A-1042 is late.", user_id="ada", new_conversation=True)
cid = first.conversation_id
support.run_sync("Any news?", conversation_id=cid, user_id="ada")  # sees the first turn
turns = support.memory.conversation.get_turns(cid)
print([t.user_prompt for t in turns])  # ['My order A-1042 is late.', 'Any news?']
store.close()
