"""Adapters that give other agent frameworks firefly_orm memory through their own interfaces.

Each adapter is one module with its own optional extra, and stores through a
:class:`~firefly_orm.conversation.ConversationMemory`, so whatever the memory
gives (its store's transactions, token budgets and eviction, user binding and
:meth:`~firefly_orm.conversation.ConversationMemory.erase_user`, migrations)
holds for the framework's sessions too:

* :mod:`firefly_orm.integrations.openai_agents`: an OpenAI Agents SDK
  ``Session`` (extra ``openai-agents``);
* :mod:`firefly_orm.integrations.langchain`: a LangChain
  ``BaseChatMessageHistory`` (extra ``langchain``).

Importing this package imports no framework; import the module you need.
"""

#: Nothing here: each framework's adapter is in its own module (and extra).
__all__: list[str] = []
