from firefly_orm import SQLiteStore
from firefly_orm.artifacts import Artifacts, ReadOnlyPathError
from firefly_orm.errors import NotFoundError

store = SQLiteStore("data/artifacts.sqlite3")
admin = Artifacts(store=store)  # unbound: the shared workspaces, and every user's via for_user
ann = admin.for_user("ann")  # hand request handlers a bound registry
bob = admin.for_user("bob")

notes = ann.create("notes", read_only_prefixes=("memory/",))  # the agent's handle
notes.write_text("user/plan.md", "ann's plan", actor="agent")

# bob sees no "notes": the same answers and errors as for a key nobody used
print(bob.exists("notes"), bob.workspace("notes").list_paths())  # False []
try:
    bob.open("notes")
except NotFoundError as exc:
    print(exc)

# the agent cannot approve its own writes, however it spells the path
try:
    notes.promote("user/plan.md", "./Memory/plan.md", actor="agent", reason="mine")
except ReadOnlyPathError as exc:
    print(exc)

# the reviewer's handle holds the right to promote into the read-only area
reviewer = ann.open("notes", read_only_prefixes=("memory/",), reviewer=True)
reviewer.promote("user/plan.md", "memory/plan.md", actor="reviewer", reason="approved")
print(notes.read_text("memory/plan.md"))  # ann's plan
print([(w.key, w.user_id) for w in admin.list_workspaces(all_users=True)])  # [('notes', 'ann')]
store.close()
