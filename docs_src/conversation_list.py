"""A chat list: titles, tags, archived chats, keyset pages and usage totals."""

from datetime import UTC, datetime, timedelta

from firefly_orm.conversation import ConversationMemory
from firefly_orm.sql import SQLiteStore

store = SQLiteStore("data/chats.sqlite3")
store.initialize()
memory = ConversationMemory(store=store).for_user("ann")  # a request handler's view

for topic in ("Rome in May", "Tax return", "Birthday cake"):
    chat = memory.new_conversation()
    usage = {"requests": 1, "input_tokens": 120, "output_tokens": 80, "total_tokens": 200}
    memory.add_turn(chat, f"Help me with: {topic}", "Sure.", metadata={"usage": usage})
    memory.update_conversation(chat, title=topic, tags=["home"] if "T" in topic else [])

# Newest change first, two per page; pass next_cursor back for the next page.
page = memory.list_conversations(limit=2)
assert [chat.title for chat in page.items] == ["Birthday cake", "Tax return"]
page = memory.list_conversations(limit=2, cursor=page.next_cursor)
assert [chat.title for chat in page.items] == ["Rome in May"]
assert page.next_cursor is None  # the last page

tax = memory.list_conversations(tags=["home"]).items[0]
memory.update_conversation(tax.conversation_id, archived=True)  # out of the default list
assert len(memory.list_conversations().items) == 2
assert memory.list_conversations(archived=True).items[0].title == "Tax return"
since = datetime.now(UTC) - timedelta(days=1)
assert len(memory.list_conversations(updated_after=since, archived=None).items) == 3

# Usage, summed from the stored turns: per user, per conversation, per day or month.
[total] = memory.usage_totals()
assert (total.turns, total.total_tokens) == (3, 600)
for day in memory.usage_totals(by="day"):
    print(day.group, day.input_tokens, day.output_tokens)
store.close()
