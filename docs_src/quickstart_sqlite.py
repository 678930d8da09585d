from firefly_orm import MemoryEntry, SQLiteStore

store = SQLiteStore("data/memory.sqlite3")  # parent dirs created; migrated on first use
store.save("notes", MemoryEntry(key="greeting", content={"text": "hello"}))
entry = store.load_by_key("notes", "greeting")  # the newest entry with that key, or None
assert entry is not None
print(entry.content)  # {'text': 'hello'}
store.close()
