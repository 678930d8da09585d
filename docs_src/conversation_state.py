"""Scoped state: app-wide, per-user, per-conversation and temporary keys (ADK's scopes)."""

from firefly_orm.conversation import ConversationMemory

memory = ConversationMemory(max_tokens=None)
trip = memory.new_conversation(user_id="ada")

# Keys route by prefix: app: (every conversation), user: (every one of ada's),
# temp: (this call only), anything else (this conversation).
view = memory.update_state(
    trip,
    {"city": "Rome", "user:language": "it", "app:model": "v2", "temp:draft": "..."},
)
assert view["temp:draft"] == "..."  # returned by this call, never stored

# A turn and its state change commit together, or not at all.
memory.add_turn(trip, "Book a hotel", "Booked.", state_delta={"hotel": "booked"})
assert memory.get_state(trip) == {
    "city": "Rome",
    "hotel": "booked",
    "user:language": "it",
    "app:model": "v2",
}

# Another conversation of ada's sees her user: keys and the app's, not trip's own.
other = memory.new_conversation(user_id="ada")
assert memory.get_state(other) == {"user:language": "it", "app:model": "v2"}

# Remove keys; erase_user forgets ada's user: and conversation state (app: stays).
memory.update_state(trip, {}, remove=["hotel"])
memory.erase_user("ada")
assert memory.get_state(trip) == {"app:model": "v2"}
