"""Context packing, the last stage of /context: fit ranked memories into a phase's token budget with per-type
allocations, drop near-duplicates, cluster by file and cite each memory. Pure: no Django.

Tokens are estimated, not counted by a downloaded tokenizer (the service never fetches one):
`estimate_tokens` takes the larger of a character count and 3/4 per word-or-symbol run. ASCII
costs a token per 4 characters, which tracks cl100k-style tokenizers within about 10% on English
prose and over-counts code slightly; an accented Latin, Greek or Cyrillic letter costs half of
one, and any other character one (CJK, kana and hangul run about a token per character and
write no spaces; Devanagari, Thai or an emoji as much or more) — the safe side for a budget.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from apps.memories.kinds import PACKING

_PIECES = re.compile(r"\w+|[^\w\s]")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_ALPHABETIC = re.compile(r"[\u0080-\u052f\u1e00-\u1fff]")  # Latin-1 to Cyrillic, Latin and Greek extended
# Han (with its extensions and compatibility forms), kana, hangul, full-width forms.
_WIDE = re.compile(
    r"[\u1100-\u11ff\u2e80-\u9fff\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff\uff00-\uffef\U00020000-\U0003ffff]"
)
DEDUPE_JACCARD = 0.8
OTHER = "other"


def estimate_tokens(text: str) -> int:
    if not text:
        return 0
    by_pieces = math.ceil(len(_PIECES.findall(text)) * 0.75)
    if text.isascii():
        return max(math.ceil(len(text) / 4), by_pieces)
    non_ascii = len(_NON_ASCII.findall(text))
    alphabetic = len(_ALPHABETIC.findall(text))
    ascii_chars = len(text) - non_ascii
    return max(math.ceil(ascii_chars / 4 + alphabetic / 2 + (non_ascii - alphabetic)), by_pieces)


def one_line(text: str) -> str:
    """Text a packed line or heading carries: its line breaks (and runs of space) made one space,
    so no field can start a line of its own in the packed text."""
    return " ".join(text.split())


def citation(memory_id: str, citation_text: str) -> str:
    return f"[Memory #{str(memory_id)[:8]}: {citation_text}]"


@dataclass
class PackItem:
    memory_id: str
    memory_type: str
    content: str
    citation_text: str
    related_files: Sequence[str]
    score: float

    @property
    def cite(self) -> str:
        """The memory's citation as the packed text carries it (on one line)."""
        return citation(self.memory_id, one_line(self.citation_text))

    @property
    def line(self) -> str:
        return f"- ({self.memory_type}) {one_line(self.content)} {self.cite}"


@dataclass
class Packed:
    text: str
    token_count: int
    budget: int
    items: list[tuple[PackItem, int]] = field(default_factory=list)  # (item, its tokens)
    notes: int = 0  # session notes kept


def budget_for(phase: str, token_budget: int | None = None) -> tuple[int, dict[str, float]]:
    total, allocation = PACKING.get(phase, PACKING["explore"])
    return (token_budget or total), allocation


def _words(text: str) -> frozenset[str]:
    """What near-duplicate detection compares: lower-cased words, and the character pairs of
    runs in scripts written without spaces (a whole CJK sentence would otherwise be one word)."""
    words = set()
    for word in re.findall(r"\w+", text.lower()):
        if _WIDE.search(word):
            words.update(word[i : i + 2] for i in range(max(len(word) - 1, 1)))
        else:
            words.add(word)
    return frozenset(words)


def _duplicate(words: frozenset[str], kept: list[frozenset[str]]) -> bool:
    for other in kept:
        union = len(words | other)
        if union and len(words & other) / union >= DEDUPE_JACCARD:
            return True
    return False


def _select(items: Sequence[PackItem], budget: int, allocation: dict[str, float], header: int) -> list:
    """Two passes: each type fills its own share first (best score first), then whatever budget the
    shares left unused goes to the best remaining items of any type."""
    bucket_of = {
        item.memory_id: item.memory_type if item.memory_type in allocation else OTHER for item in items
    }
    room = {name: share * budget for name, share in allocation.items()}
    used = header
    chosen: list[tuple[PackItem, int]] = []
    kept_words: list[frozenset[str]] = []
    skipped: list[tuple[PackItem, int, frozenset[str]]] = []
    for item in items:
        words = _words(item.content)
        if _duplicate(words, kept_words):
            continue
        cost = estimate_tokens(item.line) + 1
        bucket = bucket_of[item.memory_id]
        if cost <= room.get(bucket, 0.0) and used + cost <= budget:
            room[bucket] -= cost
            used += cost
            chosen.append((item, cost))
            kept_words.append(words)
        else:
            skipped.append((item, cost, words))
    for item, cost, words in skipped:
        if used + cost <= budget and not _duplicate(words, kept_words):
            used += cost
            chosen.append((item, cost))
            kept_words.append(words)
    return chosen


def pack(
    items: Sequence[PackItem],
    *,
    phase: str,
    token_budget: int | None = None,
    notes: Sequence[str] = (),
) -> Packed:
    """Pack `items` (best first) for `phase`. Session notes, if any, come first and share the budget."""
    budget, allocation = budget_for(phase, token_budget)
    title = f"## Project memory ({phase})"
    note_lines = [f"- (session note) {one_line(n)}" for n in notes]
    header = estimate_tokens(title) + 1
    kept_notes = []
    for line in note_lines:  # (a note too long for what is left leaves room for shorter ones)
        cost = estimate_tokens(line) + 1
        if header + cost <= budget // 4:
            header += cost
            kept_notes.append(line)
    chosen = _select(items, budget, allocation, header)
    text, chosen = _render(title, kept_notes, chosen)
    # Group headings were not in the per-item costs: drop the weakest until the whole fits.
    while chosen and estimate_tokens(text) > budget:
        weakest = min(chosen, key=lambda pair: pair[0].score)
        text, chosen = _render(title, kept_notes, [c for c in chosen if c is not weakest])
    if not chosen and not kept_notes:
        return Packed(text="", token_count=0, budget=budget)
    return Packed(
        text=text, token_count=estimate_tokens(text), budget=budget, items=chosen, notes=len(kept_notes)
    )


def _render(title: str, notes: list[str], chosen: list[tuple[PackItem, int]]) -> tuple[str, list]:
    """The packed text, clustered by file (groups in order of their best item), and the chosen
    items in the order they appear in it."""
    groups: dict[str, list[tuple[PackItem, int]]] = {}
    for pair in sorted(chosen, key=lambda pair: -pair[0].score):
        item = pair[0]
        key = one_line(item.related_files[0]) if item.related_files else "general"
        groups.setdefault(key, []).append(pair)
    lines = [title]
    if notes:
        lines += ["### This session", *notes]
    for key, members in groups.items():
        lines.append(f"### {key}")
        lines += [item.line for item, _cost in members]
    ordered = [pair for members in groups.values() for pair in members]
    return "\n".join(lines), ordered
