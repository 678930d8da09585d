"""Semantic and hybrid recall on SQLite: an embedder, vectors beside the items, three modes."""

from pydantic_ai import Embedder

from firefly_orm.long_term import LongTermMemory
from firefly_orm.sql import SQLiteStore
from firefly_orm.testing.embeddings import ConceptEmbeddingModel

# In production: Embedder("openai:text-embedding-3-small"), or any pydantic-ai
# embedding model. The test model here needs no network and no weights.
embedder = Embedder(ConceptEmbeddingModel())

# vectors=True migrates the vector tables and loads sqlite-vec on each connection.
with SQLiteStore("memory.sqlite3", vectors=True) as store:
    memory = LongTermMemory(store=store, user_id="ada", embedder=embedder)
    memory.remember("the customer prefers email over phone calls", tags=["crm"])
    memory.remember("the invoice is due on Friday", tags=["billing"])

    question = "how should we contact her?"
    # No word of the question is in the item: full-text search finds nothing...
    assert memory.recall(question, mode="text") == []
    # ...recall by meaning finds it, and hybrid (the default) fuses both rankings.
    best = memory.recall(question, mode="semantic", limit=1)[0]
    assert best.item.text == "the customer prefers email over phone calls"
    assert memory.recall(question)[0].item.text == best.item.text
    # Filters apply inside the vector scan, before the limit.
    assert [r.item.text for r in memory.recall(question, tags=["billing"])] == [
        "the invoice is due on Friday"
    ]
