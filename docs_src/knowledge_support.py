import json
from datetime import UTC, datetime

from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from firefly_orm import MemoryManager, SQLiteStore
from firefly_orm.knowledge import KnowledgeExtractor, KnowledgeGraph

# A stand-in for the extraction model (use "openai:gpt-4o-mini" or any pydantic-ai model).
PLANS = {"We're on the Starter plan.": "Starter", "We upgraded to Pro yesterday.": "Pro"}


def extraction_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    said = next(p.content for m in messages for p in m.parts if isinstance(p, UserPromptPart))
    triple = {"subject": "Acme", "predicate": "on_plan", "object": PLANS[str(said)]}
    answer = json.dumps({"triples": [triple]})
    return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, answer)])


store = SQLiteStore("data/support.sqlite3")  # or PostgreSQLStore / MongoDBStore
manager = MemoryManager(store=store)
graph = KnowledgeGraph(store)
extractor = KnowledgeExtractor(graph, FunctionModel(extraction_model))

march, may = datetime(2026, 3, 2, tzinfo=UTC), datetime(2026, 5, 11, tzinfo=UTC)
for when, text in [(march, "We're on the Starter plan."), (may, "We upgraded to Pro yesterday.")]:
    turn = manager.add_turn("ticket-7", text, "Noted, thanks!", user_id="acme-admin")
    ref = f"ticket-7:{turn.turn_id}"
    extractor.extract_from_turn("acme-admin", text, turn_ref=ref, observed_at=when)

(now,) = graph.facts_about("acme-admin", "Acme")
print(now.object, now.valid_from.date(), now.evidence)  # Pro 2026-05-11 ['ticket-7:1']
(april,) = graph.facts_about("acme-admin", "Acme", as_of=datetime(2026, 4, 1, tzinfo=UTC))
print(april.object, april.valid_to)  # Starter 2026-05-11 00:00:00+00:00 (closed, not deleted)
print([h["action"] for h in graph.history("acme-admin")][:2])  # ['supersede', 'add_entity']
print(extractor.stats())  # {'pending': 0, 'failed': 0}: nothing waits for a retry
