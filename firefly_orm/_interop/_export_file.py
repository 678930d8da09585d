"""The file format of ``firefly-orm export`` / ``import``: writing and checking it.

An export file is UTF-8 JSON in one of three shapes: one conversation (what
:meth:`~firefly_orm.ConversationMemory.export_conversation` returns), a list of
them, or a *bundle*::

    {"format_version": 2,
     "conversations": [...],
     "long_term": [{"namespace": "long-term", "language": null, "items": [...]}]}

Format versions: **1** holds conversations only; **4** adds ``state``, the
scoped conversation state that belongs to no one conversation:
``{"app": {key: value}, "users": {user_id: {key: value}}}`` (keys without their
``app:`` / ``user:`` prefix; what
:func:`~firefly_orm.conversation._state.read_shared_state` reads: the app's
keys and those of every user owning a conversation; an import sets them and
keeps the keys it does not name); **3** adds ``knowledge``,
one user's knowledge graph per entry (entities, facts with their validity
intervals and evidence, history: the shape of
:meth:`KnowledgeGraph.export_user <firefly_orm.knowledge.KnowledgeGraph.export_user>`);
**2** adds the ``long_term``
section, one entry per namespace of long-term items, each item in the shape
:meth:`MemoryItem.to_dict <firefly_orm.long_term.MemoryItem.to_dict>` writes,
and ``language`` the text-search configuration the items are indexed with
(``null``: ``simple``).  ``export`` writes the lowest version that holds what
it exports (version 1 when there is no ``long_term`` section, 3 only with graphs,
4 only with shared state), so files
without long-term items stay readable by earlier releases; ``import`` reads
both.  A conversation object's optional ``title``, ``tags`` and ``archived``
(written only when set) and its ``state`` (its own scoped-state keys, written only
when it has some) need no new version: the bundle's version names its
sections, and a lone conversation or a list has none.  Reading checks the
whole document's shape before anything is imported; the items themselves are
checked by
:meth:`LongTermMemory.import_items <firefly_orm.long_term.LongTermMemory.import_items>`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from firefly_orm.conversation._state import check_shared_state
from firefly_orm.entry import validate_namespace, validate_search_language
from firefly_orm.entry._json import JSONInputError, load_untrusted_json
from firefly_orm.errors import EntryValidationError
from firefly_orm.knowledge._transfer import graph_from_json

__all__ = [
    "BUNDLE_KEYS",
    "CONVERSATION_KEYS",
    "EXPORT_FORMAT_VERSION",
    "KNOWLEDGE_FORMAT_VERSION",
    "LONG_TERM_FORMAT_VERSION",
    "LONG_TERM_KEYS",
    "STATE_FORMAT_VERSION",
    "ImportDocument",
    "LongTermSection",
    "conversations_in",
    "decode_export_file",
    "export_document",
    "read_import_document",
]

#: The newest version of the export bundle (what ``import`` reads up to).
EXPORT_FORMAT_VERSION = 4
#: The first version with a ``long_term`` section.
LONG_TERM_FORMAT_VERSION = 2
#: The first version with a ``knowledge`` section (users' knowledge graphs).
KNOWLEDGE_FORMAT_VERSION = 3
#: The first version with a ``state`` section (the app's and the users' scoped state).
STATE_FORMAT_VERSION = 4

#: Keys of one exported conversation (what ``export_conversation`` writes): ``branch_of``
#: (a branch's parent, not restored), ``title``, ``tags`` and ``archived`` (the listing
#: fields, written only when set) and ``state`` (the conversation's own scoped state,
#: written only when it has keys) are optional additions in every format version.
CONVERSATION_KEYS = frozenset(
    {"conversation_id", "turns", "summary", "total_tokens", "branch_of"}
    | {"title", "tags", "archived"}
    | {"state"}
)
#: Keys of an export bundle, per format version.
_BUNDLE_KEYS_BY_VERSION = {
    1: frozenset({"format_version", "conversations"}),
    LONG_TERM_FORMAT_VERSION: frozenset({"format_version", "conversations", "long_term"}),
    KNOWLEDGE_FORMAT_VERSION: frozenset(
        {"format_version", "conversations", "long_term", "knowledge"}
    ),
    STATE_FORMAT_VERSION: frozenset(
        {"format_version", "conversations", "long_term", "knowledge", "state"}
    ),
}
#: Keys of an export bundle (any version): a JSON object with one of them is a bundle.
BUNDLE_KEYS = _BUNDLE_KEYS_BY_VERSION[EXPORT_FORMAT_VERSION]
#: Keys of one namespace of the ``long_term`` section.
LONG_TERM_KEYS = frozenset({"namespace", "language", "items"})
#: Byte-order marks of encodings an export file is never written in.
FOREIGN_BOMS = {
    b"\x00\x00\xfe\xff": "UTF-32",
    b"\xff\xfe\x00\x00": "UTF-32",
    b"\xfe\xff": "UTF-16",
    b"\xff\xfe": "UTF-16",
}


@dataclass(frozen=True)
class LongTermSection:
    """The long-term items of one namespace, as an export file holds them.

    Attributes:
        namespace: The store namespace the items live in (and are imported into).
        items: The items, each a dict in the shape ``MemoryItem.to_dict`` writes
            (checked on import by ``LongTermMemory.import_items``).
        language: The text-search configuration the items are indexed with
            (``None``: ``simple``); an import indexes them with it again.
    """

    namespace: str
    items: list[Any]
    language: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form written to the file."""
        return {"namespace": self.namespace, "language": self.language, "items": self.items}


