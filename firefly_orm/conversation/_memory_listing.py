"""Conversation metadata, the list of a user's conversations, usage totals (operation methods).

:class:`ConversationListing` validates the arguments and runs
:mod:`firefly_orm.conversation._listing` / :mod:`~firefly_orm.conversation._usage`
in one transaction each; :class:`~firefly_orm.conversation.ConversationMemory`
derives the public forms (sync and async) from these methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from firefly_orm.bridges._steps import Operation, Transaction, retrying
from firefly_orm.conversation._append import summarize
from firefly_orm.conversation._listing import (
    MAX_TITLE_LENGTH,
    ConversationInfo,
    ConversationPage,
    HeadReader,
    ListRequest,
    MetadataChange,
    change_metadata,
    check_tags,
    check_title,
    list_page,
    read_info,
)
from firefly_orm.conversation._model import ConversationTurn, Summarizer, check_conversation_id
from firefly_orm.conversation._owner import OwnedLayer
from firefly_orm.conversation._rows import TURN_KEY_PREFIX, conversation_namespace, turn_from_entry
from firefly_orm.conversation._usage import TurnReader, UsageRequest, UsageTotal, read_usage
from firefly_orm.errors import ConversationNotFoundError, EntryValidationError
from firefly_orm.protocols import RunsDatabaseCalls, UnitOfWork, declares

__all__ = ["ConversationListing", "title_from_text"]

#: How many of the first turns a generated title is made from.
TITLE_TURNS = 4


def title_from_text(text: str) -> str:
    """A title from a model's answer (or a prompt): its first non-blank line, unquoted, cut."""
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    line = line.strip("\"'“”` ").removeprefix("Title:").strip()
    return line[:MAX_TITLE_LENGTH] or "Untitled"


