from firefly_orm import MemoryManager, SQLiteStore

store = SQLiteStore("data/readme.sqlite3")
mgr = MemoryManager(store=store, max_conversation_tokens=4_000, summarize_threshold=4_000)

cid = mgr.new_conversation()
mgr.add_turn(
    cid,
    "What's the capital of France?",
    "Paris.",
    [
        {"role": "user", "content": "What's the capital of France?"},
        {"role": "assistant", "content": "Paris."},
    ],
)
mgr.set_fact("user_name", "Ada", importance=0.9)  # one atomic upsert

print(mgr.get_message_history(cid))  # the raw messages of the newest turns that fit the budget
print(mgr.get_working_context())  # "Working Memory:\n- user_name: Ada"

sub = mgr.fork(working_scope_id="researcher")  # same store and conversations, own facts
assert sub.get_fact("user_name") is None
store.close()

# A new process on the same database resumes everything:
reopened = SQLiteStore("data/readme.sqlite3")
again = MemoryManager(store=reopened)
assert again.conversation.get_turns(cid)[0].assistant_response == "Paris."
assert again.get_fact("user_name") == "Ada"
reopened.close()
