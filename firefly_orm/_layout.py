"""How memory rows are laid out in a store: the facts both the layers and the stores need.

One home for the row layout (core floor: this module imports nothing of the
package).  A layer builds and reads its rows with these names; a store that
writes a layer's rows in its own dialect (the SQL one-statement append) spells
them from here too, so a store never imports a layer.

A conversation (see :mod:`firefly_orm.conversation._rows` for the row codecs):

* namespace ``conversation:<id>`` (:func:`conversation_namespace`): the head
  (key :data:`HEAD_KEY`, content keyed by the ``HEAD_*`` names below) and one row
  per turn (key :func:`turn_key`, ``turn:`` and the turn id as
  :data:`TURN_ID_DIGITS` digits; content holds :data:`TURN_ID_FIELD`);
  a branch also has a :data:`BRANCH_PARENT_KEY` row, and a conversation one
  :func:`branch_key` row per branch made from it;
* namespace ``conversation-archive:<id>`` (:func:`archive_namespace`): evicted
  turns kept with ``keep_evicted=True``, and turns dropped by a rewind (marked
  with :data:`REWOUND_FIELD`) until they are purged;
* namespace :data:`INDEX_NAMESPACE`: one row per conversation (key = the id);
* scoped state (conversation/_state.py): a conversation's own keys are rows
  ``state:<key>`` (:data:`STATE_KEY_PREFIX`) in its namespace, a user's in
  ``conversation-user-state:<user_id>`` (:func:`user_state_namespace`), the
  app-wide ones in :data:`APP_STATE_NAMESPACE`.

Working memory lives in ``working:<scope>`` and ``working-user:...`` namespaces,
artifacts in :data:`ARTIFACTS_NAMESPACE` and ``artifacts:...``;
:func:`layer_of_namespace` says which layer a namespace belongs to, so that a
layer with free namespaces (long-term memory) never writes into another's.

The eviction rule is written once: :func:`token_caps` (where token eviction
starts and where it stops) and :func:`within_caps` (whether totals need an
eviction, over numbers or SQL expressions alike).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ARCHIVE_NAMESPACE_PREFIX",
    "APP_STATE_NAMESPACE",
    "ARTIFACTS_NAMESPACE",
    "BRANCH_KEY_PREFIX",
    "BRANCH_PARENT_KEY",
    "CONVERSATION_NAMESPACE_PREFIX",
    "HEAD_CONVERSATION_ID",
    "HEAD_COUNTERS",
    "HEAD_KEY",
    "HEAD_NEXT_TURN_ID",
    "HEAD_SUMMARY",
    "HEAD_TOTAL_MESSAGES",
    "HEAD_TOTAL_TOKENS",
    "HEAD_TURN_COUNT",
    "HEAD_UPDATED_AT",
    "HEAD_LAST_TURN_AT",
    "HEAD_TITLE",
    "HEAD_TAGS",
    "HEAD_ARCHIVED",
    "LISTING_INDEXES",
    "TURN_COPY_OF",
    "INDEX_NAMESPACE",
    "ITEM_DEFAULT_KIND",
    "ITEM_KIND_FIELD",
    "ITEM_TAGS_FIELD",
    "MAX_TURN_ID",
    "NO_MESSAGE_CAP",
    "NO_TOKEN_CAP",
    "REWOUND_FIELD",
    "STATE_KEY_PREFIX",
    "SUMMARY_TURN_ID",
    "TURN_ID_DIGITS",
    "TURN_ID_FIELD",
    "TURN_KEY_PREFIX",
    "USER_STATE_NAMESPACE_PREFIX",
    "USER_WORKING_NAMESPACE_PREFIX",
    "WORKING_NAMESPACE_PREFIX",
    "archive_namespace",
    "branch_key",
    "conversation_namespace",
    "head_time",
    "layer_of_namespace",
    "token_caps",
    "turn_key",
    "user_state_namespace",
    "within_caps",
]

#: Namespace prefix of a conversation's head and turns (``conversation:<id>``).
CONVERSATION_NAMESPACE_PREFIX = "conversation:"
#: Namespace prefix of a conversation's archived (evicted) turns.
ARCHIVE_NAMESPACE_PREFIX = "conversation-archive:"
#: Namespace holding one index row per conversation.
INDEX_NAMESPACE = "conversation-index"
#: Key prefix of a state row (``state:<key>``): a conversation's own state in its
#: namespace, the app's in :data:`APP_STATE_NAMESPACE`, a user's in theirs.
STATE_KEY_PREFIX = "state:"
#: Namespace of the app-wide conversation state (``app:`` keys), owned by nobody.
APP_STATE_NAMESPACE = "conversation-app-state"
#: Namespace prefix of a user's conversation state (``user:`` keys), rows owned by the user.
USER_STATE_NAMESPACE_PREFIX = "conversation-user-state:"
#: Namespace prefix of a shared working-memory scope (``working:<scope_id>``).
WORKING_NAMESPACE_PREFIX = "working:"
#: Namespace prefix of a user's own working-memory scope.
USER_WORKING_NAMESPACE_PREFIX = "working-user:"
#: The artifact registry's namespace; a workspace's namespaces are ``artifacts:...``.
ARTIFACTS_NAMESPACE = "artifacts"
#: A long-term item's content field holding its kind (``"semantic"`` or ``"episodic"``).
ITEM_KIND_FIELD = "kind"
#: The kind of a long-term item whose content names none.
ITEM_DEFAULT_KIND = "semantic"
#: A long-term item's content field holding its list of tags.
ITEM_TAGS_FIELD = "tags"
#: Key of a conversation's head row.
HEAD_KEY = "head"
#: Key prefix of turn rows (followed by the turn id as :data:`TURN_ID_DIGITS` digits).
TURN_KEY_PREFIX = "turn:"
#: How many digits a turn key holds (zero-padded, so keys sort by turn id).
TURN_ID_DIGITS = 12
#: Largest turn id (the key holds :data:`TURN_ID_DIGITS` digits).
MAX_TURN_ID = 10**TURN_ID_DIGITS - 1
#: ``turn_id`` of the pseudo-turn that carries a conversation's summary (never stored as a row).
SUMMARY_TURN_ID = -1

#: The head's ``content`` keys (heads written by earlier releases have no total_messages).
HEAD_CONVERSATION_ID = "conversation_id"
HEAD_NEXT_TURN_ID = "next_turn_id"
HEAD_TOTAL_TOKENS = "total_tokens"
HEAD_TURN_COUNT = "turn_count"
HEAD_SUMMARY = "summary"
HEAD_TOTAL_MESSAGES = "total_messages"
#: The head's listing fields (conversation/_listing.py): when it last changed and when its
#: last turn came (:func:`head_time` strings, so they sort as text), its title, tags and
#: archived flag.  Heads written by earlier releases have none of them.
HEAD_UPDATED_AT = "updated_at"
HEAD_LAST_TURN_AT = "last_turn_at"
HEAD_TITLE = "title"
HEAD_TAGS = "tags"
HEAD_ARCHIVED = "archived"
#: The row metadata key of a turn copied from another conversation (a branch, a copy):
#: its value is the source's id.  Usage totals count the original only.
TURN_COPY_OF = "copy_of"
#: The partial indexes over conversation heads that served a user's conversation list
#: at migration 0009 (expression indexes, not in the SQLAlchemy model; 0010 replaces
#: them with indexes of the model over plain columns).
LISTING_INDEXES = ("ix_memory_entries_conv_updated", "ix_memory_entries_conv_created")
#: The head's numbers (non-negative integers); a turn takes ``next_turn_id`` and bumps each.
HEAD_COUNTERS = (HEAD_NEXT_TURN_ID, HEAD_TOTAL_TOKENS, HEAD_TURN_COUNT, HEAD_TOTAL_MESSAGES)
#: The turn id's key in a turn row's ``content``.
TURN_ID_FIELD = "turn_id"
#: Key of the row in a branch's namespace naming the conversation it was branched
#: from (content: ``parent_id``, ``at_turn``, ``created_at``).
BRANCH_PARENT_KEY = "branch-parent"
#: Key prefix of the rows in a conversation's namespace naming its branches
#: (:func:`branch_key`; content: ``conversation_id``, ``at_turn``, ``created_at``).
BRANCH_KEY_PREFIX = "branch:"
#: Content field of an archived turn row that a rewind moved there (its ISO time);
#: evicted turns have none.
REWOUND_FIELD = "rewound_at"
#: The message cap of a conversation without a message limit (never reached).
NO_MESSAGE_CAP = 2**62
#: The token cap of a conversation without a token limit nor a threshold (never reached).
NO_TOKEN_CAP = 2**62


def conversation_namespace(conversation_id: str) -> str:
    """Namespace of a conversation's head and turns."""
    return f"{CONVERSATION_NAMESPACE_PREFIX}{conversation_id}"


