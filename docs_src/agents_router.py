from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel

from firefly_orm import MemoryManager
from firefly_orm.pydantic_ai import (
    CapabilityStrategy,
    DelegationRouter,
    ModelChoiceStrategy,
    SubAgent,
)

mgr = MemoryManager()  # any store
pool = [
    SubAgent(
        Agent(TestModel(custom_output_text="Refunded.")),
        "billing",
        "invoice, payment and refund questions; cards charged twice",
    ),
    SubAgent(
        Agent(TestModel(custom_output_text="Reinstall it.")),
        "tech",
        "error, crash and installation problems",
    ),
]
router = DelegationRouter(pool, CapabilityStrategy(), memory=mgr)

result = router.route_sync("I was charged twice, please refund", user_id="ada")
print(result.output, result.turn.metadata["agent"])  # Refunded. billing
result = router.route_sync("I get a crash at start", user_id="ada")  # ada's conversation
print(result.turn.metadata["agent"], result.turn_id)  # tech 1: the same conversation

# A model picks instead (any pydantic-ai model; TestModel answers "tech" here):
chooser = ModelChoiceStrategy(TestModel(custom_output_args={"name": "tech", "reason": "crash"}))
print(DelegationRouter(pool, chooser, memory=mgr).choose("It will not start").name)  # tech
