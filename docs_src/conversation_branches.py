"""Branch, rewind, pop and copy: what a chat UI's edit, undo and duplicate need."""

from firefly_orm.conversation import ConversationMemory

memory = ConversationMemory(max_tokens=None)
chat = memory.new_conversation(user_id="ada")
for n in range(10):
    memory.add_turn(chat, f"question {n}", f"answer {n}")

# Edit the user message of turn 4: branch after turn 3, then add the edited turn.
edited = memory.branch(chat, 3)
memory.add_turn(edited, "question 4, reworded", "a better answer")
assert [t.turn_id for t in memory.get_turns(edited)] == [0, 1, 2, 3, 4]
assert memory.get_turns(chat)[-1].turn_id == 9  # the original is untouched
link = memory.parent_of(edited)
assert link is not None and (link.parent_id, link.at_turn) == (chat, 3)
assert [b.conversation_id for b in memory.branches(chat)] == [edited]
assert memory.owner_of(edited) == "ada"

# Rewind: the turns after 5 leave the conversation, kept until purged.
assert memory.rewind(chat, 5) == [6, 7, 8, 9]
assert [t.turn_id for t in memory.get_rewound_turns(chat)] == [6, 7, 8, 9]
assert memory.add_turn(chat, "next", "one").turn_id == 10  # ids are never reused
assert memory.purge_rewound(chat) == 4

# Undo the last turn (one unit of work: racing pops take different turns).
undone = memory.pop_turn(chat)
assert undone is not None and undone.turn_id == 10

# A copy has no parent: it is not part of the tree.
duplicate = memory.copy(chat)
assert memory.parent_of(duplicate) is None
assert memory.verify(chat) == memory.verify(edited) == []
