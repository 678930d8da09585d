from firefly_orm import MigrationRequiredError, SQLiteStore, migrate

store = SQLiteStore("app-role.db")  # PostgreSQLStore(app_role_url, schema_name=...)
try:
    store.initialize(migrate=False)  # never runs DDL
except MigrationRequiredError as exc:
    print(exc)  # "database not at head: ... run `firefly-orm migrate`"
migrate.upgrade("sqlite:///app-role.db")  # the owner's deploy step
store.initialize(migrate=False)
store.close()
