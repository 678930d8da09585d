import shutil
from pathlib import Path

from alembic import command
from alembic.config import Config

from firefly_orm import MemoryEntry, SQLAlchemyStore, migrate

app = Path("myapp_migrations")
(app / "versions").mkdir(parents=True, exist_ok=True)
(app / "env.py").write_text(
    "import sqlalchemy as sa\n"
    "from alembic import context\n"
    "from firefly_orm.migrate import include_name\n"
    "engine = sa.create_engine(context.config.get_main_option('sqlalchemy.url'))\n"
    "with engine.connect() as connection:\n"
    "    context.configure(connection=connection, target_metadata=None,\n"
    "                      include_name=include_name)\n"
    "    with context.begin_transaction():\n"
    "        context.run_migrations()\n"
)
shutil.copy(Path(migrate.script_location()) / "script.py.mako", app)

cfg = Config()
cfg.set_main_option("script_location", str(app))
cfg.set_main_option("path_separator", "space")
cfg.set_main_option("version_locations", f"{app / 'versions'} {migrate.versions_location()}")
cfg.set_main_option("sqlalchemy.url", "sqlite:///hosted.db")
command.upgrade(cfg, "firefly_orm@head")

assert migrate.current("sqlite:///hosted.db") == migrate.head()  # found in alembic_version
store = SQLAlchemyStore("sqlite:///hosted.db")
store.initialize(migrate=False)  # checks, never migrates
store.save("ns", MemoryEntry(content="hosted"))
store.close()
