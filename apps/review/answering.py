"""Ask's written answer: with an LLM configured, a few sentences written from the memories a
question retrieved, citing by number the memories each statement comes from, or "I don't know"
when they do not cover it.

The memories are the answer's only source: the model is told to say it does not know rather
than fill a gap from what it knows, and an answer citing none of the memories it was given is
not shown, since it can only have come from elsewhere. Without an LLM, or when the call fails,
the page shows the ranked memories alone, as it does without an answer.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings

from memorysaas.kernel.llm import chat_client, llm_configured

logger = logging.getLogger(__name__)

MAX_TOKENS = 300
MAX_MEMORY_CHARS = 1500
UNKNOWN = "I don't know."
PROMPT = (
    "You answer a developer's question about their codebase using ONLY the numbered memories"
    " below, which their team's coding agents and people recorded. Write 1 to 4 plain sentences,"
    " no markdown. After each statement, cite the memories it comes from by number in square"
    " brackets, like [1] or [2][3]. Never add facts the memories do not state. If the memories"
    f" do not answer the question, reply exactly: {UNKNOWN}"
)
_CITE = re.compile(r"\[(\d{1,3}(?:\s*,\s*\d{1,3})*)\]")
_UNKNOWN_OPENINGS = ("i don't know", "i do not know", "i dont know")


@dataclass(frozen=True)
class Cited:
    """A retrieved memory as the answer may cite it: `citation` is its `[Memory #…]` form."""

    memory_id: str
    citation: str
    type: str
    content: str


@dataclass(frozen=True)
class Source:
    number: int  # its place in the ranked list
    memory: Cited


@dataclass(frozen=True)
class Part:
    text: str = ""
    source: Source | None = None


@dataclass(frozen=True)
class Answer:
    status: str  # answered | unknown | failed
    parts: tuple[Part, ...] = ()
    sources: tuple[Source, ...] = ()  # the memories cited, in the order first cited


def written_answer(question: str, memories: Sequence[Cited]) -> Answer | None:
    """The answer to `question` from `memories` (ranked, best first), or None when no LLM is
    configured or nothing was retrieved to write from."""
    if not llm_configured() or not memories:
        return None
    try:
        response = chat_client(timeout=settings.ASK_ANSWER_TIMEOUT_MS / 1000).chat.completions.create(
            model=settings.OPENAI_CHAT_MODEL,
            messages=messages(question, memories),
            max_tokens=MAX_TOKENS,
            temperature=0,
        )
        text = response.choices[0].message.content or ""
    except Exception:
        logger.warning("Ask could not have its answer written; showing the memories alone", exc_info=True)
        return Answer("failed")
    return read_answer(text, memories)


def messages(question: str, memories: Sequence[Cited]) -> list[dict[str, str]]:
    numbered = "\n\n".join(
        f"[{n}] ({m.type}) {m.content[:MAX_MEMORY_CHARS]}" for n, m in enumerate(memories, start=1)
    )
    return [
        {"role": "system", "content": PROMPT},
        {"role": "user", "content": f"Memories:\n\n{numbered}\n\nQuestion: {question.strip()}"},
    ]


def read_answer(text: str, memories: Sequence[Cited]) -> Answer:
    """The model's text as parts (plain text, and citations of the memories it numbers), or
    "unknown" when it says it does not know or cites none of the memories."""
    text = " ".join(text.split())
    if not text or text.lower().replace("\u2019", "'").startswith(_UNKNOWN_OPENINGS):
        return Answer("unknown")
    parts: list[Part] = []
    sources: dict[int, Source] = {}
    position = 0
    for found in _CITE.finditer(text):
        parts.append(Part(text[position : found.start()]))
        for number in (int(n) for n in found.group(1).split(",")):
            if 1 <= number <= len(memories):  # (a number it made up cites nothing)
                source = sources.setdefault(number, Source(number, memories[number - 1]))
                parts.append(Part(source=source))
        position = found.end()
    parts.append(Part(text[position:]))
    if not sources:
        return Answer("unknown")
    return Answer("answered", tuple(p for p in parts if p.source or p.text), tuple(sources.values()))
