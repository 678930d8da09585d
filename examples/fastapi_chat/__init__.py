"""A FastAPI help desk whose chat route stores each turn in the app's own transaction.

* :mod:`.models`: the app's SQLModel tables (``tickets``, ``reply_usage``) on
  their own ``MetaData``.
* :mod:`.migrate` and ``migrations/``: the app's Alembic environment; its
  ``version_locations`` include firefly_orm's revisions, so ``upgrade heads``
  creates the app's tables and firefly_orm's together, recorded in the app's
  ``alembic_version`` (README: "Migrations inside your Alembic", way (b)).
* :mod:`.assistant`: the pydantic-ai agent and an offline demo model.
* :mod:`.app`: ``create_app(database_url)``.  The chat route reads the history
  from memory, runs the agent outside any transaction, then bumps the ticket,
  stores the turn and writes the usage row in ONE transaction of the app's
  session (README: "Your session and transaction"): all three, or none.

Run it: ``python -m examples.fastapi_chat [--db URL] [--ticket ID] [MESSAGE ...]``.
Migrate only: ``python -m examples.fastapi_chat.migrate [--db URL] upgrade heads``.
"""