def archive_namespace(conversation_id: str) -> str:
    """Namespace of a conversation's archived (evicted) turns."""
    return f"{ARCHIVE_NAMESPACE_PREFIX}{conversation_id}"


def user_state_namespace(user_id: str) -> str:
    """Namespace of a user's conversation state (the ``user:`` keys)."""
    return f"{USER_STATE_NAMESPACE_PREFIX}{user_id}"


def head_time(moment: Any) -> str:
    """A UTC ``datetime`` as the head stores it: fixed width, so text order is time order."""
    return str(moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))


def branch_key(branch_id: str) -> str:
    """Key of the row, in its parent's namespace, naming the branch ``branch_id``."""
    return f"{BRANCH_KEY_PREFIX}{branch_id}"


def layer_of_namespace(namespace: str) -> str | None:
    """The layer whose rows ``namespace`` holds (``"conversation"``, ``"working"``,
    ``"artifacts"``), or ``None`` for a namespace of no layer's."""
    if namespace in (INDEX_NAMESPACE, APP_STATE_NAMESPACE) or namespace.startswith(
        (CONVERSATION_NAMESPACE_PREFIX, ARCHIVE_NAMESPACE_PREFIX, USER_STATE_NAMESPACE_PREFIX)
    ):
        return "conversation"
    if namespace.startswith((WORKING_NAMESPACE_PREFIX, USER_WORKING_NAMESPACE_PREFIX)):
        return "working"
    if namespace == ARTIFACTS_NAMESPACE or namespace.startswith(f"{ARTIFACTS_NAMESPACE}:"):
        return "artifacts"
    return None


