"""Token budgets: a summarize threshold, no token limit, and at least one message."""

from firefly_orm.conversation import ConversationMemory, ConversationTurn, TrimEvent


def summarize(turns: list[ConversationTurn]) -> str:
    # The previous summary comes first, as the answer of a turn numbered -1.
    return "; ".join(t.assistant_response if t.turn_id == -1 else t.user_prompt for t in turns)


events: list[TrimEvent] = []

# Above 25 tokens the oldest turns are evicted and summarised, down to 25,
# whatever max_tokens is (the rest of the budget is room for the summary).
memory = ConversationMemory(
    max_tokens=1_000, summarize_threshold=25, summarizer=summarize, on_trim=events.append
)
for n in range(4):
    memory.add_turn("chat", f"question {n} a b", f"answer {n} c d")  # 10 tokens each
assert [t.turn_id for t in memory.get_turns("chat")] == [2, 3]
assert memory.get_summary("chat") == "question 0 a b; question 1 a b"
assert events[0].reason == "summarize_threshold"

# No token limit (selectools' max_tokens=None): only the message window bounds it.
window = ConversationMemory(max_tokens=None, max_messages=20)
assert window.max_tokens is None

# A newest turn over the budget is still read back (or its newest messages),
# and the trim event says so.
small = ConversationMemory(max_tokens=5, on_trim=events.append)
raw = [{"role": "user", "content": "paste " * 50}, {"role": "assistant", "content": "ok"}]
small.add_turn("chat", "paste " * 50, "ok", raw)
assert small.get_message_history("chat") == raw
assert events[-1].newest_over_budget
