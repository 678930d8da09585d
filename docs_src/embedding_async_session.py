import asyncio

from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from firefly_orm import MemoryEntry, SQLAlchemyStore
from firefly_orm.protocols import UnitOfWork
from firefly_orm.sql import enable_sqlite_savepoints


def remember(uow: UnitOfWork, text: str) -> None:
    uow.entries.save("chat", MemoryEntry(content=text))


async def main() -> None:
    engine = create_async_engine("sqlite+aiosqlite:///async-app.db")

    enable_sqlite_savepoints(engine)  # SQLite only, as above
    store = SQLAlchemyStore(async_engine=engine)
    await store.async_initialize(migrate=True)  # our tables (a real app: its Alembic)
    async with AsyncSession(engine) as session:
        async with store.async_unit_of_work(session=session) as uow:
            await uow.run_sync(remember, "hello")
            await uow.commit()
        await session.commit()
    assert [e.content for e in await store.async_load("chat")] == ["hello"]
    await store.async_close()
    await engine.dispose()


asyncio.run(main())
