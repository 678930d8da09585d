from pathlib import Path

from firefly_orm.artifacts import DirectoryWorkspace

# root= given: what the directory holds is loaded; omitted: a temporary directory
ws = DirectoryWorkspace(
    "agent-7",  # root: the directory (its name is the key unless key= says otherwise)
    messages=[{"role": "user", "content": "remember my tea"}],
    read_only_prefixes=("memory/",),
    remote_base=f"file://{Path('remote').absolute()}",  # "s3://bucket/memory" in production
    org="acme",
    project="assistant",
    domain="development",
)
info = ws.write_text("user/profile.md", "Ada prefers tea", reason="learned")
print((ws.root / "user" / "profile.md").read_text())  # the file, as Flyte reads it
print(ws.audit_tail(1)[0].op)  # create: audit/log.jsonl has the line

url = ws.save()  # remote_path_for_key("agent-7"): <base>/acme/assistant/development/agent-7
print(url.endswith("/acme/assistant/development/agent-7"))
print(ws.exists("agent-7", "acme", "assistant", "development"))  # True

copy = DirectoryWorkspace.load(url)  # into a temporary directory, checked whole first
print(copy.read_text("user/profile.md"), copy.messages()[0]["content"])
copy.close()  # the temporary directory is removed