def turn_key(turn_id: int) -> str:
    """Key of the row of turn ``turn_id`` (zero-padded so keys sort by id)."""
    return f"{TURN_KEY_PREFIX}{turn_id:0{TURN_ID_DIGITS}d}"


def token_caps(max_tokens: int | None, summarize_threshold: int | None) -> tuple[int, int]:
    """The token eviction rule: ``(trigger, target)``.

    When a conversation's summed token estimates (its new turn in) exceed
    ``trigger``, its oldest turns are evicted (and summarised) until the total
    is at most ``target`` (the newest turn and pinned turns always stay):

    * with a threshold (``summarize_threshold`` of 1 or more) it is the trigger,
      whatever ``max_tokens`` is, and eviction goes down to the threshold, or to
      ``max_tokens`` when that is lower (a threshold above ``max_tokens``
      evicts in batches);
    * without one (``None`` or ``0``), ``max_tokens`` is both;
    * with neither (``max_tokens=None``), tokens never evict
      (:data:`NO_TOKEN_CAP`).
    """
    threshold = summarize_threshold or None
    caps = [cap for cap in (max_tokens, threshold) if cap is not None]
    if not caps:
        return NO_TOKEN_CAP, NO_TOKEN_CAP
    trigger = threshold if threshold is not None else caps[0]
    return trigger, min(caps)


def within_caps(
    total_tokens: Any, total_messages: Any, token_cap: Any, message_cap: Any
) -> tuple[Any, Any]:
    """The eviction test: a conversation at these totals (its new turn in) needs no
    eviction when both hold.

    ``token_cap`` is the trigger of :func:`token_caps` (the largest token total
    that evicts nothing), ``message_cap`` the message limit
    (:data:`NO_MESSAGE_CAP`: none).  Works on numbers (``all(...)``) and on SQL
    expressions (``and_(*...)``) alike.
    """
    return (total_tokens <= token_cap, total_messages <= message_cap)
