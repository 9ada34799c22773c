"""The pipeline's pure stages on plain data."""

from __future__ import annotations

import pytest

from apps.memories.search import fusion
from apps.memories.search.keyword import Candidate, bm25, reference_score, weighted_tf


@pytest.mark.parametrize(
    ("query", "files", "kind"),
    [
        ("why does verifyJwt reject my token", [], "identifier"),
        ("select_for_update outside a transaction", [], "identifier"),
        ("TransactionManagementError when saving", [], "identifier"),
        ("records come back without their ids", [], "semantic"),
        ("add a hook to django/views/generic/edit.py", ["django/views/generic/edit.py"], "structural"),
        ("what imports this module", ["a/b.py"], "structural"),
        ("make the pager friendlier", ["a/b.py"], "semantic"),
    ],
)
def test_detect_query_kind(query, files, kind):
    assert fusion.detect_query_kind(query, files) == kind


def test_an_empty_file_name_does_not_make_every_query_structural():
    # an empty name is in every query ("src/" has one as its last part)
    assert fusion.detect_query_kind("make the pager friendlier", ["", "src/"]) == "semantic"


def test_weighted_rrf_sums_weighted_reciprocal_ranks():
    scores = fusion.weighted_rrf({"dense": ["a", "b"], "keyword": ["b"]}, {"dense": 0.5, "keyword": 0.25})
    assert scores["a"] == pytest.approx(0.5 / 61)
    assert scores["b"] == pytest.approx(0.5 / 62 + 0.25 / 61)
    assert fusion.weighted_rrf({"graph": ["a"]}, {"dense": 1.0}) == {}


def test_neighbourhood_boost_lifts_only_positions_11_to_50():
    ordered = [f"m{i}" for i in range(60)]
    scores = {m: 1.0 / (61 + i) for i, m in enumerate(ordered)}
    files = {m: [f"f{i}.py"] for i, m in enumerate(ordered)}
    files["m30"] = ["near.py"]
    files["m55"] = ["near.py"]
    files["m3"] = ["near.py", "f3.py"]
    boosts = fusion.neighbourhood_boost(ordered, scores, files, {"near.py": 1.0})
    assert set(boosts) == {"m30"}
    assert 0 < boosts["m30"].amount <= fusion.BOOST_FACTOR * scores["m0"]
    assert "near.py" in boosts["m30"].reason


def test_neighbourhood_boost_counts_the_top_files_as_mentioned():
    # The boost divides by the top results' file mentions with repeats: ten leaders on one file make ten
    # mentions, so a neighbour of that file gets 0.3 × 1/10 of the leader's score, not the whole
    # 0.3 that counting the one distinct file would give it.
    ordered = [f"m{i}" for i in range(12)]
    scores = {m: 1.0 - i / 100 for i, m in enumerate(ordered)}
    files = {m: ["core/paginator.py"] for m in ordered[:10]}
    files["m10"] = ["views/list.py"]
    files["m11"] = ["views/list.py", "views/detail.py"]
    boosts = fusion.neighbourhood_boost(
        ordered, scores, files, {"views/list.py": 1.0, "views/detail.py": 0.5}
    )
    assert boosts["m10"].amount == pytest.approx(fusion.BOOST_FACTOR * (1.0 / 10) * scores["m0"])
    assert boosts["m11"].amount == pytest.approx(fusion.BOOST_FACTOR * (1.5 / 10) * scores["m0"])


def test_decay_and_weighting():
    assert fusion.decayed_confidence(0.8, age_days=60, half_life_days=60) == pytest.approx(0.4)
    assert fusion.decayed_confidence(0.8, age_days=60, half_life_days=None) == 0.8
    assert fusion.decayed_confidence(0.8, age_days=600, half_life_days=60, pinned=True) == 0.8
    assert fusion.decayed_confidence(0.8, age_days=600, half_life_days=60, user_verified=True) == 0.8
    w = fusion.weighting(
        phase="implement", memory_type="gotcha", source="user_taught", confidence=0.5, disputed=True
    )
    assert w.factor == pytest.approx(1.5 * 1.4 * 0.5 * 0.8)


def test_score_fusion_keeps_confidence_that_rank_fusion_flattens():
    weights = {"dense": 1.0, "keyword": 0.25, "graph": 0.2}
    scores = fusion.score_fusion(
        cosines={"sure": 0.8, "middling": 0.45, "keyword-only": 0.1},
        keyword={"middling": 2.0, "keyword-only": 8.0},
        graph={"middling": 0.9},
        weights=weights,
    )
    assert scores["sure"] == pytest.approx(0.8)
    assert scores["middling"] == pytest.approx(0.45 + 0.25 * 2.0 / 8.0 + 0.2 * 0.9)
    assert scores["keyword-only"] == pytest.approx(0.1 + 0.25)
    assert max(scores, key=scores.get) == "sure"  # RRF would put "middling" (found by 3 paths) first
    rrf = fusion.weighted_rrf(
        {
            "dense": ["sure", "middling", "keyword-only"],
            "keyword": ["keyword-only", "middling"],
            "graph": ["middling"],
        },
        weights,
    )
    assert max(rrf, key=rrf.get) == "middling"


