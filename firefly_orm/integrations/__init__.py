"""Adapters that give other agent frameworks firefly_orm memory through their own interfaces.

Each adapter is one module with its own optional extra, and stores through a
:class:`~firefly_orm.conversation.ConversationMemory`, so whatever the memory
gives (its store's transactions, token budgets and eviction, user binding and
:meth:`~firefly_orm.conversation.ConversationMemory.erase_user`, migrations)
holds for the framework's sessions too:

* :mod:`firefly_orm.integrations.openai_agents`: an OpenAI Agents SDK
  ``Session`` (extra ``openai-agents``);
* :mod:`firefly_orm.integrations.langchain`: a LangChain
  ``BaseChatMessageHistory`` (extra ``langchain``);
* :mod:`firefly_orm.integrations.adk`: Google ADK's session service and
  memory service (extra ``adk``), on the store's units of work and a
  :class:`~firefly_orm.long_term.LongTermMemory` (ADK keeps every event of a
  session, so no conversation budget applies there);
* :mod:`firefly_orm.integrations.langgraph`: a LangGraph ``BaseStore``
  (extra ``langgraph``), directly on any store's units of work: its items are
  entries of one namespace, found by the store's full-text search;
* :mod:`firefly_orm.integrations.llama_index`: a LlamaIndex
  ``BaseChatStore`` (extra ``llama-index``), what ``ChatMemoryBuffer`` keeps
  its history in.

Importing this package imports no framework; import the module you need.
"""

#: Nothing here: each framework's adapter is in its own module (and extra).
__all__: list[str] = []
