from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder

from firefly_orm import ConversationMemory, SQLiteStore
from firefly_orm.integrations.langchain import FireflyChatMessageHistory

prompt = ChatPromptTemplate.from_messages(
    [("system", "Be brief."), MessagesPlaceholder("history"), ("human", "{question}")]
)
model = FakeListChatModel(responses=["Hello Ada.", "Ada."])  # stands in for a real chat model


def turn(question: str) -> str:
    store = SQLiteStore("langchain.sqlite3")  # any store: PostgreSQL, MongoDB, Redis...
    try:  # a new store and memory each time: what a restarted process has
        memory = ConversationMemory(store=store, max_tokens=8000, user_id="ada")
        history = FireflyChatMessageHistory("support-42", memory)  # one id, one conversation
        sent = prompt.invoke({"history": history.messages, "question": question}).to_messages()
        answer = model.invoke(sent)
        history.add_messages([sent[-1], answer])  # the question and the answer: one turn
        return f"{answer.content} (the model was sent {len(sent)} messages)"
    finally:
        store.close()


print(turn("My name is Ada."))  # Hello Ada. (the model was sent 2 messages)
print(turn("What is my name?"))  # Ada. (the model was sent 4 messages)