def test_the_reference_score_is_what_an_average_document_holding_each_query_term_once_earns():
    dfs = {"verifyjwt": 1, "token": 12, "skew": 3}
    ideal = Candidate(memory_id="ideal", length=10, matches=dict.fromkeys(dfs, 1.0))
    [(_, earned)] = bm25([ideal], dfs, 100, avg_length=10)
    assert reference_score(dfs, 100) == pytest.approx(earned)
    assert reference_score({}, 100) == 0.0


def test_keyword_evidence_counts_as_far_as_the_best_hit_matches_the_query():
    weights = {"dense": 1.0, "keyword": 0.2}
    cosines = {"a": 0.5, "b": 0.5}
    # the best hit earns a quarter of what the query's ideal match would: a quarter of the weight
    weak = fusion.score_fusion(
        cosines=cosines, keyword={"a": 1.0, "b": 0.5}, graph={}, weights=weights, keyword_reference=4.0
    )
    assert weak["a"] == pytest.approx(0.5 + 0.2 * 1.0 / 4.0)
    assert weak["b"] == pytest.approx(0.5 + 0.2 * 0.5 / 4.0)
    # a hit at or past the reference (repeated or heavily weighted terms) takes the full weight
    strong = fusion.score_fusion(
        cosines=cosines, keyword={"a": 6.0, "b": 3.0}, graph={}, weights=weights, keyword_reference=4.0
    )
    assert strong["a"] == pytest.approx(0.5 + 0.2)
    assert strong["b"] == pytest.approx(0.5 + 0.1)


def test_score_fusion_without_vectors_or_paths():
    # a candidate no vector of this model covers gets the lowest cosine seen, not a bonus
    scores = fusion.score_fusion(
        cosines={"a": 0.5, "b": 0.2}, keyword={"c": 1.0}, graph={}, weights={"dense": 1.0}
    )
    assert scores == {"a": 0.5, "b": 0.2, "c": 0.2}
    assert fusion.score_fusion(
        cosines={}, keyword={"x": 3.0, "y": 1.5}, graph={}, weights={"keyword": 1.0}
    ) == {
        "x": 1.0,
        "y": 0.5,
    }


def test_files_in_query():
    query = (
        "Change which exceptions django/core/paginator.py throws (see ./src/auth/tokens.ts, not 3.5 or a/b)"
    )
    assert fusion.files_in_query(query) == ["django/core/paginator.py", "src/auth/tokens.ts"]
    assert fusion.files_in_query("records come back without their ids") == []


def test_weighted_score_is_a_soft_prior():
    assert fusion.weighted_score(0.5, 1.0) == 0.5
    assert fusion.weighted_score(0.5, 16.0) == pytest.approx(1.0)  # fourth root
    assert fusion.weighted_score(0.5, 2.0) < 0.5 * 2.0
    # a clear relevance gap survives a 2x prior against it
    assert fusion.weighted_score(0.6, 0.6) > fusion.weighted_score(0.4, 1.2)


def test_a_better_prior_scores_higher_below_zero_too():
    trusted, doubtful = fusion.weighted_score(-0.1, 2.0), fusion.weighted_score(-0.1, 0.3)
    assert trusted > doubtful  # multiplying would have put the doubtful one first
    assert fusion.weighted_score(-0.1, 1.0) == pytest.approx(-0.1)
    assert fusion.weighted_score(-0.1, 0.0) < fusion.weighted_score(-0.1, 0.01) < 0  # no division by zero
    assert fusion.weighted_score(0.0, 0.0) == 0.0


def test_no_neighbourhood_boost_under_a_leader_without_relevance():
    ordered = [f"m{i}" for i in range(12)]
    scores = {m: -0.05 - i / 100 for i, m in enumerate(ordered)}
    files = {m: ["a.py"] for m in ordered}
    assert fusion.neighbourhood_boost(ordered, scores, files, {"a.py": 1.0}) == {}


def test_identifier_match_counts_whole_identifiers():
    assert (
        fusion.identifier_match(["select_for_update", "QuerySet"], {"select_for_update", "queryset"}) == 1.0
    )
    assert fusion.identifier_match(["select_for_update", "QuerySet"], {"select", "update", "queryset"}) == 0.5
    assert fusion.identifier_match([], {"x"}) == 0.0


def test_local_precision_rerank_adds_identifier_evidence_to_the_score():
    items = [
        fusion.RerankInput("close", score=0.62),
        fusion.RerankInput("names-it", score=0.60, identifier_match=1.0),
        fusion.RerankInput("far", score=0.2, identifier_match=1.0),
    ]
    ranked = fusion.local_precision_rerank(items, keep=2)
    assert [i for i, _ in ranked] == ["names-it", "close"]
    assert ranked[0][1] == pytest.approx(0.60 + fusion.IDENTIFIER_MATCH_WEIGHT)


def test_weighted_tf_sums_the_field_boost_of_each_occurrence():
    # citation/tags (A) and content (B) count in full, paths and modules (C) less, unlabelled (D) least
    assert weighted_tf("AB") == pytest.approx(2.0)
    assert weighted_tf("BCC") == pytest.approx(1.0 + 0.6 + 0.6)
    assert weighted_tf("D") == pytest.approx(0.5)
    assert weighted_tf("AB") == pytest.approx(2.0)  # remembered, the same answer
