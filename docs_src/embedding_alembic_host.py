import shutil
from pathlib import Path

from alembic import command
from alembic.config import Config

from firefly_orm import MemoryEntry, SQLAlchemyStore, migrate

app = Path("shop_migrations")
(app / "versions").mkdir(parents=True, exist_ok=True)
(app / "env.py").write_text(
    "import sqlalchemy as sa\n"
    "from alembic import context\n"
    "from firefly_orm import migrate\n"
    "engine = sa.create_engine(context.config.get_main_option('sqlalchemy.url'))\n"
    "with engine.connect() as connection:\n"
    "    context.configure(connection=connection, target_metadata=sa.MetaData(),\n"
    "                      **migrate.autogenerate_filters())\n"
    "    with context.begin_transaction():\n"
    "        migrate.run_with_host(context, connection, schema_name=None)\n"
    "        context.run_migrations()\n"
)
shutil.copy(Path(migrate.script_location()) / "script.py.mako", app)
cfg = Config()
cfg.set_main_option("script_location", str(app))
cfg.set_main_option("path_separator", "os")
cfg.set_main_option("sqlalchemy.url", "sqlite:///shop-host.db")
command.revision(cfg, "your first revision", rev_id="s001")

command.upgrade(cfg, "head")  # yours, and ours to our head
assert migrate.check("sqlite:///shop-host.db") == []
store = SQLAlchemyStore("sqlite:///shop-host.db")
store.initialize(migrate=False)  # checks, never migrates
store.save("ns", MemoryEntry(content="kept"))
command.check(cfg)  # "No new upgrade operations detected."
command.downgrade(cfg, "-1")  # yours only
assert [e.content for e in store.load("ns")] == ["kept"]
store.close()
