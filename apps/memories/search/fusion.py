"""The retrieval pipeline's pure stages (docs/architecture.md, "Retrieval"): query-type detection, weighted
RRF (reported) and score fusion (ordering), the graph-neighbourhood boost, phase × trust × decayed confidence × dispute weighting and
the local precision rerank (with late interaction, late_interaction.py). Plain data in, plain data out; no Django import.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from apps.memories.kinds import DISPUTE_PENALTY, PHASE_WEIGHTS, SOURCE_TRUST
from apps.memories.search.codetokens import is_code_like

RRF_K = 60
PATHS = ("dense", "keyword", "graph")

# Path weights by detected query type.
RRF_WEIGHTS: dict[str, dict[str, float]] = {
    "identifier": {"keyword": 0.5, "graph": 0.3, "dense": 0.2},
    "semantic": {"dense": 0.5, "keyword": 0.25, "graph": 0.25},
    "structural": {"graph": 0.6, "keyword": 0.25, "dense": 0.15},
}

# Stage 2 as the pipeline orders by it: score fusion. The dense cosine is the backbone; the
# keyword path adds its BM25 relative to the query's ideal match (strongly only for identifier
# queries, where exact names matter), the graph path adds its neighbour strength in [0, 1].
# Chosen by hand and checked on split halves of the dev set (README, benchmarks-memories):
# RRF with k = 60 over the same paths lost to dense alone because it discards how sure each path
# is; a convex-style sum of scores keeps it.
FUSION_WEIGHTS: dict[str, dict[str, float]] = {
    "identifier": {"dense": 1.0, "keyword": 0.25, "graph": 0.2},
    "semantic": {"dense": 1.0, "keyword": 0.1, "graph": 0.2},
    "structural": {"dense": 1.0, "keyword": 0.1, "graph": 0.2},
}

# The boost for positions 11–50 that neighbour the top 10's files.
BOOST_TOP_K = 10
BOOST_WINDOW = 50
BOOST_FACTOR = 0.3

_RAW_TOKEN = re.compile(r"[A-Za-z0-9_]+(?:[./:\-][A-Za-z0-9_]+)*")
_STRUCTURAL_WORDS = re.compile(
    r"\b(imports?|imported|importers?|depend(s|ency|encies|ent|ents)?|callers?|callees?|"
    r"impact|affect(s|ed)?|who uses|uses of|subclass(es)?|downstream|upstream|neighbou?rs?)\b",
    re.IGNORECASE,
)


def identifier_tokens(query: str, files: Sequence[str] = ()) -> list[str]:
    """Code-like tokens in the query (identifiers, dotted names, paths) other than the files in play."""
    in_play = {f.lower() for f in files}
    return [
        token for token in _RAW_TOKEN.findall(query) if is_code_like(token) and token.lower() not in in_play
    ]


def asks_about_relations(query: str) -> bool:
    """Whether the query asks how code relates (who imports or calls it, what a change affects)."""
    return bool(_STRUCTURAL_WORDS.search(query))


def detect_query_kind(query: str, files: Sequence[str] = ()) -> str:
    """identifier / semantic / structural (a server sees the files in play, so they count too).

    Identifier: the query names code (camelCase, snake_case, dotted names, error classes, paths)
    beyond the files in play. Structural: files are in play and the query is about them or their
    relations (imports, callers, impact). Semantic otherwise.
    """
    if identifier_tokens(query, files):
        return "identifier"
    if files:
        lowered = query.lower()
        if asks_about_relations(query) or any(f and f.lower() in lowered for f in files):
            return "structural"
        if any((name := f.rsplit("/", 1)[-1].lower()) and name in lowered for f in files):
            return "structural"
    return "semantic"


def weighted_rrf(
    rankings: Mapping[str, Sequence[str]], weights: Mapping[str, float], k: int = RRF_K
) -> dict[str, float]:
    """Σ weight_path / (k + rank) over the paths that found each id (ranks start at 1)."""
    scores: dict[str, float] = {}
    for path, ids in rankings.items():
        weight = weights.get(path, 0.0)
        if weight <= 0:
            continue
        for rank, memory_id in enumerate(ids, start=1):
            scores[memory_id] = scores.get(memory_id, 0.0) + weight / (k + rank)
    return scores


def score_fusion(
    *,
    cosines: Mapping[str, float],
    keyword: Mapping[str, float],
    graph: Mapping[str, float],
    weights: Mapping[str, float],
    keyword_reference: float = 0.0,
) -> dict[str, float]:
    """Σ weight_path × normalised score over every candidate any path found.

    dense: the exact query–memory cosine (a candidate without a vector of this model gets the
    lowest cosine seen); keyword: BM25 / the larger of the query's best BM25 and
    `keyword_reference` (the BM25 of its ideal match, keyword.reference_score), so the path
    speaks as loudly as its best hit matches the query, not always in full; graph: neighbour
    strength in [0, 1]. A path with weight 0 (or switched off) contributes nothing.
    """
    ids = set(cosines) | set(keyword) | set(graph)
    floor = min(cosines.values(), default=0.0)
    best_keyword = keyword_scale(keyword, keyword_reference)
    w_dense, w_keyword, w_graph = (weights.get(p, 0.0) for p in ("dense", "keyword", "graph"))
    scores = {}
    for memory_id in ids:
        score = w_dense * cosines.get(memory_id, floor) if w_dense else 0.0
        if w_keyword and best_keyword > 0:
            score += w_keyword * keyword.get(memory_id, 0.0) / best_keyword
        if w_graph:
            score += w_graph * min(max(graph.get(memory_id, 0.0), 0.0), 1.0)
        scores[memory_id] = score
    return scores


def keyword_scale(keyword: Mapping[str, float], keyword_reference: float = 0.0) -> float:
    """What a BM25 is divided by to read on the query's scale: the larger of the best hit's and
    the ideal match's (1.0 = as good a match as the query allows)."""
    return max(max(keyword.values(), default=0.0), keyword_reference if keyword else 0.0)


