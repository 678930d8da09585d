"""A LangChain chat with history on firefly_orm (a fake chat model, no network).

:func:`chat` runs one turn of ``RunnableWithMessageHistory`` over a prompt with
the history, a spy that keeps what the model is sent, and langchain-core's
``FakeListChatModel``; the history is a
:class:`~firefly_orm.integrations.langchain.FireflyChatMessageHistory`.  Run as a
script (``python -m helpers.langchain_history_chat STORE LOCATION SCHEMA SESSION
PROMPT ANSWER``) it opens the store, runs one turn and prints, as JSON, the
contents the model was sent: what a second process resuming the chat sees.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from helpers.adapter_processes import open_store
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.prompt_values import PromptValue
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory

from firefly_orm import ConversationMemory
from firefly_orm.integrations.langchain import FireflyChatMessageHistory


async def chat(memory: ConversationMemory, session_id: str, prompt: str, answer: str) -> list[Any]:
    """One turn of a chat with history; the contents the model was sent."""
    sent: list[Any] = []

    def spy(value: PromptValue) -> PromptValue:
        sent.extend(m.content for m in value.to_messages())
        return value

    template = ChatPromptTemplate.from_messages(
        [("system", "Be brief."), MessagesPlaceholder("history"), ("human", "{question}")]
    )
    chain = template | RunnableLambda(spy) | FakeListChatModel(responses=[answer])
    with_history = RunnableWithMessageHistory(
        chain,
        lambda sid: FireflyChatMessageHistory(sid, memory),
        input_messages_key="question",
        history_messages_key="history",
    )
    reply = await with_history.ainvoke(
        {"question": prompt}, config={"configurable": {"session_id": session_id}}
    )
    assert reply.content == answer
    return sent


async def main(
    kind: str, location: str, schema: str, session: str, prompt: str, answer: str
) -> None:
    """Resume ``session`` in this process, run one turn, print what the model was sent."""
    store = open_store(kind, location, schema)
    try:
        memory = ConversationMemory(store=store, max_tokens=None)
        print(json.dumps(await chat(memory, session, prompt, answer)))
    finally:
        await store.async_close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:7]))
