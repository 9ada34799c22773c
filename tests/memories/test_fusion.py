"""The pipeline's pure stages on plain data."""

from __future__ import annotations

import pytest

from apps.memories import fusion


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


def test_decay_and_weighting():
    assert fusion.decayed_confidence(0.8, age_days=60, half_life_days=60) == pytest.approx(0.4)
    assert fusion.decayed_confidence(0.8, age_days=60, half_life_days=None) == 0.8
    assert fusion.decayed_confidence(0.8, age_days=600, half_life_days=60, pinned=True) == 0.8
    w = fusion.weighting(
        phase="implement", memory_type="gotcha", source="user_taught", confidence=0.5, disputed=True
    )
    assert w.factor == pytest.approx(1.5 * 1.4 * 0.5 * 0.8)


def test_local_precision_rerank_fuses_scores_and_weighs_softly():
    items = [
        fusion.RerankInput("keyword-only", cosine=0.1, keyword=1.0),
        fusion.RerankInput("close", cosine=0.8, keyword=0.2),
        fusion.RerankInput("far", cosine=0.05),
        fusion.RerankInput("close-but-distrusted", cosine=0.8, keyword=0.2, factor=0.25),
    ]
    ranked = [i for i, _ in fusion.local_precision_rerank(items, keep=3)]
    assert ranked == ["close", "keyword-only", "close-but-distrusted"]
