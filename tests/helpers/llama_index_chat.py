"""A LlamaIndex chat engine with its memory in firefly_orm (a mock LLM, no network).

:func:`chat` runs one turn of llama-index-core's ``SimpleChatEngine`` with
``MockLLM`` (which answers with the prompt it was given, so the answer shows
the history it was sent) and a ``ChatMemoryBuffer`` over a
:class:`~firefly_orm.integrations.llama_index.FireflyChatStore`.  Run as a
script (``python -m helpers.llama_index_chat STORE LOCATION SCHEMA KEY
MESSAGE``) it opens the store, runs one turn and prints the answer: what a
second process resuming the chat sends the model.
"""

from __future__ import annotations

import asyncio
import sys

from helpers.adapter_processes import open_store
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms import MockLLM
from llama_index.core.memory import ChatMemoryBuffer

from firefly_orm import ConversationMemory
from firefly_orm.integrations.llama_index import FireflyChatStore


async def chat(memory: ConversationMemory, key: str, message: str) -> str:
    """One turn of a chat engine whose memory is ``key``; the mock LLM's answer."""
    buffer = ChatMemoryBuffer.from_defaults(
        chat_store=FireflyChatStore(memory), chat_store_key=key, token_limit=2000
    )
    engine = SimpleChatEngine.from_defaults(llm=MockLLM(), memory=buffer)
    return str(await engine.achat(message))


async def main(kind: str, location: str, schema: str, key: str, message: str) -> None:
    """Resume ``key`` in this process, run one turn, print the answer."""
    store = open_store(kind, location, schema)
    try:
        print(await chat(ConversationMemory(store=store, max_tokens=None), key, message))
    finally:
        await store.async_close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
