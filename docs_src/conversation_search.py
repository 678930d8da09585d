"""Searching past conversations: a fact told in an earlier conversation, found from a new one."""

from firefly_orm import InMemoryStore, MemoryManager
from firefly_orm.testing.embeddings import ConceptEmbeddingModel

# One embedder for long-term items and conversation turns (a real model in production).
manager = MemoryManager(store=InMemoryStore(), embedder=ConceptEmbeddingModel()).for_user("ada")

earlier = manager.new_conversation()
manager.add_turn(earlier, "Note this about Mrs Lee", "Noted: she prefers email over phone calls.")

current = manager.new_conversation()
question = "how should we contact her?"

# By meaning and by words (hybrid, the default with an embedder); never another user's turns.
found = manager.conversation.search_conversations(question, exclude=[current], limit=3)
assert (found[0].conversation_id, found[0].turn_id) == (earlier, 0)
assert "email" in found[0].turn.assistant_response

# Long-term items and past turns together, merged by rank.
manager.remember("Mrs Lee lives in Lyon")
sources = [hit.source for hit in manager.search_memory(question, exclude_conversations=[current])]
assert sources[:2] == ["long_term", "conversation"]

# The context for the next model call can carry the best past turns too.
context = manager.assemble_context(current, query=question, past_turns=2)
assert any("prefers email" in str(message) for message in context)
