"""Edit-and-branch with :class:`~firefly_orm.pydantic_ai.MemoryAgent` (issue 32), the recipe of
docs/guide/agents.md: ``memory_for(user).branch(cid, turn_id - 1)`` then a run with
``conversation_id=`` the branch.  The model (a pydantic-ai ``FunctionModel``, no
network) gets the turns before the edited one and the edit; the original conversation
is unchanged; the branch is the user's newest, so a run without an id continues it."""

from __future__ import annotations

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from firefly_orm.manager import MemoryManager
from firefly_orm.pydantic_ai import MemoryAgent


def _prompts(messages: list[ModelMessage]) -> list[str]:
    return [
        part.content
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart) and isinstance(part.content, str)
    ]


async def test_an_edited_message_resumes_the_run_on_a_branch() -> None:
    seen: list[list[str]] = []

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(_prompts(messages))
        return ModelResponse(parts=[TextPart(f"reply to {seen[-1][-1]}")])

    support = MemoryAgent(
        Agent(FunctionModel(reply), instructions="Be brief."),
        memory=MemoryManager(max_conversation_tokens=None),
    )
    first = await support.run("q0", user_id="ada")
    cid = first.conversation_id
    for text in ("q1", "q2"):
        await support.run(text, conversation_id=cid, user_id="ada")

    memory = support.memory_for("ada")
    branch = await memory.async_branch(cid, 1 - 1)  # edit turn 1
    edited = await support.run("q1 edited", conversation_id=branch, user_id="ada")
    follow_up = await support.run("and then?", user_id="ada")

    assert seen[3] == ["q0", "q1 edited"]
    assert (edited.conversation_id, edited.turn_id) == (branch, 1)
    assert follow_up.conversation_id == branch
    assert seen[4] == ["q0", "q1 edited", "and then?"]
    turns = await memory.conversation.async_get_turns(cid)
    assert [t.user_prompt for t in turns] == ["q0", "q1", "q2"]
    link = await memory.async_parent_of(branch)
    assert link is not None and (link.parent_id, link.at_turn) == (cid, 0)
