"""The capability a :class:`~firefly_orm.pydantic_ai.MemoryAgent` run adds on a session-bound store.

:class:`ReleaseSession` ends the run's own transaction in the caller's session
(:class:`~firefly_orm.bridges._release.SessionHold`) while the run goes on:
after its tools ran (a tool that read or wrote memory through the session
began one), and, where no code of the app runs between the run's model
requests (``run``, ``run_sync``, the requests ``run_stream`` makes before it
streams), before each model request (dynamic instructions that read memory
began one).  Imported only with a pydantic-ai that has capabilities; with an
older one a run ends its read's transaction only (see
:func:`release_capabilities`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.capabilities import AbstractCapability, ValidatedToolArgs, WrapToolExecuteHandler
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.tools import RunContext, ToolDefinition

from firefly_orm.bridges._release import SessionHold

__all__ = ["ReleaseSession"]


@dataclass
class ReleaseSession(AbstractCapability[Any]):
    """Ends the run's transaction in the caller's session before the model is called again.

    Attributes:
        hold: The run's hold on the session (its transactions are the run's own).
        between_requests: Release before every model request too (``False``
            once the app's code may run between requests: ``iter``, the block
            of ``run_stream``).
    """

    hold: SessionHold
    between_requests: bool = True
    _tools: int = field(default=0, init=False, repr=False)
    _idle_before_tools: bool = field(default=False, init=False, repr=False)

    @classmethod
    def get_serialization_name(cls) -> str | None:
        """Not built from specs (it holds a live session)."""
        return None

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """End the run's transaction (when no app code ran since the run began)."""
        if self.between_requests:
            await self.hold.arelease()
        return request_context

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        """Run the tool; once the last running tool is done, end what the tools began.

        Only a transaction the tools began: one the session already had when
        they started (the app's, between the nodes of ``iter``) is left alone.
        """
        if self._tools == 0:
            self._idle_before_tools = self.hold.idle()
        self._tools += 1
        try:
            return await handler(args)
        finally:
            self._tools -= 1
            if self._tools == 0 and self._idle_before_tools:
                await self.hold.arelease()
