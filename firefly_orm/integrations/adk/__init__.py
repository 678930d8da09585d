"""Google ADK session and memory services on firefly_orm stores.

:class:`FireflySessionService` implements ADK's ``BaseSessionService``
(``create_session``, ``get_session`` with ``GetSessionConfig``,
``list_sessions``, ``delete_session``, ``append_event``, ``get_user_state``)
on any firefly_orm store, so a ``Runner`` keeps its sessions, events and state
in SQLite, PostgreSQL, MongoDB, Redis or files, with the store's transactions,
migrations and ``erase_user``.  :class:`FireflyMemoryService` implements
``BaseMemoryService`` (``add_session_to_memory``, ``add_events_to_memory``,
``search_memory``, ``delete_memory``) on a
:class:`~firefly_orm.long_term.LongTermMemory`: full-text recall, and recall
by meaning when the memory has an embedder.  Install the ``adk`` extra.

::

    from google.adk.runners import Runner
    from firefly_orm import LongTermMemory, SQLiteStore
    from firefly_orm.integrations.adk import FireflyMemoryService, FireflySessionService

    store = SQLiteStore("memory.sqlite3")
    runner = Runner(
        app_name="support",
        agent=agent,
        session_service=FireflySessionService(store),
        memory_service=FireflyMemoryService(LongTermMemory(store=store)),
    )

State follows ADK's scopes: ``app:`` keys are shared by every session of the
app, ``user:`` keys by every session of the user, ``temp:`` keys are never
stored, and the rest belong to the session.  ``append_event`` writes the event
and its state delta in one unit of work and refuses a stale session object
(ADK's ``StaleSessionError``), as ADK's own ``DatabaseSessionService`` does.
Events are stored as their ``model_dump_json`` and read back equal.  The
sessions are not a :class:`~firefly_orm.conversation.ConversationMemory`:
ADK keeps every event of a session, so no token budget evicts any.
"""

from firefly_orm.integrations.adk._memory import FireflyMemoryService
from firefly_orm.integrations.adk._sessions import FireflySessionService

__all__ = ["FireflyMemoryService", "FireflySessionService"]
