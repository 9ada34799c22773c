"""eval_retrieval, reembed and the lifecycle task, on small data."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from apps.bench.evaluation import BM25Baseline, ndcg_at, query_metrics, recall_at, reciprocal_rank
from apps.memories.models import Memory
from memorysaas.kernel.schedules import JOBS
from tests.memories.factories import make_memory

pytestmark = pytest.mark.django_db

DATASET = {
    "codebase": "",
    "memories": [
        {"key": "m1", "type": "gotcha", "content": "verifyJwt rejects expired tokens.", "related_files": ["auth/jwt.py"],
         "related_modules": [], "tags": [], "source": "agent_explicit", "confidence": 0.8, "citation_text": "jwt"},
        {"key": "m2", "type": "pattern", "content": "Paginate lists with a cursor.", "related_files": ["api/list.py"],
         "related_modules": [], "tags": [], "source": "qa_auto", "confidence": 0.7, "citation_text": "cursor"},
    ],
    "queries": [
        {"key": "q1", "query": "verify_jwt expired", "kind": "identifier", "phase": "implement",
         "files_in_play": [], "relevant": {"m1": 2}},
        {"key": "q2", "query": "cursor pagination for lists", "kind": "semantic", "phase": "explore",
         "files_in_play": ["api/list.py"], "relevant": {"m2": 2}},
    ],
}  # fmt: skip


def test_metrics():
    relevant = {"a": 2, "b": 1}
    assert recall_at(["x", "a"], relevant, 5) == 0.5
    assert reciprocal_rank(["x", "a"], relevant) == 0.5
    assert ndcg_at(["a", "b"], relevant) == pytest.approx(1.0)
    assert ndcg_at(["b", "a"], relevant) < 1.0
    assert query_metrics([], relevant)["mrr"] == 0.0
    assert BM25Baseline(["a", "b"], ["select for update", "paginator pages"]).rank("paginator")[0] == "b"


def test_eval_retrieval_prints_metrics_and_cleans_up(tmp_path, capsys):
    path = tmp_path / "set.json"
    path.write_text(json.dumps(DATASET))
    call_command("eval_retrieval", dataset=str(path), json=True)
    out = capsys.readouterr().out
    assert "recall@5" in out and "HyDE ran for 0 of 2 queries" in out  # the table comes first
    result = json.loads(out.strip().splitlines()[-1])
    assert result["hyde_queries"] == 0
    assert set(result["metrics"]) == {"keyword", "dense", "hybrid", "hybrid+boost", "full", "bm25"}
    assert result["metrics"]["full"]["identifier"]["recall@5"] == 1.0
    assert {"full_vs_best_single_path", "full_vs_bm25", "identifier_recall@5"} <= set(result["checks"])
    assert not Memory.objects.exists()


def test_eval_retrieval_without_json_prints_only_the_table(tmp_path, capsys):
    path = tmp_path / "set.json"
    path.write_text(json.dumps(DATASET))
    call_command("eval_retrieval", dataset=str(path))
    lines = capsys.readouterr().out.strip().splitlines()
    assert any("nDCG@10" in line for line in lines)
    assert not any(line.lstrip().startswith("{") for line in lines)


def test_eval_retrieval_lists_the_relevant_memories_the_full_pipeline_misses(tmp_path, capsys):
    jwt_notes = [
        {"key": f"j{n}", "type": "gotcha", "content": f"verify_jwt expired tokens case {n}: verifyJwt rejects them.",
         "related_files": ["auth/jwt.py"], "source": "agent_explicit", "confidence": 0.8}
        for n in range(7)
    ]  # fmt: skip
    dataset = {
        **DATASET,
        "memories": [*DATASET["memories"], *jwt_notes],
        "queries": [{**DATASET["queries"][0], "relevant": {"m2": 1}}],  # the note on pagination
    }
    path = tmp_path / "set.json"
    path.write_text(json.dumps(dataset))
    call_command("eval_retrieval", dataset=str(path), misses=True)
    listing = capsys.readouterr().out.split("outside the full pipeline's top 5", 1)[1].splitlines()[1:]
    (line,) = [line for line in listing if line.strip()]
    assert line.strip().startswith("q1 identifier (identifier) m2 grade 1: full ")
    full_rank = line.split("full ", 1)[1].split(" ", 1)[0]
    assert full_rank == "-" or int(full_rank) > 5
    assert "· dense " in line and "· keyword " in line and "· graph -" in line  # no files: no graph path


def test_eval_retrieval_misses_says_none_when_every_relevant_memory_is_in_the_top_5(tmp_path, capsys):
    path = tmp_path / "set.json"
    path.write_text(json.dumps(DATASET))
    call_command("eval_retrieval", dataset=str(path), misses=True)
    out = capsys.readouterr().out
    assert out.split("outside the full pipeline's top 5", 1)[1].splitlines()[1].strip() == "none"


def test_eval_indexes_the_codebase_with_its_package_prefix(tmp_path, monkeypatch, alice):
    from apps.bench.management.commands.eval_retrieval import _index_codebase
    from apps.graph.selectors import file_paths, neighbour_files

    package = tmp_path / "evalpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "pager.py").write_text("class Pager:\n    pass\n")
    (package / "views.py").write_text(
        "from evalpkg.pager import Pager\n\n\ndef page():\n    return Pager()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    message = _index_codebase(alice.project, "evalpkg==1.0", None)
    assert "indexed evalpkg" in message
    assert "evalpkg/pager.py" in file_paths(project=alice.project)
    assert "evalpkg/views.py" in neighbour_files(alice.project.id, ["evalpkg/pager.py"])


def test_eval_reports_a_codebase_it_cannot_find_and_goes_on(tmp_path, alice):
    from apps.bench.management.commands.eval_retrieval import _index_codebase
    from apps.graph.selectors import file_paths

    message = _index_codebase(alice.project, "no_such_package_here==1.0", None)
    assert "no_such_package_here is not installed" in message
    assert "is not installed" in _index_codebase(alice.project, "no_such_parent.child==1.0", None)
    assert "no graph is indexed" in message
    assert _index_codebase(alice.project, "evalpkg==1.0", None, str(tmp_path)).startswith("no evalpkg/ under")
    assert not file_paths(project=alice.project)


def test_eval_indexes_a_codebase_from_a_source_directory(tmp_path, alice):
    from apps.bench.management.commands.eval_retrieval import _index_codebase
    from apps.graph.selectors import file_paths

    (tmp_path / "srcpkg").mkdir()
    (tmp_path / "srcpkg" / "__init__.py").write_text("")
    (tmp_path / "srcpkg" / "core.py").write_text("def run():\n    return 1\n")
    message = _index_codebase(alice.project, "srcpkg==2.0", None, str(tmp_path))
    assert message.startswith("indexed srcpkg (from --source;")
    assert "srcpkg/core.py" in file_paths(project=alice.project)


@pytest.mark.parametrize("size", ["0", "-3"])
def test_reembed_refuses_a_batch_size_under_one(alice, size):
    """0 crashed in range(); a negative size embedded nothing and said it had selected some."""
    from django.core.management.base import CommandError

    make_memory(alice)
    with pytest.raises(CommandError, match="at least 1"):
        call_command("reembed", "--all", "--batch-size", size)


def test_reembed_picks_up_other_models(alice, settings, capsys):
    memory = make_memory(alice)
    Memory.objects.filter(id=memory.id).update(embedding_model="old-model")
    call_command("reembed")
    summary = json.loads(capsys.readouterr().out.strip())
    assert summary["selected"] == summary["embedded"] == 1
    memory.refresh_from_db()
    assert memory.embedding_model == summary["model"]


def test_reindex_keywords_rebuilds_the_memories_with_cjk_text_or_all(alice, capsys):
    from django.db.models.expressions import RawSQL

    from apps.memories.search import SearchRequest, search
    from apps.memories.services import indexing

    chinese = make_memory(alice, content="缓存键在每次部署时都会变化。")
    english = make_memory(alice, content="Cache keys change per deploy.")
    indexing._adjust_term_stats([chinese.id], -1)  # as indexed by a server on the old code
    Memory.objects.filter(id=chinese.id).update(search_vector=RawSQL("to_tsvector('english', content)", []))
    indexing._adjust_term_stats([chinese.id], +1)
    assert not search(
        SearchRequest(principal=alice.principal, project=alice.project, query="部署")
    ).rankings.get("keyword")

    call_command("reindex_keywords", "--project", str(alice.project.id))
    assert json.loads(capsys.readouterr().out)["reindexed"] == 1
    assert search(SearchRequest(principal=alice.principal, project=alice.project, query="部署")).rankings[
        "keyword"
    ] == [str(chinese.id)]
    call_command("reindex_keywords", "--all", "--batch-size", "1")
    assert json.loads(capsys.readouterr().out)["reindexed"] == 2
    assert Memory.objects.get(id=english.id).version == 1  # (not a change of the memory)


def test_decay_and_prune_is_a_daily_schedule():
    assert JOBS["memories.decay_and_prune"].schedule_type == "D"
    from apps.memories.tasks import decay_and_prune_task

    assert callable(decay_and_prune_task)


def test_bench_search_prints_its_figures(capsys):
    call_command("bench_search", memories=300, projects=2, queries=6, bases=20, json=True)
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {
        "dense_unfiltered_p95_ms", "dense_p50_ms", "dense_p95_ms", "keyword_p95_ms", "pipeline_p50_ms",
        "pipeline_p95_ms", "http_p95_ms", "filtered_recall_at_10", "context_p50_ms", "context_p95_ms",
    } <= set(result)  # fmt: skip
    assert result["context_memories_p50"] > 0  # the context calls injected memories
    assert result["filtered_recall_at_10"] > 0.5
    assert result["pipeline_p95_limit_ms"] == round(result["dense_p95_ms"] + result["keyword_p95_ms"] + 15, 3)
    assert result["keyword_p50_ms"] <= result["keyword_p95_ms"]
    assert not Memory.objects.exists()
