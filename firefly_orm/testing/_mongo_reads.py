"""Counting the documents a MongoDB server hands back (needs the ``mongo`` extra).

Attach :class:`DocumentsRead` to a client (``AsyncMongoClient(url,
event_listeners=[counter])``) and read ``counter.count``: every document a
``find`` or ``aggregate`` cursor returned, including its ``getMore`` batches.
The tests use it to prove that one ``add_turn`` reads a constant number of
documents; the bench reports it beside the timings.
"""

from __future__ import annotations

from pymongo import monitoring

__all__ = ["DocumentsRead"]


class DocumentsRead(monitoring.CommandListener):
    """A pymongo command listener counting the documents read so far."""

    def __init__(self) -> None:
        self.count = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        """Not counted: the reply says how many documents came back."""

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        """Not counted: a failed command returned no documents."""

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        """Add the documents of a ``find`` / ``aggregate`` / ``getMore`` reply."""
        if event.command_name in ("find", "aggregate", "getMore"):
            cursor = event.reply.get("cursor") or {}
            self.count += len(cursor.get("firstBatch", cursor.get("nextBatch", [])))
