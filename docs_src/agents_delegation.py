from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel

from firefly_orm import MemoryManager
from firefly_orm.pydantic_ai import delegate

mgr = MemoryManager()  # any store
researcher = delegate(
    mgr, Agent(TestModel(custom_output_text="Refunds take 5 days.")), name="researcher"
)
writer = delegate(mgr, Agent(TestModel(custom_output_text="Dear Ada, ...")), name="writer")

cid = researcher.run_sync("Find the refund policy.").conversation_id
researcher.memory.set_fact("policy", "refunds in 5 days")  # scope "delegation:researcher"
writer.run_sync("Draft the reply.", conversation_id=cid)  # gets the researcher's turn...
assert writer.memory.get_fact("policy") is None  # ...but not its facts
print([t.metadata["agent"] for t in mgr.conversation.get_turns(cid)])  # ['researcher', 'writer']
