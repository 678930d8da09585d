import sqlite3

from firefly_orm import MemoryManager, SQLiteStore
from firefly_orm.privacy import Encryption, KeyRing, generate_key, protect, rotate_keys

# In production: KeyRing.from_env() reads FIREFLY_AGENTIC_MEMORY_ENCRYPTION_KEYS
# ("k2:<base64>,k1:<base64>", the current key first), or KeyRing.from_file(path).
old_key, new_key = generate_key(), generate_key()

store = SQLiteStore("data/memory.sqlite3")
encryption = Encryption(KeyRing({"k1": old_key}))
manager = MemoryManager(store=protect(store, encryption=encryption), user_id="ada")
manager.add_turn("c1", "My card PIN is 4321", "Noted.")
manager.set_fact("city", "London")
print(manager.get_context("c1")[0]["content"])  # My card PIN is 4321

# What the table holds: envelopes only, no plaintext.
with sqlite3.connect("data/memory.sqlite3") as raw:
    stored = [row[0] for row in raw.execute("SELECT content FROM memory_entries")]
assert not any("4321" in text or "London" in text for text in stored)
print(stored[0][:40])  # {"$enc": {"v": 1, "kid": "k1", "alg": "A

# Rotation: the new key first, the old one kept until every row moved.
both = Encryption(KeyRing({"k2": new_key, "k1": old_key}))
report = rotate_keys(store, both, batch_size=100)
print(report.rotated, report.key_id)  # 4 k2 (the turn, the head, the index, the fact)

only_new = MemoryManager(
    store=protect(store, encryption=Encryption(KeyRing({"k2": new_key}))), user_id="ada"
)
print(only_new.get_fact("city"))  # London
store.close()
