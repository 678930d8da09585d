"""The help desk's pydantic-ai agent, and an offline model for the demo and the tests."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel

__all__ = ["TicketContext", "build_agent", "demo_model", "user_prompts"]

INSTRUCTIONS = "You answer support tickets. Be brief; refer back to what the customer said."


@dataclass(frozen=True)
class TicketContext:
    """What the agent knows about the ticket it answers (its ``deps``)."""

    ticket_id: int
    customer: str
    subject: str


def build_agent(model: Model) -> Agent[TicketContext, str]:
    """The help desk agent on ``model``.

    It uses ``instructions`` (sent on every run), not a system prompt: a system
    prompt would live only in the first stored turn and vanish once the token
    budget evicts it.
    """
    agent = Agent(model, deps_type=TicketContext, output_type=str, instructions=INSTRUCTIONS)

    @agent.instructions
    def about_the_ticket(ctx: RunContext[TicketContext]) -> str:
        ticket = ctx.deps
        return f"Ticket #{ticket.ticket_id} from {ticket.customer}: {ticket.subject}"

    return agent


def user_prompts(messages: list[ModelMessage]) -> list[str]:
    """The text prompts of the user in ``messages``, oldest first."""
    return [
        part.content
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart) and isinstance(part.content, str)
    ]


async def _help_desk_reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Answer from the history the agent was given (which came from memory)."""
    prompts = user_prompts(messages)
    latest, earlier = prompts[-1], prompts[:-1]
    if not earlier:
        text = f"Thanks, I've noted {latest!r}. What have you tried so far?"
    else:
        text = (
            f"Noted: {latest!r}. I remember {len(earlier)} earlier message(s) on this "
            f"ticket; the first was {earlier[0]!r}."
        )
    return ModelResponse(parts=[TextPart(text)])


def demo_model() -> FunctionModel:
    """An offline model whose answers show what history it received (no network)."""
    return FunctionModel(_help_desk_reply, model_name="help-desk-demo")
