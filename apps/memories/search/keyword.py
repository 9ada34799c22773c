"""The keyword path's pure half: what a memory's tsvector holds, and BM25 over candidates.

PostgreSQL stores and finds (GIN over `search_vector`); ranking is BM25 computed here from the
matching lexemes' positions and weights and the project's document frequencies (`TermStat`).
Fields carry tsvector weights: A = citation and tags, B = content, C = file paths and modules.
No Django import.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from apps.memories.search.codetokens import analyze, analyze_fields, tsvector_literal

# BM25F-style field boosts by tsvector weight label.
FIELD_WEIGHTS: dict[str, float] = {"A": 1.0, "B": 1.0, "C": 0.6, "D": 0.5}
K1 = 1.2
B = 0.75


@dataclass(frozen=True)
class IndexedText:
    """Everything the SQL needs to build one memory's `search_vector`."""

    whole_literal: str  # verbatim identifier lexemes, already weighted
    words_a: str
    words_b: str
    words_c: str


def index_memory(
    *,
    content: str,
    citation_text: str = "",
    tags: Sequence[str] = (),
    related_files: Sequence[str] = (),
    related_modules: Sequence[str] = (),
    extra: str = "",
) -> IndexedText:
    a = analyze_fields([citation_text, *tags])
    b = analyze_fields([content, extra])
    c = analyze_fields([*related_files, *related_modules])
    weighted = [(t, "A") for t in a.whole] + [(t, "B") for t in b.whole] + [(t, "C") for t in c.whole]
    return IndexedText(
        whole_literal=tsvector_literal(weighted), words_a=a.words, words_b=b.words, words_c=c.words
    )


@dataclass(frozen=True)
class QueryTerms:
    whole: list[str]
    words: str
    grams: list[str]  # the CJK pairs among `whole`


def query_terms(query: str) -> QueryTerms:
    terms = analyze(query)
    return QueryTerms(whole=list(dict.fromkeys(terms.whole)), words=terms.words, grams=terms.grams)


def idf(df: int, n_docs: int) -> float:
    """BM25+ style IDF, never negative."""
    return math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))


@dataclass
class Candidate:
    memory_id: str
    length: int  # number of lexemes in the document
    matches: dict[str, float]  # lexeme -> weighted term frequency


@functools.lru_cache(maxsize=1024)
def weighted_tf(weights: str) -> float:
    """Sum of field boosts over the occurrences of a lexeme, given their weights as one string
    (`"AB"`: as the keyword statement reports them). A search reads ~700 of these and they take
    few distinct values, so they are remembered."""
    return sum(FIELD_WEIGHTS.get(w, FIELD_WEIGHTS["D"]) for w in weights)


def bm25(
    candidates: Sequence[Candidate],
    term_df: Mapping[str, int],
    n_docs: int,
    *,
    avg_length: float | None = None,
) -> list[tuple[str, float]]:
    """(memory_id, score) best first. Terms absent from `term_df` count as df=1 (rare)."""
    if not candidates:
        return []
    n_docs = max(n_docs, 1)
    avgdl = avg_length or (sum(c.length for c in candidates) / len(candidates)) or 1.0
    idf_of = {term: idf(df, n_docs) for term, df in term_df.items()}  # once per term
    rare = idf(1, n_docs)
    scored = []
    for cand in candidates:
        norm = K1 * (1 - B + B * cand.length / avgdl)
        score = 0.0
        for term, tf in cand.matches.items():
            if tf <= 0:
                continue
            score += idf_of.get(term, rare) * tf * (K1 + 1) / (tf + norm)
        scored.append((cand.memory_id, score))
    scored.sort(key=lambda pair: (-pair[1], pair[0]))
    return scored


def reference_score(term_df: Mapping[str, int], n_docs: int) -> float:
    """The BM25 of the query's ideal match: a document of average length that holds each query
    lexeme once (tf = 1 at average length gives each term exactly its IDF). Fusion takes keyword
    evidence relative to it, so a best hit that matches only a few common words of the query
    counts for little, while one that matches its rare identifiers counts in full. A lexeme no
    memory holds yet counts as the rarest (df 1): a match that lacks it covers less of the query
    (leaving such lexemes out scored 0.795 against 0.806 nDCG@10 on the dev set)."""
    n_docs = max(n_docs, 1)
    return sum(idf(max(df, 1), n_docs) for df in term_df.values())


def select_filter_terms(
    term_df: Mapping[str, int],
    n_docs: int,
    *,
    max_share: float = 0.2,
    max_rows: int = 2000,
    limit: int = 24,
) -> list[str]:
    """The terms that select candidates: the rarest ones, while their document frequencies add
    up to at most `max_rows` (so a query of common words cannot pull in most of a large project)
    and none is in more than `max_share` of the documents. Common terms still score in BM25;
    if every term is common, the rarest one selects alone."""
    present = sorted((df, term) for term, df in term_df.items() if df > 0)
    chosen: list[str] = []
    rows = 0
    for df, term in present:
        if df > max(max_share * n_docs, 1) or rows + df > max_rows or len(chosen) >= limit:
            break
        chosen.append(term)
        rows += df
    return chosen or [term for _, term in present[:1]]
