"""Code-aware tokenization: what the server's keyword index and a device's offline replica
store for a text, so both match a query the same way. Pure: no Django (the server imports it
from here: one tokenizer, never two that drift).

Identifiers are matched whole *and* by parts: `verifyJwt`, `verify_jwt` and `auth/tokens.ts`
each keep their whole lower-cased form (stored verbatim as a lexeme), a joined form
(`verifyjwt`, so camelCase and snake_case spellings of one name meet), and their parts
(`verify`, `jwt`, `auth`, `tokens`, `ts`) which join the prose and are stemmed by PostgreSQL's
`english` configuration like every other word.

Chinese and Japanese are written without spaces, so PostgreSQL's parser makes a whole run one
word and a query for a word inside it found nothing. Each run of Han, kana or hangul also gives
its overlapping character pairs (a lone character itself), verbatim: `缓存键` → 缓存, 存键, the
usual bigram indexing of CJK search engines, on both sides of the match.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

# A raw token: word characters with inner dots, slashes, colons, `::` or hyphens between them.
_RAW = re.compile(r"[A-Za-z0-9_]+(?:(?:::|[./:\-])[A-Za-z0-9_]+)*")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_SPLIT = re.compile(r"[./:\-_]+")
# Han (with extension A, compatibility forms and the supplementary planes' extensions), kana and
# hangul syllables: a character class both Python's and PostgreSQL's regular expressions read.
CJK_CLASS = (
    "[\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003ffff]"
)
_CJK_RUN = re.compile(CJK_CLASS + "+")


def cjk_grams(text: str) -> list[str]:
    """The overlapping character pairs of each CJK run in `text` (a one-character run itself)."""
    grams: list[str] = []
    for run in _CJK_RUN.findall(text):
        grams.extend(run[i : i + 2] for i in range(max(len(run) - 1, 1)))
    return grams


def is_code_like(token: str) -> bool:
    """True for identifiers, paths and dotted names — not for plain or hyphenated words."""
    if token.startswith("__") or "_" in token.strip("_") or "/" in token or "." in token or "::" in token:
        return True
    letters = token.replace("-", "")
    if any(c.isdigit() for c in letters) and any(c.isalpha() for c in letters):
        return True
    # camelCase or inner capitals (QuerySet, ModelForm, verifyJwt), not Capitalized or ALLCAPS.
    inner = letters[1:]
    return any(c.isupper() for c in inner) and any(c.islower() for c in letters)


def split_parts(token: str) -> list[str]:
    """`django/db/models/query.py` → [django, db, models, query, py]; `verifyJwt` → [verify, jwt]."""
    parts: list[str] = []
    for segment in _SPLIT.split(token):
        if not segment:
            continue
        parts.extend(piece.lower() for piece in _CAMEL.findall(segment))
    return parts


def _segments(token: str) -> list[str]:
    """Inner code-like pieces of a compound: `qs.select_for_update` → [select_for_update]."""
    pieces = re.split(r"[./:]+", token)
    return [p.lower() for p in pieces if len(pieces) > 1 and p and is_code_like(p)]


@dataclass
class Terms:
    """What the keyword index stores for one text."""

    whole: list[str] = field(default_factory=list)  # verbatim lexemes, in order of appearance
    words: str = ""  # prose with identifiers replaced by their parts, for the english parser
    grams: list[str] = field(default_factory=list)  # the CJK pairs among `whole` (cjk_grams)


def analyze(text: str) -> Terms:
    whole: list[str] = []
    words: list[str] = []
    cursor = 0
    for match in _RAW.finditer(text):
        words.append(text[cursor : match.start()])
        cursor = match.end()
        token = match.group(0)
        if not is_code_like(token):
            words.append(token.replace("-", " "))
            continue
        lowered = token.lower()
        whole.append(lowered)
        parts = split_parts(token)
        joined = "".join(parts)
        if joined and joined != lowered:
            whole.append(joined)
        whole.extend(seg for seg in _segments(token) if seg != lowered)
        words.append(" ".join(parts))
    words.append(text[cursor:])
    grams = cjk_grams(text)
    return Terms(whole=[*whole, *grams], words=" ".join(w for w in words if w.strip()), grams=grams)


def analyze_fields(fields: Iterable[str]) -> Terms:
    combined = Terms()
    chunks = []
    for value in fields:
        terms = analyze(value)
        combined.whole.extend(terms.whole)
        chunks.append(terms.words)
    combined.words = " \n ".join(chunks)
    return combined
