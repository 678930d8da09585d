import sqlalchemy as sa

from firefly_orm import MemoryEntry, SQLAlchemyStore

engine = sa.create_engine("sqlite:///app.db")  # your app's engine
store = SQLAlchemyStore(engine=engine)  # schema_name="..." on PostgreSQL
store.initialize(migrate=True)  # our migrations: on your engine, only when asked
store.save("notes", MemoryEntry(key="greeting", content="hello"))
entry = store.load_by_key("notes", "greeting")
assert entry is not None and entry.content == "hello"
store.close()  # your engine stays open
with engine.connect() as conn:
    assert conn.execute(sa.text("select count(*) from memory_entries")).scalar() == 1
engine.dispose()
