from firefly_orm import migrate

url = "sqlite:///deploy.db"  # PostgreSQL: also pass schema_name="firefly_memory"
migrate.upgrade(url)  # safe to run from every worker: one migrates
assert migrate.check(url) == []  # [] = at head; `firefly-orm check` exits 1 otherwise

# In your migrations/env.py:
#     from firefly_orm.migrate import include_name
#     context.configure(connection=connection, target_metadata=Base.metadata,
#                       include_name=include_name)
# (or include_object=migrate.include_object, or call it from your own filter)
