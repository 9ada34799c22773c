"""HyDE (Gao et al. 2022, "Precise Zero-Shot Dense Retrieval without Relevance Labels"): when an
LLM is configured, write a short hypothetical memory that would answer the query, embed it, and
search with the mean of the query's and the hypothetical's vectors.

Why the mean and not a second dense candidate list: the paper does exactly this (the query
vector averaged with the hypothetical documents' vectors), it keeps one dense query — one ANN
scan, and one vector for the exact cosines that score fusion and the graph path's closeness
use, so every stage sees the same notion of "close" — and the literal query stays half of it,
which anchors the search when the model invents details. A second list fused by rank would
need its own weight and would rank memories only the invented text resembles.

When: a fallback for explicit searches only, never for
proactive injection (`/context`, session start), and only when the plain pipeline was unsure —
fewer than MIN_CONFIDENT of its results score above MIN_SCORE after every stage. Then the whole
pipeline runs again with the combined vector. Only semantic queries get it: identifier queries
are answered by exact names (a made-up answer can only add wrong ones), structural ones by the
graph. One chat call with a tight token cap and timeout; any failure keeps the plain results and
pauses HyDE for a short while, so a dead endpoint does not cost every query its timeout. Answers
are cached by query text, per organization.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from django.conf import settings

from memorysaas.kernel.llm import chat_client, llm_configured

logger = logging.getLogger(__name__)

KINDS = frozenset({"semantic"})
# The seed's trigger: fewer than 3 results scoring above 0.5.
MIN_SCORE = 0.5
MIN_CONFIDENT = 3
MAX_TOKENS = 100
COOLDOWN_SECONDS = 30.0
PROMPT = (
    "You write the memory an AI coding agent's memory store would hold to answer a question about "
    "a codebase: 1-3 plain sentences stating the fact, the likely cause and what to do, in the "
    "vocabulary such a note would use. No preamble, no hedging, no markdown."
)


@dataclass(frozen=True)
class Outcome:
    # ran | cached | not_configured | disabled | skipped_kind | confident | failed | cooldown | not_run
    status: str
    text: str | None = None

    @property
    def ran(self) -> bool:
        return self.text is not None

    def as_dict(self) -> dict[str, object]:
        return {"ran": self.ran, "status": self.status, "hypothetical": self.text}


class _State:
    def __init__(self, size: int = 512) -> None:
        self.size = size
        self.answers: OrderedDict[str, str] = OrderedDict()
        self.failed_at: float | None = None
        self.lock = threading.Lock()

    def reset(self) -> None:
        with self.lock:
            self.answers.clear()
            self.failed_at = None


_STATE = _State()
reset = _STATE.reset


def _key(query: str, tenant: str) -> str:
    return hashlib.sha256(f"{tenant}:{settings.OPENAI_CHAT_MODEL}:{query.strip()}".encode()).hexdigest()


def hypothetical(query: str, kind: str, scores: list[float], *, tenant: str = "") -> Outcome:
    """The hypothetical memory for `query` (cached by query text within `tenant`, the searching
    organization: a `cached` answer must not tell one organization what another asked), or why
    there is none: `scores` are the plain pipeline's final result scores, best first."""
    if not llm_configured():
        return Outcome("not_configured")
    if not settings.SEARCH_HYDE:
        return Outcome("disabled")
    if kind not in KINDS:
        return Outcome("skipped_kind")
    if sum(score > MIN_SCORE for score in scores) >= MIN_CONFIDENT:
        return Outcome("confident")
    key = _key(query, tenant)
    with _STATE.lock:
        if key in _STATE.answers:
            _STATE.answers.move_to_end(key)
            return Outcome("cached", _STATE.answers[key])
        if _STATE.failed_at is not None and time.monotonic() - _STATE.failed_at < COOLDOWN_SECONDS:
            return Outcome("cooldown")
    try:
        response = chat_client(timeout=settings.HYDE_TIMEOUT_MS / 1000).chat.completions.create(
            model=settings.OPENAI_CHAT_MODEL,
            messages=[{"role": "system", "content": PROMPT}, {"role": "user", "content": query.strip()}],
            max_tokens=MAX_TOKENS,
            temperature=0,
        )
        text = (response.choices[0].message.content or "").strip()
        if not text:
            raise ValueError("empty completion")
    except Exception:
        logger.warning("HyDE call failed; searching with the plain query", exc_info=True)
        with _STATE.lock:
            _STATE.failed_at = time.monotonic()
        return Outcome("failed")
    with _STATE.lock:
        _STATE.failed_at = None
        _STATE.answers[key] = text
        while len(_STATE.answers) > _STATE.size:
            _STATE.answers.popitem(last=False)
    return Outcome("ran", text)


def combine(query_vector: np.ndarray, hypothetical_vector: np.ndarray) -> np.ndarray:
    """The unit-length mean of the two (both unit length): the single dense query HyDE searches with."""
    mean = np.asarray(query_vector, dtype=np.float32) + np.asarray(hypothetical_vector, dtype=np.float32)
    norm = float(np.linalg.norm(mean))
    return mean / norm if norm > 0 else np.asarray(query_vector, dtype=np.float32)
