"""The retrieval engine: `search()` (pipeline.py) runs the three candidate paths (dense, keyword,
graph), fuses them (fusion.py), boosts neighbourhoods, weighs by phase, trust and decayed
confidence, and reranks (late_interaction.py, with the precision model's view); hyde.py is its
optional second pass, packing.py fits results into an agent's token budget, keyword.py and
codetokens.py are the keyword index's side; the paths run side by side through
../concurrent_reads.py.

Callers import from here: `from apps.memories.search import SearchRequest, search`.
"""

from apps.memories.search.pipeline import (
    ALL_STAGES,
    NO_HYDE,
    Hit,
    Scope,
    SearchRequest,
    SearchResult,
    Stages,
    dense_path,
    graph_reach,
    keyword_candidates,
    search,
)

__all__ = [
    "ALL_STAGES",
    "NO_HYDE",
    "Hit",
    "Scope",
    "SearchRequest",
    "SearchResult",
    "Stages",
    "dense_path",
    "graph_reach",
    "keyword_candidates",
    "search",
]
