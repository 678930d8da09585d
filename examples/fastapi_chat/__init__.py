"""A FastAPI help desk whose chat route stores each turn in the app's own transaction.

* :mod:`.models`: the app's SQLModel tables (``tickets``, ``reply_usage``) on
  their own ``MetaData``.
* :mod:`.migrate` and ``migrations/``: the app's Alembic environment, with
  one head: its env.py calls ``firefly_orm.migrate.run_with_host``, so the
  app's ``upgrade head`` also brings firefly_orm's tables to firefly_orm's
  head in the same transaction (recorded in firefly_orm's own version table),
  and ``autogenerate_filters`` keeps them out of the app's autogenerate
  (README: "Migrations inside your Alembic", the recommended way).
* :mod:`.assistant`: the pydantic-ai agent and an offline demo model.
* :mod:`.app`: ``create_app(database_url)``.  The chat route reads the history
  from memory, runs the agent outside any transaction, then bumps the ticket,
  stores the turn and writes the usage row in ONE transaction of the app's
  session (README: "Your session and transaction"): all three, or none.

Run it: ``python -m examples.fastapi_chat [--db URL] [--ticket ID] [MESSAGE ...]``.
Migrate only: ``python -m examples.fastapi_chat.migrate [--db URL] upgrade``.
"""
