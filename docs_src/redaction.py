import sqlite3

from firefly_orm import MemoryManager, SQLiteStore
from firefly_orm.privacy import DEFAULT_DETECTORS, Redactor, RegexDetector, protect

# The built-in detectors (e-mail, phone, card, IBAN) and one of your own.
employee_id = RegexDetector("employee_id", r"\bEMP-\d{6}\b")
redactor = Redactor((*DEFAULT_DETECTORS, employee_id))

store = SQLiteStore("data/memory.sqlite3")
manager = MemoryManager(store=protect(store, redaction=redactor), user_id="ada")
manager.add_turn("c1", "I am EMP-123456, mail me at ada@example.org", "Noted.")
manager.set_fact("payee", {"iban": "GB82 WEST 1234 5698 7654 32", "name": "Grace"})

print(manager.get_context("c1")[0]["content"])
# I am [REDACTED:employee_id], mail me at [REDACTED:email]
print(manager.get_fact("payee"))  # {'iban': '[REDACTED:iban]', 'name': 'Grace'}

# The table never saw the values; each row records what was replaced.
with sqlite3.connect("data/memory.sqlite3") as raw:
    rows = list(raw.execute("SELECT content, metadata FROM memory_entries"))
assert not any("ada@example.org" in content or "WEST" in content for content, _ in rows)
print(next(meta for _, meta in rows if "iban" in meta))
# {"scope_id": "default", "redactions": [{"field": "content", "kind": "iban", "path": "$.iban", ...
store.close()

# The redactor on its own: a new value and the record, never the value.
content, record = Redactor().redact({"text": "call +44 20 7946 0958"})
print(content, record)
# {'text': 'call [REDACTED:phone]'} [Redaction(kind='phone', path='$.text', count=1)]