class ConversationListing(OwnedLayer):
    """Metadata, listing and usage operations (a base of ``ConversationMemory``).

    Bound to a user, a conversation that is missing or another user's raises
    :class:`~firefly_orm.errors.ConversationNotFoundError`, and a ``user_id``
    naming someone else is refused.
    """

    _summarizer: Summarizer | None

    def _conversation_info(self, conversation_id: str) -> Operation[ConversationInfo]:
        """A conversation's title, tags, archived flag, times and counts.

        Raises:
            ConversationNotFoundError: No such conversation (bound: or another user's).
        """
        conversation_id = check_conversation_id(conversation_id)
        step = Transaction.read(read_info, conversation_id)
        info = yield from self._as_owner(conversation_id, step)
        if info is None:
            raise ConversationNotFoundError(conversation_id)
        return info

    def _update_conversation(
        self,
        conversation_id: str,
        *,
        title: str | None = None,
        tags: Sequence[str] | None = None,
        archived: bool | None = None,
        clear_title: bool = False,
    ) -> Operation[ConversationInfo]:
        """Set a conversation's ``title``, ``tags`` (replaced as a whole) or ``archived`` flag.

        Arguments left at ``None`` keep their value; ``clear_title=True``
        removes the title.  One unit of work at the head's version (a
        concurrent :meth:`add_turn` is retried, never lost); the conversation's
        ``updated_at`` moves.

        Raises:
            EntryValidationError: A bad title or tag (nothing written).
            ConversationNotFoundError: No such conversation (bound: or another user's).
        """
        conversation_id = check_conversation_id(conversation_id)
        if archived is not None and not isinstance(archived, bool):
            raise EntryValidationError("archived", "must be True, False or None (keep)")
        change = MetadataChange(
            title=None if title is None else check_title(title),
            tags=None if tags is None else check_tags(tags),
            archived=archived,
            clear_title=bool(clear_title),
        )
        step = Transaction.write(change_metadata, conversation_id, change)
        return (yield from self._as_owner(conversation_id, retrying(step)))

    def _generate_title(
        self, conversation_id: str, *, titler: Summarizer | None = None
    ) -> Operation[str]:
        """Make a title from the first turns and store it; return it.

        ``titler`` (default: this memory's summarizer) is called with the first
        turns, like a summarizer, outside any transaction; the first line of
        what it returns becomes the title (see
        :func:`~firefly_orm.summarization.create_llm_summarizer` with a
        ``prompt_template`` asking for a title).  Without either, the first
        prompt's first line is the title.

        Raises:
            ConversationNotFoundError: No such conversation (bound: or another user's).
        """
        conversation_id = check_conversation_id(conversation_id)
        step = Transaction.read(_first_turns, conversation_id, TITLE_TURNS)
        turns = yield from self._as_owner(conversation_id, step)
        if not turns:
            raise ConversationNotFoundError(conversation_id)
        model = titler if titler is not None else self._summarizer
        if model is None:
            title = title_from_text(turns[0].user_prompt)
        else:
            title = title_from_text((yield from summarize(model, turns)))
        yield from self._update_conversation(conversation_id, title=title)
        return title

    def _list_conversations(
        self,
        user_id: str | None = None,
        *,
        tags: Sequence[str] | None = None,
        archived: bool | None = False,
        updated_after: datetime | None = None,
        order: str = "updated_desc",
        limit: int = 20,
        cursor: str | None = None,
    ) -> Operation[ConversationPage]:
        """One page of a user's conversations, with their titles, tags, times and counts.

        ``user_id``: whose (default: the user this memory is bound to).
        ``order``: ``"updated_desc"`` (the default: most recently changed
        first), ``"updated_asc"``, ``"created_desc"`` or ``"created_asc"``.
        ``archived``: ``False`` (the default) lists the others, ``True`` the
        archived ones, ``None`` both.  ``tags``: only conversations with every
        one of them.  ``updated_after``: only those changed since.  Pass the
        page's ``next_cursor`` as ``cursor`` for the next page (keyset paging:
        a page costs the same at any depth; on SQLite, PostgreSQL and MongoDB
        it is one query over an index of the heads, migration 0010 on SQL).

        Raises:
            EntryValidationError: A bad argument or cursor, or no user.
        """
        owner = self._acting_user(user_id)
        if owner is None:
            raise EntryValidationError("user_id", "name the user whose conversations to list")
        request = ListRequest.build(
            owner,
            order=order,
            limit=limit,
            archived=archived,
            tags=tags,
            updated_after=updated_after,
            cursor=cursor,
        )
        return (yield from Transaction.read(list_page, request, self._head_reader(request)))

    def _head_reader(self, request: ListRequest) -> HeadReader | None:
        """MongoDB's indexed read of the heads when it serves ``request``, else ``None``."""
        store = self._store
        if not declares(store, RunsDatabaseCalls):
            return None
        from firefly_orm.conversation._listing_mongo import find_heads, serves

        if not serves(request):
            return None
        runner = cast(RunsDatabaseCalls, store)

        def read(request: ListRequest, archived: bool, limit: int) -> Any:
            return runner.run_database_call(find_heads, request, archived, limit)

        return read

    def _turn_reader(self) -> TurnReader | None:
        """MongoDB's indexed read of a user's turns (the usage totals), else ``None``."""
        store = self._store
        if not declares(store, RunsDatabaseCalls):
            return None
        from firefly_orm.conversation._listing_mongo import find_user_turns

        runner = cast(RunsDatabaseCalls, store)

        def read(request: UsageRequest) -> Any:
            return runner.run_database_call(
                find_user_turns, request.user_id, request.since, request.until
            )

        return read

    def _usage_totals(
        self,
        conversation_id: str | None = None,
        *,
        user_id: str | None = None,
        by: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> Operation[list[UsageTotal]]:
        """The turns' ``metadata["usage"]`` summed, from the stored turns (nothing else kept).

        Give ``conversation_id`` (that conversation's live and archived turns)
        or a ``user_id`` (every conversation of theirs; a bound memory: its
        user by default).  ``by``: ``None`` (one total), ``"conversation"``,
        ``"day"`` or ``"month"`` (UTC, by when each turn was stored); ``since``
        / ``until`` bound that time (``until`` excluded).  On SQLite and
        PostgreSQL one aggregate query over an index; on MongoDB one indexed
        ``find`` of the turns, summed in the process.

        Raises:
            EntryValidationError: A bad argument.
            ConversationNotFoundError: Bound, the conversation is another user's.
        """
        if conversation_id is not None:
            conversation_id = check_conversation_id(conversation_id)
            if user_id is not None:
                raise EntryValidationError("user_id", "give a conversation_id or a user_id")
            owner = None
        else:
            owner = self._acting_user(user_id)
        request = UsageRequest(conversation_id, owner, by, since, until)
        step = Transaction.read(read_usage, request, self._turn_reader())
        if conversation_id is None:
            return (yield from step)
        return (yield from self._as_owner(conversation_id, step))


def _first_turns(uow: UnitOfWork, conversation_id: str, count: int) -> list[ConversationTurn]:
    """Transaction: the first ``count`` retained turns (oldest first)."""
    rows = uow.entries.list(
        conversation_namespace(conversation_id), key_prefix=TURN_KEY_PREFIX, limit=count
    )
    return [turn_from_entry(row) for row in rows]