@dataclass
class Boost:
    amount: float
    reason: str


def neighbourhood_boost(
    ordered: Sequence[str],
    scores: Mapping[str, float],
    files_of: Mapping[str, Sequence[str]],
    neighbours_of_top: Mapping[str, float],
    *,
    top_k: int = BOOST_TOP_K,
    window: int = BOOST_WINDOW,
    factor: float = BOOST_FACTOR,
) -> dict[str, Boost]:
    """Boosts for candidates ranked top_k+1..window whose files neighbour the top results' files.

    The boost adds 0.3 × neighbour_count / |top files| to the fused score, where |top files| counts
    the top results' file mentions as they come (a file two of them name counts
    twice), so the boost does not grow as the top ten narrow onto fewer files. Each neighbouring
    file counts by its strength in (0, 1] (neighbour_count / 10 would be: about the
    same for ten memories of a file or so each). Weighted RRF scores live on a 1/k scale, so the
    boost is taken relative to the best fused score, and at most 0.3 × the leader: enough to
    climb into the top ten, not to take the lead.
    """
    if not ordered or not neighbours_of_top:
        return {}
    top_mentions = sum(len(files_of.get(memory_id, ())) for memory_id in ordered[:top_k])
    best = scores[ordered[0]]
    if best <= 0:  # nothing relevant to be near (a share of a negative leader would push down)
        return {}
    boosts: dict[str, Boost] = {}
    for memory_id in ordered[top_k:window]:
        hits = [f for f in files_of.get(memory_id, ()) if f in neighbours_of_top]
        if not hits:
            continue
        strength = sum(neighbours_of_top[f] for f in hits)
        share = min(1.0, strength / max(top_mentions, 1))
        boosts[memory_id] = Boost(
            factor * share * best, f"graph_neighbourhood: {', '.join(sorted(hits)[:3])}"
        )
    return boosts


def decayed_confidence(
    confidence: float,
    *,
    age_days: float,
    half_life_days: float | None,
    pinned: bool = False,
    user_verified: bool = False,
) -> float:
    """Confidence halved every half-life since the memory was last used; pinned memories and
    types without a half-life do not decay, nor, here, verified
    ones: the clock restarts only when a memory is injected, and a decayed memory is no longer
    injected, so a memory a person vouched for would drop out of /context for good (a taught
    gotcha at 0.9 falls under Cautious's 0.80 in ten unused days). The daily prune still retires
    a verified memory unused for three half-lives, as the issue specifies (never pinned ones)."""
    if pinned or user_verified or not half_life_days or age_days <= 0:
        return confidence
    return confidence * math.pow(0.5, age_days / half_life_days)


@dataclass
class Weighting:
    phase_weight: float
    source_trust: float
    confidence: float
    dispute: float

    @property
    def factor(self) -> float:
        return self.phase_weight * self.source_trust * self.confidence * self.dispute


def weighting(
    *,
    phase: str,
    memory_type: str,
    source: str,
    confidence: float,
    disputed: bool,
    phase_weights: dict[str, dict[str, float]] | None = None,
) -> Weighting:
    """`phase_weights`: the project's table (phase_weights.phase_weights_for), else the defaults."""
    return Weighting(
        phase_weight=(phase_weights or PHASE_WEIGHTS).get(phase, {}).get(memory_type, 1.0),
        source_trust=SOURCE_TRUST.get(source, 1.0),
        confidence=confidence,
        dispute=DISPUTE_PENALTY if disputed else 1.0,
    )


# Stage 3 applies phase × trust × decayed confidence × dispute as a prior, softly: the factor
# spans about 0.3–2.1, which multiplied in full outweighs clear relevance gaps (a 0.5 vs 0.3
# cosine); its fourth root keeps a 2× prior worth ~19 %.
WEIGHT_EXPONENT = 0.25


