"""A support agent whose memory survives the process: ``firefly_orm.pydantic_ai`` end to end.

* :mod:`~examples.support_agent.agent`: the agent, a pydantic-ai ``Agent``
  with two tools (``lookup_order`` and ``save_customer_name``, which write
  facts through :class:`~firefly_orm.pydantic_ai.MemoryDeps`), run by a
  :class:`~firefly_orm.pydantic_ai.MemoryAgent` on a small token budget, so
  older turns are evicted and summarized by an LLM summarizer.  Both models
  are offline scripted ``FunctionModel`` s that read what memory gives them;
  swap in ``"openai:gpt-4o"`` for a real one.
* :mod:`~examples.support_agent.demo`: ``python -m examples.support_agent
  [--db URL] [--schema NAME] [--customer ID] [--new] [MESSAGE ...]``.  The first
  run opens a conversation for the customer and works through a short script;
  every later run (a new process) resumes the customer's latest conversation:
  the agent knows their name and order from the facts, and what was said
  before from the history and the summary of the evicted turns.
"""

from examples.support_agent.agent import (
    MAX_CONVERSATION_TOKENS,
    ORDERS,
    build_agent,
    build_memory,
    build_summarizer,
    build_support,
)

__all__ = [
    "MAX_CONVERSATION_TOKENS",
    "ORDERS",
    "build_agent",
    "build_memory",
    "build_summarizer",
    "build_support",
]
