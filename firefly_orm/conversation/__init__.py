"""Token-budgeted conversation memory persisted through any :class:`~firefly_orm.store.MemoryStore`.

A new :class:`ConversationMemory` over the same store resumes every
conversation.  Where things are:

* :mod:`~firefly_orm.conversation._model`: :class:`ConversationTurn`, the
  summarizer types, the input checks;
* :mod:`~firefly_orm.conversation._plan`: the pure planner (:func:`plan_append`,
  :func:`history_suffix`, :func:`summary_input`);
* :mod:`~firefly_orm.conversation._rows`: namespaces, keys and the head, turn and
  index row codecs (how a conversation is laid out in a store);
* :mod:`~firefly_orm.conversation._codec`: the portable form of raw messages
  (pydantic-ai ``ModelMessage`` lists or JSON);
* :mod:`~firefly_orm.conversation._ops`: the transactions and operations
  (adding a turn is one unit of work; the summarizer runs outside it);
* :mod:`~firefly_orm.conversation._transfer`: export and import (and the
  planner-statistics refresh after a large import);
* :mod:`~firefly_orm.conversation._repair`: checking a conversation's head
  against its stored turns and rebuilding it from them (:class:`Inconsistency`);
* :mod:`~firefly_orm.conversation._search`: searching past conversations by text
  and by meaning (:class:`TurnMatch`, :meth:`ConversationMemory.search_conversations`);
* :mod:`~firefly_orm.conversation._listing` / :mod:`~firefly_orm.conversation._usage`:
  titles, tags, the keyset list of a user's conversations (:class:`ConversationInfo`,
  :class:`ConversationPage`) and usage totals (:class:`UsageTotal`);
* :mod:`~firefly_orm.conversation._branch` / :mod:`~firefly_orm.conversation._rewind`:
  branching at a turn (:class:`BranchLink`, the tree), rewinding and popping;
* :mod:`~firefly_orm.conversation._memory`: the :class:`ConversationMemory` class.
"""

# Besides ``__all__``, the names importable from here before the package split
# stay importable (``X as X`` marks them re-exported): the storage layout, the
# raw-message codec, and the private row builders that bench/ours.py uses.
from firefly_orm.conversation._branch import BranchLink
from firefly_orm.conversation._codec import decode_raw_messages as decode_raw_messages
from firefly_orm.conversation._codec import encode_raw_messages as encode_raw_messages
from firefly_orm.conversation._listing import ConversationInfo, ConversationPage
from firefly_orm.conversation._memory import ConversationMemory
from firefly_orm.conversation._model import (
    SUMMARY_TURN_ID,
    SUMMARY_TURN_PROMPT,
    AsyncSummarizer,
    ConversationTurn,
    Summarizer,
)
from firefly_orm.conversation._plan import (
    AppendPlan,
    HeadState,
    Limits,
    history_suffix,
    plan_append,
    summary_input,
)
from firefly_orm.conversation._plan import OldestTurns as OldestTurns
from firefly_orm.conversation._policies import SummarizeEvent, TrimEvent
from firefly_orm.conversation._repair import Inconsistency
from firefly_orm.conversation._rows import HEAD_KEY as HEAD_KEY
from firefly_orm.conversation._rows import INDEX_NAMESPACE as INDEX_NAMESPACE
from firefly_orm.conversation._rows import MAX_TURN_ID as MAX_TURN_ID
from firefly_orm.conversation._rows import TURN_KEY_PREFIX as TURN_KEY_PREFIX
from firefly_orm.conversation._rows import archive_namespace as archive_namespace
from firefly_orm.conversation._rows import conversation_namespace as conversation_namespace
from firefly_orm.conversation._rows import head_entry as _head_entry  # noqa: F401
from firefly_orm.conversation._rows import index_entry as _index_entry  # noqa: F401
from firefly_orm.conversation._rows import turn_entry as _turn_entry  # noqa: F401
from firefly_orm.conversation._rows import turn_key as turn_key
from firefly_orm.conversation._search import SEARCH_MODES, SearchMode, TurnMatch
from firefly_orm.conversation._usage import UsageTotal

__all__ = [
    "AppendPlan",
    "AsyncSummarizer",
    "BranchLink",
    "ConversationInfo",
    "ConversationMemory",
    "ConversationPage",
    "ConversationTurn",
    "HeadState",
    "Limits",
    "SummarizeEvent",
    "TrimEvent",
    "TurnMatch",
    "UsageTotal",
    "Inconsistency",
    "SEARCH_MODES",
    "SearchMode",
    "Summarizer",
    "SUMMARY_TURN_ID",
    "SUMMARY_TURN_PROMPT",
    "history_suffix",
    "plan_append",
    "summary_input",
]