def weighted_score(relevance: float, factor: float) -> float:
    """Relevance weighed by the prior, so that a better prior always scores higher: a negative
    relevance (a cosine below zero, with little else) is divided by it rather than multiplied,
    which would rank the least trusted of two such memories first."""
    weight = prior(factor)
    return relevance * weight if relevance >= 0 else relevance / max(weight, 1e-3)


def prior(factor: float) -> float:
    """What stage 3 multiplies relevance by for this weighting factor."""
    return math.pow(max(factor, 0.0), WEIGHT_EXPONENT)


_FILE_PATH = re.compile(r"(?<![\w/.])(?:[\w.-]+/)+[\w.-]+\.[A-Za-z0-9]{1,6}\b")


def files_in_query(query: str) -> list[str]:
    """File paths written in the query (`django/core/paginator.py`, `src/auth/tokens.ts`)."""
    return list(dict.fromkeys(m.group(0).removeprefix("./") for m in _FILE_PATH.finditer(query)))


def identifier_match(identifiers: Sequence[str], memory_lexemes: Sequence[str] | set[str]) -> float:
    """Share of the query's identifiers (lower-cased, whole) that a memory holds verbatim."""
    wanted = {i.lower() for i in identifiers}
    if not wanted:
        return 0.0
    return len(wanted & set(memory_lexemes)) / len(wanted)


@dataclass
class RerankInput:
    memory_id: str
    score: float  # the stage-3 score: fused relevance (+ boost) × the soft weighting
    identifier_match: float = 0.0  # share of the query's identifiers the memory names verbatim
    cosine: float | None = None  # the pooled query–memory cosine fusion used
    late_interaction: float | None = (
        None  # MaxSim of the query's and the memory's tokens (late_interaction.py)
    )
    cosine_worth: float = 0.0  # what one unit of cosine added to `score` (dense weight × prior)
    precision: float | None = None  # the precision model's query–memory cosine (precision.py)


# The local precision stage's field-aware feature: naming every identifier of the query (in
# citation, content, tags or files) is worth this much on the fused scale (cosine ≈ 0.2–0.8).
IDENTIFIER_MATCH_WEIGHT = 0.05
# The share of the pooled cosine that the late-interaction MaxSim replaces for the head: an
# even blend of the two views of the same model (chosen a priori, not tuned; README).
LATE_INTERACTION_SHARE = 0.5
# With the precision model's cosine as a third view, the head's pooled cosine gives way in full to
# the even mean of the two finer ones: MaxSim and the stronger model's cosine (README: on both
# retrieval sets, semantic nDCG@10 0.75 → 0.83–0.88; an even mix at a full share, not tuned
# further). The search does not offer it for structural queries, where the code graph decides.
PRECISION_SHARE = 1.0


def local_precision_rerank(items: Sequence[RerankInput], *, keep: int) -> list[tuple[str, float]]:
    """The no-API rerank stage over the head: the stage-3 score with half its pooled cosine
    replaced by the token-level MaxSim (a memory without stored tokens gets the head's mean
    MaxSim − cosine gap), or, where the precision model's cosines are given, all of it by the
    mean of MaxSim and that cosine; plus field-aware evidence that the fused paths blur (a memory naming
    the query's exact identifiers, not only their parts). Cheap and deterministic: the token
    embeddings were computed with the vectors.
    Returns (id, score) best first, `keep` of them."""
    # MaxSim runs above the pooled cosine (by ~0.08 on average), so a head memory without stored
    # tokens (embedded before they were kept) is given the head's mean gap instead of none.
    gaps = [
        i.late_interaction - i.cosine
        for i in items
        if i.cosine is not None and i.late_interaction is not None
    ]
    mean_gap = sum(gaps) / len(gaps) if gaps else 0.0
    # The precision model's cosine, where the head has it, the same way (its own mean gap for a
    # memory embedded before it ran).
    precision_gaps = [
        i.precision - i.cosine for i in items if i.cosine is not None and i.precision is not None
    ]
    mean_precision_gap = sum(precision_gaps) / len(precision_gaps) if precision_gaps else 0.0
    scored = []
    for item in items:
        value = item.score + IDENTIFIER_MATCH_WEIGHT * item.identifier_match
        if item.cosine is not None and gaps:
            gap = item.late_interaction - item.cosine if item.late_interaction is not None else mean_gap
            if precision_gaps:
                second = item.precision - item.cosine if item.precision is not None else mean_precision_gap
                value += PRECISION_SHARE * item.cosine_worth * (gap + second) / 2
            else:
                value += LATE_INTERACTION_SHARE * item.cosine_worth * gap
        scored.append((item.memory_id, value))
    scored.sort(key=lambda pair: (-pair[1], pair[0]))
    return scored[:keep]
