import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from firefly_orm import MemoryEntry, MemoryManager, SQLAlchemyStore
from firefly_orm.sql import enable_sqlite_savepoints


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    item: Mapped[str]


engine = sa.create_engine("sqlite:///shop.db")
enable_sqlite_savepoints(engine)  # SQLite only: let SQLAlchemy issue BEGIN so SAVEPOINT works

Base.metadata.create_all(engine)
store = SQLAlchemyStore(engine=engine)
store.initialize(migrate=True)  # our tables (a real app: its Alembic, run_with_host)

with Session(engine) as session:
    session.add(Order(item="book"))
    with store.unit_of_work(session=session) as uow:  # SAVEPOINT
        uow.entries.save("orders", MemoryEntry(key="last-order", content="book"))
        uow.commit()  # releases the savepoint
    try:
        with store.unit_of_work(session=session) as uow:
            uow.entries.save("orders", MemoryEntry(key="draft", content="?"))
            raise RuntimeError("the memory step failed")  # rolls back this savepoint only
    except RuntimeError:
        pass
    session.commit()  # both rows, or neither

last = store.load_by_key("orders", "last-order")
assert last is not None and last.content == "book"
assert store.load_by_key("orders", "draft") is None

# The memory layers join your transaction through a bound store view:
with Session(engine) as session:
    session.add(Order(item="lamp"))
    memory = MemoryManager(store=store.bind_session(session))
    memory.add_turn("chat-1", "Do you sell lamps?", "Yes, and one is in your basket.")
    memory.set_fact("basket", ["lamp"])
    session.rollback()  # neither the order nor the turn
assert MemoryManager(store=store).conversation.get_turns("chat-1") == []
store.close()
engine.dispose()
