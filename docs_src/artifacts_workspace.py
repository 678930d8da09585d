from firefly_orm import SQLiteStore
from firefly_orm.artifacts import Artifacts, ReadOnlyPathError, ShaMismatchError

store = SQLiteStore("data/artifacts.sqlite3")
artifacts = Artifacts(store=store)  # Artifacts(store=..., user_id="ada"): per user
agent = artifacts.get_or_create("session-42", read_only_prefixes=("memory/",), keep_versions=True)

staged = agent.write_text("user/profile.md", "Ada prefers tea", actor="agent", reason="learned")
try:
    agent.write_text("memory/profile.md", "sneaky", actor="agent")
except ReadOnlyPathError as exc:
    print(exc)  # nothing was written

reviewer = artifacts.open("session-42", keep_versions=True)  # a handle without read-only prefixes
reviewer.promote(
    "user/profile.md",
    "memory/profile.md",
    actor="reviewer",
    reason="approved",
    src_sha=staged.sha256,
)

sha = agent.current_sha("user/profile.md")
agent.write_text("user/profile.md", "Ada prefers green tea", expected_sha=sha)
try:
    agent.write_text("user/profile.md", "stale edit", expected_sha=sha)
except ShaMismatchError as exc:
    print("conflict; current sha:", exc.current_sha[:12])

print(agent.list_paths("user/"))  # ['user/profile.md']
print([(r.op, r.path, r.actor) for r in agent.audit_tail(3)])
print([h.sha256[:12] for h in agent.history("user/profile.md")])
agent.append({"role": "user", "content": "Remember that I like tea"})
print(agent.messages())
store.close()