@dataclass(frozen=True)
class ImportDocument:
    """What an import file holds: its conversations and its long-term items (checked shapes)."""

    conversations: list[dict[str, Any]]
    long_term: list[LongTermSection] = field(default_factory=list)
    #: One user's knowledge graph each (checked; ``KnowledgeGraph.import_user`` writes one).
    knowledge: list[dict[str, Any]] = field(default_factory=list)
    #: The app's and the users' scoped state (checked), ``None`` when the file has none.
    state: dict[str, Any] | None = None

    @property
    def item_count(self) -> int:
        """How many long-term items the file holds, in every namespace."""
        return sum(len(section.items) for section in self.long_term)


def export_document(
    exported: list[dict[str, Any]],
    *,
    single: bool,
    long_term: Sequence[LongTermSection] | None = None,
    knowledge: Sequence[dict[str, Any]] | None = None,
    state: Mapping[str, Any] | None = None,
) -> Any:
    """What ``firefly-orm export`` writes: one conversation, or a versioned bundle.

    Args:
        exported: The exported conversations.
        single: Write a lone conversation as itself rather than as a bundle
            (only without ``long_term``).
        long_term: The long-term sections; ``None`` leaves the section out
            and writes format version 1 (an empty list writes an empty section,
            version 2).
        knowledge: Users' graphs (``KnowledgeGraph.export_user``); none or
            empty leaves the section out, else version 3.
        state: The app's and the users' scoped state (``read_shared_state``);
            none, or no keys at all, leaves the section out, else version 4.
    """
    if state and (state.get("app") or state.get("users")):
        return {
            "format_version": STATE_FORMAT_VERSION,
            "conversations": exported,
            "long_term": [section.to_dict() for section in long_term or ()],
            "knowledge": list(knowledge or ()),
            "state": dict(state),
        }
    if knowledge:
        return {
            "format_version": KNOWLEDGE_FORMAT_VERSION,
            "conversations": exported,
            "long_term": [section.to_dict() for section in long_term or ()],
            "knowledge": list(knowledge),
        }
    if long_term is None:
        if single and len(exported) == 1:
            return exported[0]
        return {"format_version": 1, "conversations": exported}
    return {
        "format_version": LONG_TERM_FORMAT_VERSION,
        "conversations": exported,
        "long_term": [section.to_dict() for section in long_term],
    }


def decode_export_file(raw: bytes) -> Any:
    """The JSON document of an export file's bytes, or ``ValueError`` saying why not.

    UTF-8 only (a UTF-8 byte-order mark is accepted, UTF-16/32 ones are named);
    read by :func:`~firefly_orm.entry._json.load_untrusted_json`: NaN/Infinity,
    integers of more than 4,300 digits and nesting deeper than 256 levels are
    refused, each with one line, before anything recursive runs.
    """
    for bom, encoding in FOREIGN_BOMS.items():
        if raw.startswith(bom):
            raise ValueError(f"it is {encoding}-encoded; export files are UTF-8")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"it is not UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        ) from None
    try:
        return load_untrusted_json(text)
    except JSONInputError as exc:  # not JSON, NaN/Infinity, too deep, integers too long
        raise ValueError(f"it {exc}") from None


