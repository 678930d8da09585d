"""create_llm_summarizer on pydantic-ai test models (no network)."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import threading
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from firefly_orm.conversation import ConversationMemory, ConversationTurn
from firefly_orm.errors import MissingExtraError
from firefly_orm.summarization import (
    FALLBACK_SUMMARY,
    SUMMARY_MODEL_ENV,
    LLMSummarizer,
    create_llm_summarizer,
    fallback_summary,
    truncate_to_tokens,
)
from firefly_orm.tokens import TokenEstimator


def turn(i: int, prompt: str, response: str) -> ConversationTurn:
    return ConversationTurn(turn_id=i, user_prompt=prompt, assistant_response=response)


TURNS = [
    turn(0, "My name is Ada.", "Nice to meet you, Ada. How can I help?"),
    turn(1, "I prefer metric units", "Noted: metric units from now on."),
]


class Recorder:
    """A FunctionModel body that records prompts and answers with fixed text."""

    def __init__(self, answer: str = "Ada prefers metric units.") -> None:
        self.answer = answer
        self.prompts: list[str] = []
        self.threads: list[str] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.threads.append(threading.current_thread().name)
        request = messages[-1]
        assert isinstance(request, ModelRequest)
        self.prompts.extend(
            str(part.content) for part in request.parts if isinstance(part, UserPromptPart)
        )
        return ModelResponse(parts=[TextPart(self.answer)])


class LoopRecorder:
    """An async FunctionModel body that records the event loop it ran on."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.loops: list[asyncio.AbstractEventLoop] = []

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.loops.append(asyncio.get_running_loop())
        return ModelResponse(parts=[TextPart(self.answer)])


def failing(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    raise ConnectionError("model endpoint unreachable")


# --------------------------------------------------------------------------- success path


def test_success_prompt_has_turns_and_limit() -> None:
    rec = Recorder()
    summarize = create_llm_summarizer(model=FunctionModel(rec), max_summary_tokens=120)
    assert isinstance(summarize, LLMSummarizer)
    assert summarize(TURNS) == "Ada prefers metric units."
    assert len(rec.prompts) == 1
    prompt = rec.prompts[0]
    assert "Turn 1:\n  User: My name is Ada.\n  Assistant: Nice to meet you, Ada." in prompt
    assert "Turn 2:\n  User: I prefer metric units\n  Assistant: Noted: metric units" in prompt
    assert "120 tokens" in prompt


def test_test_model_output() -> None:
    summarize = create_llm_summarizer(model=TestModel(custom_output_text="a short summary"))
    assert summarize(TURNS) == "a short summary"


def test_custom_template() -> None:
    rec = Recorder()
    summarize = create_llm_summarizer(
        model=FunctionModel(rec), prompt_template="Bullet points {{please}}:\n{turns_text}\nEND"
    )
    summarize(TURNS)
    prompt = rec.prompts[0]
    assert prompt.startswith("Bullet points {please}:\nTurn 1:")
    assert "  Assistant: Noted: metric units from now on.\nEND" in prompt


def test_previous_summary_turn_is_labelled() -> None:
    rec = Recorder()
    summarize = create_llm_summarizer(model=FunctionModel(rec))
    previous = ConversationTurn(
        turn_id=-1,
        user_prompt="Summary of the earlier conversation",
        assistant_response="Ada, metric.",
    )
    summarize([previous, turn(5, "And Celsius", "Celsius it is.")])
    prompt = rec.prompts[0]
    assert "Earlier summary: Ada, metric.\nTurn 1:\n  User: And Celsius" in prompt
    assert "Turn 2:" not in prompt


def test_long_turn_text_is_cut_in_the_prompt() -> None:
    rec = Recorder()
    summarize = create_llm_summarizer(model=FunctionModel(rec))
    summarize([turn(0, "p" * 2000, "r" * 2000)])
    prompt = rec.prompts[0]
    assert "p" * 500 in prompt and "p" * 501 not in prompt
    assert "r" * 500 in prompt and "r" * 501 not in prompt


# --------------------------------------------------------------------------- truncation


def test_output_truncated_to_max_tokens() -> None:
    long_answer = " ".join(f"word{i}" for i in range(1000))
    summarize = create_llm_summarizer(
        model=FunctionModel(Recorder(long_answer)), max_summary_tokens=20
    )
    result = summarize(TURNS)
    assert TokenEstimator().estimate(result) <= 20
    assert long_answer.startswith(result)
    # as many words as fit: 15 words -> int(15 * 1.33) = 19; 16 -> 21
    assert len(result.split()) == 15


@pytest.mark.parametrize("limit", [1, 2, 7, 100, 133, 500])
def test_truncate_helper_respects_estimator(limit: int) -> None:
    text = "\n".join(f"line {i} has  some words." for i in range(400))
    cut = truncate_to_tokens(text, limit)
    assert TokenEstimator().estimate(cut) <= max(limit, 1)
    assert text.startswith(cut)
    longer = truncate_to_tokens(text, limit + 5)
    assert len(longer) > len(cut)


def test_short_output_untouched() -> None:
    assert truncate_to_tokens("  two words  ", 500) == "two words"


# --------------------------------------------------------------------------- fallback


def test_fallback_on_model_exception(caplog: pytest.LogCaptureFixture) -> None:
    summarize = create_llm_summarizer(model=FunctionModel(failing))
    with caplog.at_level(logging.WARNING, logger="firefly_orm"):
        result = summarize(TURNS)
    assert result == "Nice to meet you, Ada. Noted: metric units from now on."
    assert any(
        "ConnectionError" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records
    )


def test_fallback_takes_last_five_turns_with_a_response() -> None:
    turns = [turn(i, "q", f"Answer {i}. More text") for i in range(8)]
    turns.append(turn(8, "q", ""))
    assert fallback_summary(turns) == "Answer 3. Answer 4. Answer 5. Answer 6. Answer 7."


def test_fallback_without_responses() -> None:
    assert fallback_summary([turn(0, "hi", "")]) == FALLBACK_SUMMARY
    assert fallback_summary([]) == FALLBACK_SUMMARY


def test_fallback_keeps_the_previous_summary() -> None:
    previous = ConversationTurn(turn_id=-1, assistant_response="User is Ada. Likes tea.")
    assert fallback_summary([previous, turn(3, "q", "Sure. ok")]) == "User is Ada. Sure."


def test_fallback_is_truncated_too() -> None:
    long = " ".join(["word"] * 200) + "."
    summarize = create_llm_summarizer(model=FunctionModel(failing), max_summary_tokens=10)
    result = summarize([turn(0, "q", long)])
    assert TokenEstimator().estimate(result) <= 10


def test_fallback_on_empty_model_answer() -> None:
    summarize = create_llm_summarizer(model=FunctionModel(Recorder("   ")))
    assert summarize(TURNS) == "Nice to meet you, Ada. Noted: metric units from now on."


def test_unknown_model_name_falls_back(caplog: pytest.LogCaptureFixture) -> None:
    summarize = create_llm_summarizer(model="no-such-provider:model-x")
    with caplog.at_level(logging.WARNING, logger="firefly_orm"):
        assert summarize(TURNS) == "Nice to meet you, Ada. Noted: metric units from now on."
    assert caplog.records


def test_model_none_reads_env_at_call_time(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(SUMMARY_MODEL_ENV, raising=False)
    summarize = create_llm_summarizer()  # no error at factory time
    with caplog.at_level(logging.WARNING, logger="firefly_orm"):
        assert summarize(TURNS) == "Nice to meet you, Ada. Noted: metric units from now on."
    assert any(SUMMARY_MODEL_ENV in r.getMessage() for r in caplog.records)
    monkeypatch.setenv(SUMMARY_MODEL_ENV, "test")  # pydantic-ai's TestModel
    result = summarize(TURNS)
    assert result != "Nice to meet you, Ada. Noted: metric units from now on."
    assert result


# --------------------------------------------------------------------------- factory validation


@pytest.mark.parametrize(
    "template",
    [
        "no field at all",
        "{turns}",
        "{turns_text} and {other}",
        "{turns_text} {",
        "} {turns_text}",
        "{0} {turns_text}",
        "{} {turns_text}",
        "{turns_text!r}",
        "{turns_text:>10}",
        "{turns_text.upper}",
        "{turns_text[0]}",
    ],
)
def test_bad_templates_rejected_at_factory_time(template: str) -> None:
    with pytest.raises(ValueError):
        create_llm_summarizer(model=TestModel(), prompt_template=template)


@pytest.mark.parametrize("template", ["{turns_text}", 'JSON like {{"a": 1}} then {turns_text}'])
def test_good_templates_accepted(template: str) -> None:
    assert (
        create_llm_summarizer(model=TestModel(), prompt_template=template).prompt_template
        == template
    )


@pytest.mark.parametrize("bad", [0, -5, True, 2.5, "100"])
def test_bad_max_summary_tokens(bad: Any) -> None:
    with pytest.raises(ValueError):
        create_llm_summarizer(model=TestModel(), max_summary_tokens=bad)


def test_keyword_only() -> None:
    with pytest.raises(TypeError):
        create_llm_summarizer("test")  # type: ignore[call-arg]


def test_missing_pydantic_ai_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pydantic_ai", None)
    with pytest.raises(MissingExtraError) as info:
        create_llm_summarizer(model="test")
    assert "'pydantic-ai'" in str(info.value)
    assert isinstance(info.value, ImportError)


# --------------------------------------------------------------------------- sync and async


async def test_async_form_runs_on_the_callers_loop() -> None:
    rec = LoopRecorder("Ada prefers metric units.")
    summarize = create_llm_summarizer(model=FunctionModel(rec))
    assert await summarize.async_summarize(TURNS) == "Ada prefers metric units."
    assert rec.loops == [asyncio.get_running_loop()]


async def test_async_form_falls_back() -> None:
    summarize = create_llm_summarizer(model=FunctionModel(failing))
    assert await summarize.async_summarize(TURNS) == (
        "Nice to meet you, Ada. Noted: metric units from now on."
    )


def test_sync_call_without_running_loop_repeatedly() -> None:
    rec = Recorder()
    summarize = create_llm_summarizer(model=FunctionModel(rec))
    for _ in range(3):
        assert summarize(TURNS) == "Ada prefers metric units."
    assert len(rec.prompts) == 3


async def test_sync_call_from_a_thread_while_a_loop_runs() -> None:
    summarize = create_llm_summarizer(model=FunctionModel(Recorder()))
    result = await asyncio.to_thread(summarize, TURNS)
    assert result == "Ada prefers metric units."


async def test_sync_call_inside_a_running_loop_still_works() -> None:
    rec = LoopRecorder("Ada prefers metric units.")
    summarize = create_llm_summarizer(model=FunctionModel(rec))
    assert summarize(TURNS) == "Ada prefers metric units."
    # it ran on the summarizer's own loop (the caller's loop cannot be re-entered)
    assert rec.loops and rec.loops[0] is not asyncio.get_running_loop()


# --------------------------------------------------------------------------- with conversations


def words(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def test_conversation_uses_the_summarizer_and_folds_the_previous_summary() -> None:
    answers = iter(["First summary.", "Second summary."])
    prompts: list[str] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        request = messages[-1]
        assert isinstance(request, ModelRequest)
        prompts.extend(str(p.content) for p in request.parts if isinstance(p, UserPromptPart))
        return ModelResponse(parts=[TextPart(next(answers))])

    conv = ConversationMemory(
        max_tokens=30,
        summarize_threshold=30,
        summarizer=create_llm_summarizer(model=FunctionModel(model)),
    )
    cid = conv.new_conversation()
    for i in range(4):  # 13 tokens each: turn 2 evicts turn 0, turn 3 evicts turn 1
        conv.add_turn(cid, words(5, f"p{i}_"), words(5, f"r{i}_"))
    assert conv.get_summary(cid) == "Second summary."
    assert "p0_0" in prompts[0] and "Earlier summary" not in prompts[0]
    assert "Earlier summary: First summary." in prompts[1] and "p1_0" in prompts[1]


async def test_async_conversation_awaits_async_summarize() -> None:
    rec = LoopRecorder("Async summary.")
    conv = ConversationMemory(
        max_tokens=30,
        summarize_threshold=30,
        summarizer=create_llm_summarizer(model=FunctionModel(rec)),
    )
    cid = await conv.async_new_conversation()
    for i in range(3):
        await conv.async_add_turn(cid, words(5), words(5, f"r{i}_"))
    assert conv.get_summary(cid) == "Async summary."
    assert rec.loops == [asyncio.get_running_loop()]  # awaited on this loop, not a thread


def test_importing_summarization_stays_light() -> None:
    # Before the package split it imported only firefly_orm.errors; recognising the
    # previous-summary turn must not load the conversation package or the ORM.
    code = (
        "import sys, firefly_orm.summarization\n"
        "heavy = ('sqlalchemy', 'sqlmodel', 'pydantic', 'firefly_orm.conversation')\n"
        "print(sorted(m for m in sys.modules if m in heavy))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert loaded.strip() == "[]"