def read_import_document(data: Any, override_id: str | None) -> ImportDocument:
    """The conversations and long-term items of an import document, shapes checked.

    ``data`` is a bundle (``{"format_version", "conversations"[, "long_term"]}``,
    see the module docstring), a list of conversations, or one conversation
    ``{"conversation_id", "turns", ...}``; each conversation has a list of
    ``turns`` and a ``conversation_id`` (unless ``override_id``).  Each
    ``long_term`` entry names a namespace (once), may name a ``language`` and
    has a list of ``items``.

    Raises:
        ValueError: What is wrong, and where (``long_term[1]: "items" must be a list``).
    """
    long_term: list[LongTermSection] = []
    knowledge: list[dict[str, Any]] = []
    state: dict[str, Any] | None = None
    if isinstance(data, dict) and not BUNDLE_KEYS.isdisjoint(data):
        version = data.get("format_version", EXPORT_FORMAT_VERSION)
        if (
            isinstance(version, bool)
            or not isinstance(version, int)
            or version not in _BUNDLE_KEYS_BY_VERSION
        ):
            raise ValueError(
                f"format_version {version!r} is not supported "
                f"(expected {' or '.join(map(str, _BUNDLE_KEYS_BY_VERSION))})"
            )
        unknown = sorted(set(data) - _BUNDLE_KEYS_BY_VERSION[version])
        if "state" in unknown:
            raise ValueError(
                f'"state" needs format_version {STATE_FORMAT_VERSION} (the file says {version})'
            )
        if "knowledge" in unknown:
            raise ValueError(
                f'"knowledge" needs format_version {KNOWLEDGE_FORMAT_VERSION} '
                f"(the file says {version})"
            )
        if unknown == ["long_term"]:
            raise ValueError(
                f'"long_term" needs format_version {LONG_TERM_FORMAT_VERSION} '
                f"(the file says {version})"
            )
        if unknown:
            raise ValueError(f"unexpected key(s) {', '.join(map(repr, unknown))} in the file")
        items = data.get("conversations")
        if not isinstance(items, list):
            raise ValueError(f'"conversations" must be a list, got {type(items).__name__}')
        if "long_term" in data:
            long_term = _long_term_sections(data["long_term"])
        if "knowledge" in data:
            knowledge = _knowledge_sections(data["knowledge"])
        if "state" in data:
            try:
                state = check_shared_state(data["state"])
            except EntryValidationError as exc:
                raise ValueError(str(exc)) from None
    elif isinstance(data, list):
        items = data
    elif isinstance(data, dict):
        items = [data]
    else:
        raise ValueError(f"expected a conversation object or a list, got {type(data).__name__}")
    for position, item in enumerate(items):
        where = f"conversations[{position}]"
        _check_object(item, where, "a conversation object", CONVERSATION_KEYS)
        if not isinstance(item.get("turns"), list):
            raise ValueError(f'{where}: "turns" must be a list')
        if not override_id and not item.get("conversation_id"):
            raise ValueError(f'{where}: no "conversation_id" (or pass --conversation-id)')
    return ImportDocument(items, long_term, knowledge, state)


def conversations_in(data: Any, override_id: str | None) -> list[dict[str, Any]]:
    """The conversations of an import document (:func:`read_import_document`)."""
    return read_import_document(data, override_id).conversations


def _check_object(value: Any, where: str, what: str, allowed: frozenset[str]) -> None:
    """Raise ``ValueError`` unless ``value`` is a dict whose keys are all in ``allowed``."""
    if not isinstance(value, dict):
        raise ValueError(f"{where}: must be {what}, got {type(value).__name__}")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise ValueError(f"{where}: unexpected key(s) {', '.join(map(repr, unknown))}")


def _long_term_sections(raw: Any) -> list[LongTermSection]:
    """The ``long_term`` section of a bundle, each namespace's shape checked."""
    if not isinstance(raw, list):
        raise ValueError(f'"long_term" must be a list, got {type(raw).__name__}')
    sections: list[LongTermSection] = []
    seen: dict[str, int] = {}
    for position, section in enumerate(raw):
        where = f"long_term[{position}]"
        _check_object(section, where, "an object", LONG_TERM_KEYS)
        try:
            namespace = validate_namespace(section.get("namespace"))
            language = section.get("language")
            if language is not None:
                language = validate_search_language(language, "language")
        except EntryValidationError as exc:
            raise ValueError(f"{where}: {exc}") from None
        if not isinstance(section.get("items"), list):
            raise ValueError(f'{where}: "items" must be a list')
        if namespace in seen:
            raise ValueError(
                f"{where}: namespace {namespace!r} is already long_term[{seen[namespace]}]"
            )
        seen[namespace] = position
        sections.append(LongTermSection(namespace, section["items"], language))
    return sections


def _knowledge_sections(raw: Any) -> list[dict[str, Any]]:
    """The ``knowledge`` section of a bundle: each user's graph checked, each user once."""
    if not isinstance(raw, list):
        raise ValueError(f'"knowledge" must be a list, got {type(raw).__name__}')
    seen: dict[str, int] = {}
    for position, graph in enumerate(raw):
        try:
            user_id, _ = graph_from_json(graph, f"knowledge[{position}]")
        except EntryValidationError as exc:
            raise ValueError(str(exc)) from None
        if user_id in seen:
            raise ValueError(
                f"knowledge[{position}]: user {user_id!r} is already knowledge[{seen[user_id]}]"
            )
        seen[user_id] = position
    return list(raw)
