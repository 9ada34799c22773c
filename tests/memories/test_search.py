"""The whole pipeline against the real database: paths, weighting, stale handling, packing."""

from __future__ import annotations

import importlib
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.db import connection, transaction
from django.db.models import F
from django.db.models.expressions import RawSQL
from django.test.utils import CaptureQueriesContext

from apps.memories import search as search_module
from apps.memories import services
from apps.memories.models import TENANT_MATCH, Memory, MemoryUsage
from apps.memories.neighbours import register_neighbour_provider, unregister_neighbour_provider
from apps.memories.search import Scope, SearchRequest, Stages, fusion, keyword_candidates, search
from apps.memories.search.keyword import select_filter_terms
from apps.memories.selectors import memories_visible
from apps.memories.services import indexing
from tests.memories.factories import draft, make_memory

pytestmark = pytest.mark.django_db


@pytest.fixture
def corpus(alice):
    return {
        "jwt": make_memory(
            alice,
            content="verifyJwt rejects tokens whose clock skew exceeds 30 seconds.",
            related_files=["auth/tokens.ts"],
            citation_text="verifyJwt clock skew",
        ),
        "pager": make_memory(
            alice,
            type="pattern",
            content="The paginator raises EmptyPage for pages past the end.",
            related_files=["core/paginator.py"],
        ),
        "views": make_memory(
            alice,
            type="module_insight",
            content="List views build their page with the paginator.",
            related_files=["views/list.py"],
        ),
        "noise": make_memory(
            alice, content="Cache keys are versioned per deploy.", related_files=["cache.py"]
        ),
    }


def test_code_aware_keyword_path_matches_whole_and_parts(alice, corpus):
    for query in ("verify_jwt", "verifyJwt", "auth/tokens.ts", "tokens clock skew"):
        result = search(SearchRequest(principal=alice.principal, project=alice.project, query=query, limit=3))
        assert result.hits[0].memory.id == corpus["jwt"].id, query
        assert result.hits[0].ranks["keyword"] == 1


def test_confidence_decays_to_the_moment_asked_for(alice, corpus):
    """`as_of` fixes the moment confidence decays to (the evaluation ranks as of its load), so
    how long a run takes cannot move a near-tie."""
    memory = corpus["jwt"]
    half_life = memory.decay_half_life_days
    assert half_life

    def confidence(**when):
        result = search(
            SearchRequest(
                principal=alice.principal, project=alice.project, query="verify_jwt", limit=1, **when
            )
        )
        assert result.hits[0].memory.id == memory.id
        return result.hits[0].components["confidence"]

    assert confidence(as_of=memory.created_at) == round(memory.confidence, 4)
    later = memory.created_at + timedelta(days=half_life)
    assert confidence(as_of=later) == round(memory.confidence / 2, 4)
    assert confidence(as_of=later) == confidence(as_of=later)  # the same moment, the same figure


def test_a_partial_keyword_match_adds_less_than_the_paths_full_weight(alice, corpus):
    # "cache" and "deploy" match the noise memory; the rest of the query matches nothing, so its
    # keyword evidence is well under what a memory matching the whole query would bring
    query = "cache deploy when the moon rises over quiet harbours"
    result = search(
        SearchRequest(principal=alice.principal, project=alice.project, query=query), Stages(rerank=False)
    )
    assert result.query_kind == "semantic"
    [noise] = [hit for hit in result.hits if hit.memory.id == corpus["noise"].id]
    assert noise.ranks["keyword"] == 1
    keyword_part = noise.components["fused"] - noise.components["cosine"]
    assert 0 < keyword_part < 0.5 * fusion.FUSION_WEIGHTS["semantic"]["keyword"]


@pytest.mark.parametrize("query", ["\u001b", "HE", ":", "the of and"])
def test_a_query_with_nothing_to_match_by_keyword_still_searches_by_meaning(
    real_embeddings, alice, corpus, api_client, query
):
    client = api_client(alice.key)
    response = client.post(f"projects/{alice.project.id}/search", {"query": query})
    assert response.status_code == 200, response.content
    results = response.json()["results"]
    assert results and all(r["ranks"]["keyword"] is None and r["ranks"]["dense"] for r in results)
    assert all(-1 <= r["components"]["cosine"] <= 1 for r in results)  # (never NaN)
    context = client.post(f"projects/{alice.project.id}/context", {"task": query})
    assert context.status_code == 200, context.content


@pytest.mark.parametrize("query", ["\u001b", ":"])
def test_a_query_with_nothing_to_embed_finds_nothing_rather_than_everything_unscored(
    alice, corpus, api_client, query
):
    """The hashing provider embeds text without words as the zero vector, whose cosine to
    anything is undefined: the dense path is skipped instead of ranking by NaN (an index scan
    returned nothing for it, an exact scan every memory, by the planner's choice)."""
    client = api_client(alice.key)
    response = client.post(f"projects/{alice.project.id}/search", {"query": query})
    assert response.status_code == 200, response.content
    assert response.json()["results"] == []
    context = client.post(f"projects/{alice.project.id}/context", {"task": query})
    assert context.status_code == 200 and context.json()["memories"] == []


def test_select_filter_terms_takes_the_rarest_within_its_limits():
    dfs = {"rare": 1, "uncommon": 4, "often": 30, "everywhere": 90}
    assert select_filter_terms(dfs, 100) == ["rare", "uncommon"]  # 30 > 20% of 100
    assert select_filter_terms(dfs, 100, max_rows=4) == ["rare"]  # 1 + 4 rows > 4
    assert select_filter_terms(dfs, 100, limit=1) == ["rare"]
    assert select_filter_terms({"often": 30, "everywhere": 90}, 100) == ["often"]  # all common: the rarest


def test_a_search_scope_is_its_querysets_filter_as_sql(alice, bob, charlie, corpus):
    others = [
        make_memory(bob, content="Bob's own paginator notes.", scope="personal"),
        make_memory(charlie, content="Another organization's paginator notes."),
    ]
    base = memories_visible(principal=alice.principal, project=alice.project).active()
    scope = Scope.of(base)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id FROM memories_memory WHERE {scope.sql}", scope.params)
        found = {row[0] for row in cursor.fetchall()}
    assert found == {m.id for m in corpus.values()} == set(base.values_list("id", flat=True))
    assert not found & {m.id for m in others}
    assert Scope.of(base.none()).sql == "FALSE"
    with pytest.raises(ValueError, match="memories_memory alone"):
        Scope.of(base.filter(project__name="x"))  # a join the paths' statements do not have


def test_search_api_reports_ranks_components_and_timings(alice, corpus, api_client):
    response = api_client(alice.key).post(
        f"projects/{alice.project.id}/search", {"query": "verifyJwt skew", "phase": "implement"}
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["query_kind"] == "identifier" and body["weights"] == fusion.FUSION_WEIGHTS["identifier"]
    top = body["results"][0]
    assert top["memory"]["id"] == str(corpus["jwt"].id)
    assert set(top["ranks"]) == {"dense", "keyword", "graph"}
    assert {
        "rrf",
        "fused",
        "cosine",
        "phase_weight",
        "source_trust",
        "confidence",
        "dispute",
        "score",
        "rerank",
    } <= set(top["components"])
    assert {"embed", "dense", "keyword", "fuse", "rerank", "total"} <= set(body["timings_ms"])
    assert body["reranker"] == "local"


def _search_with_provider(provider, alice, **kwargs):
    register_neighbour_provider(provider)
    try:
        return search(SearchRequest(principal=alice.principal, project=alice.project, **kwargs))
    finally:
        unregister_neighbour_provider(provider)


def test_graph_path_finds_memories_on_neighbouring_files(alice, corpus):
    def imports(project_id, files):
        return {"views/list.py": 1.0} if "core/paginator.py" in files else {}

    result = _search_with_provider(
        imports, alice, query="change what core/paginator.py raises", files=["core/paginator.py"], limit=4
    )
    by_id = {hit.memory.id: hit for hit in result.hits}
    assert result.query_kind == "structural"
    assert by_id[corpus["views"].id].ranks["graph"] == 1


def test_graph_reach_credits_the_files_in_play_unless_the_query_is_about_their_relations():
    neighbours = {"views/list.py": 0.9, "core/paginator.py": 0.5}
    files, reach = ["core/paginator.py"], search_module.graph_reach
    assert reach("what breaks here", "structural", files, [], neighbours) == neighbours
    for kind in ("identifier", "semantic"):
        assert reach("EmptyPage past the end", kind, files, [], neighbours) == {
            "views/list.py": 0.9,
            "core/paginator.py": 1.0,
        }
    # Named in a question about its importers (read as an identifier query: it names a path),
    # the file is what the answer is about, not an answer; named otherwise, it is credited.
    assert fusion.detect_query_kind("who imports core/paginator.py") == "identifier"
    assert reach("who imports core/paginator.py", "identifier", [], files, neighbours) == neighbours
    assert (
        reach("EmptyPage in core/paginator.py", "identifier", [], files, neighbours)["core/paginator.py"]
        == 1.0
    )
    # The file an agent works in stays credited when an identifier query uses such a word.
    assert (
        reach("why get_page depends on EmptyPage", "identifier", files, [], neighbours)["core/paginator.py"]
        == 1.0
    )


def test_a_memory_on_the_file_in_play_outranks_its_neighbours_on_the_graph_path(alice, corpus):
    """A memory on the file an agent works in is the graph's closest: it used to get nothing
    from the graph path while memories on the files it imports got 0.9 and passed it."""

    def imports(project_id, files):
        return {"views/list.py": 0.9} if "core/paginator.py" in files else {}

    result = _search_with_provider(
        imports, alice, query="EmptyPage for pages past the end", files=["core/paginator.py"], limit=4
    )
    assert result.query_kind != "structural"
    assert result.rankings["graph"][0] == str(corpus["pager"].id)
    hit = next(h for h in result.hits if h.memory.id == corpus["pager"].id)
    assert hit.components["graph"] == 1.0


def test_a_question_about_a_named_files_importers_credits_its_neighbours_not_the_file(alice, corpus):
    def imports(project_id, files):
        return {"views/list.py": 0.9} if "core/paginator.py" in files else {}

    result = _search_with_provider(imports, alice, query="who imports core/paginator.py", limit=4)
    assert result.rankings["graph"] == [str(corpus["views"].id)]


def test_boost_reuses_the_neighbours_already_asked_for_the_same_files(alice):
    # Every memory is about the file in play, so the boost's files (the top results') are the
    # graph path's: the providers are asked once. A different set of files is asked again.
    for n in range(fusion.BOOST_TOP_K + 2):
        make_memory(
            alice,
            content=f"The paginator clamps page {n} to the last page.",
            related_files=["core/paginator.py"],
        )
    asked: list[list[str]] = []

    def imports(project_id, files):
        asked.append(sorted(files))
        return {"views/list.py": 1.0}

    _search_with_provider(imports, alice, query="paginator page clamping", files=["core/paginator.py"])
    assert asked == [["core/paginator.py"]]

    asked.clear()
    _search_with_provider(imports, alice, query="paginator page clamping", files=["views/list.py"])
    assert asked == [["views/list.py"], ["core/paginator.py"]]


def test_graph_path_takes_files_named_in_the_query_and_orders_by_closeness(alice, corpus):
    near = make_memory(
        alice,
        content="List views build their page with the paginator, page by page.",
        related_files=["views/list.py"],
    )
    seen: list[list[str]] = []

    def imports(project_id, files):
        seen.append(list(files))
        return {"views/list.py": 0.9} if "core/paginator.py" in files else {}

    query = "List views build their page with the paginator, page by page; see core/paginator.py"
    result = _search_with_provider(imports, alice, query=query, limit=5)
    assert seen and "core/paginator.py" in seen[0]
    graph = result.rankings["graph"]
    # The named file's own memory at full strength (the query is not about its relations), then
    # its neighbours': equally strong, so the closer in meaning first.
    assert graph == [str(corpus["pager"].id), str(near.id), str(corpus["views"].id)]
    hit = next(h for h in result.hits if h.memory.id == near.id)
    assert hit.components["fused"] > hit.components["cosine"]  # the graph evidence was added


def test_dispute_penalty_and_stale_flag(alice, corpus):
    services.memory_feedback(memory=corpus["jwt"], actor=alice.principal, kind="dispute")
    services.memories_files_deleted(project=alice.project, paths=["auth/tokens.ts"])
    result = search(
        SearchRequest(principal=alice.principal, project=alice.project, query="verifyJwt", limit=2)
    )
    hit = next(h for h in result.hits if h.memory.id == corpus["jwt"].id)
    assert hit.components["dispute"] == 0.8 and hit.stale


def test_type_and_stale_filters_apply_to_every_path(alice, corpus, api_client):
    services.memories_files_deleted(project=alice.project, paths=["auth/tokens.ts"])  # jwt goes stale
    query, files = "paginator pages verifyJwt", ["core/paginator.py"]
    found = search(
        SearchRequest(principal=alice.principal, project=alice.project, query=query, files=files, limit=8)
    )
    assert corpus["jwt"].id in {h.memory.id for h in found.hits}  # searched: flagged, not hidden
    fresh = search(
        SearchRequest(
            principal=alice.principal, project=alice.project, query=query, files=files, include_stale=False
        )
    )
    assert fresh.hits and corpus["jwt"].id not in {h.memory.id for h in fresh.hits}
    response = api_client(alice.key).post(
        f"projects/{alice.project.id}/search", {"query": query, "files": files, "types": ["pattern"]}
    )
    assert response.status_code == 200, response.content
    assert [r["memory"]["id"] for r in response.json()["results"]] == [str(corpus["pager"].id)]


def test_the_local_precision_stage_credits_memories_naming_the_querys_identifiers(alice):
    names = make_memory(alice, content="Row locks need an open transaction.", tags=["select_for_update"])
    parts = make_memory(alice, content="Select the rows, then update them one by one.")
    result = search(
        SearchRequest(
            principal=alice.principal,
            project=alice.project,
            query="select_for_update outside atomic",
            limit=5,
        )
    )
    components = {hit.memory.id: hit.components for hit in result.hits}
    named, unnamed = components[names.id], components[parts.id]
    assert named["rerank"] == pytest.approx(named["score"] + fusion.IDENTIFIER_MATCH_WEIGHT, abs=1e-5)
    assert unnamed["rerank"] == pytest.approx(unnamed["score"], abs=1e-5)  # its parts, not the name


def test_search_respects_scope(alice, bob, corpus):
    make_memory(alice, content="alice private verifyJwt note", scope="personal")
    as_bob = search(
        SearchRequest(principal=bob.principal, project=alice.project, query="private verifyJwt note", limit=8)
    )
    assert all(h.memory.scope != "personal" for h in as_bob.hits)
    as_alice = search(
        SearchRequest(
            principal=alice.principal, project=alice.project, query="private verifyJwt note", limit=8
        )
    )
    assert any(h.memory.scope == "personal" for h in as_alice.hits)


def _tenant_matches(org_id, lexemes) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM memories_memory WHERE {TENANT_MATCH}", [org_id, lexemes])
        return cursor.fetchone()[0]


def test_the_keyword_path_walks_only_its_organizations_lexemes(alice, charlie):
    for n in range(3):
        make_memory(alice, content=f"zanzibarite cache entry {n} expires early")
    for n in range(5):
        make_memory(charlie, content=f"zanzibarite worker {n} in another organization")
    org_a, org_b = alice.project.organization_id, charlie.project.organization_id
    assert (_tenant_matches(org_a, ["zanzibarit"]), _tenant_matches(org_b, ["zanzibarit"])) == (3, 5)
    memory = make_memory(alice, content="a quokkaism")
    assert _tenant_matches(org_a, ["quokkaism"]) == 1
    with connection.cursor() as cursor:  # a lexeme with a quote and a backslash, and a long one
        odd, long = "it's\\odd", "x" * 2040
        cursor.execute(
            "SELECT memories_tenant_lexemes(%s::uuid, array_to_tsvector(%s::text[]))"
            " @@ memories_tenant_any(%s::uuid, %s::text[]), memories_tenant_lexemes(%s::uuid, array_to_tsvector(%s::text[]))",
            [org_a, [odd, long], org_a, [odd], org_a, [long]],
        )
        found, without_long = cursor.fetchone()
    assert found and without_long == ""  # past a tsvector word's room once tagged: left out
    make_memory(alice, content="a zebrafish hash " + "y" * 2040)  # the memory is stored all the same
    assert _tenant_matches(org_a, ["zebrafish"]) == 1  # and found by its other words
    services.memory_update(memory=memory, actor=alice.principal, changes={"content": "now a wombatism"})
    assert _tenant_matches(org_a, ["wombat"]) == 1  # PostgreSQL keeps the column in step

    sql, params, _, _ = keyword_candidates(
        Scope.of(memories_visible(principal=alice.principal, project=alice.project)),
        "zanzibarite cache", alice.project, limit=20,
    )  # fmt: skip
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)
        assert len(cursor.fetchall()) == 3
        # The tag is folded into a constant at planning, so the index serves the match (a table
        # this small would otherwise be read whole).
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(
            f"EXPLAIN SELECT id FROM memories_memory WHERE {TENANT_MATCH}", [org_a, ["zanzibarit"]]
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "memory_tenant_terms" in plan


def test_one_persons_personal_memories_do_not_steer_the_graph_path(alice, bob):
    from apps.memories.neighbours import co_mentioned_files

    make_memory(alice, content="My plan: move billing into the ledger.", scope="personal",
                related_files=["billing/invoice.py", "billing/ledger_plan.py"])  # fmt: skip
    make_memory(
        alice, content="Invoices round per line.", related_files=["billing/invoice.py", "billing/tax.py"]
    )
    neighbours = co_mentioned_files(alice.project.id, ["billing/invoice.py"])
    assert "billing/tax.py" in neighbours and "billing/ledger_plan.py" not in neighbours


def test_context_packs_within_budget_and_counts_access(alice, corpus, api_client):
    services.memories_files_deleted(project=alice.project, paths=["cache.py"])
    client = api_client(alice.key)
    url = f"projects/{alice.project.id}/context"
    body = None
    for _ in range(5):
        response = client.post(
            url, {"phase": "implement", "task": "verifyJwt and caching", "files": [], "token_budget": 200}
        )
        assert response.status_code == 200, response.content
        body = response.json()
    assert 0 < body["token_count"] <= 200
    assert f"[Memory #{str(corpus['jwt'].id)[:8]}: verifyJwt clock skew]" in body["text"]
    assert str(corpus["noise"].id) not in {m["id"] for m in body["memories"]}  # stale: never injected
    jwt = Memory.objects.get(id=corpus["jwt"].id)
    # Outside a session, calls within the hour count toward the reward once: a loop of calls
    # with a read-only key cleared reviews and raised confidence in seconds.
    assert (jwt.access_count, jwt.uncorrected_access_count, jwt.confidence) == (5, 1, 0.8)
    for _ in range(4):  # an hour apart
        MemoryUsage.objects.filter(memory=jwt).update(
            last_counted_at=F("last_counted_at") - timedelta(hours=1, minutes=1)
        )
        assert (
            client.post(url, {"phase": "implement", "task": "verifyJwt", "token_budget": 200}).status_code
            == 200
        )
    jwt = Memory.objects.get(id=corpus["jwt"].id)
    assert (jwt.access_count, jwt.uncorrected_access_count) == (9, 5)
    assert jwt.confidence == pytest.approx(0.85)
    assert client.post(url, {"phase": "implement"}).status_code == 422
    assert client.post(url, {"phase": "implement", "files": ["", " ./ ", "./", "/"]}).status_code == 422


def test_context_for_files_alone_puts_the_memories_on_those_files_first(alice, api_client):
    """Asked with files and no task, /context searched the files' paths, which read as a
    structural question, whose graph path credits only the files' neighbours: a trusted
    memory on a file the paginator imports came before a weaker one on the paginator itself."""

    def imports(project_id, files):
        return {"views/list.py": 1.0} if "core/paginator.py" in files else {}

    own = make_memory(
        alice,
        type="e2e_observation",
        source="observer_inferred",
        confidence=0.8,
        content="Paging past the end raised EmptyPage in the list view.",
        related_files=["core/paginator.py"],
    )
    neighbour = make_memory(
        alice,
        type="gotcha",
        source="user_taught",
        confidence=0.95,
        content="List views must catch EmptyPage from the core paginator.py and show the last page.",
        related_files=["views/list.py"],
    )
    register_neighbour_provider(imports)
    try:
        response = api_client(alice.key).post(
            f"projects/{alice.project.id}/context", {"phase": "implement", "files": ["core/paginator.py"]}
        )
    finally:
        unregister_neighbour_provider(imports)
    assert response.status_code == 200, response.content
    ids = [m["id"] for m in response.json()["memories"]]
    assert ids.index(str(own.id)) < ids.index(str(neighbour.id))


def test_a_word_inside_a_chinese_or_japanese_sentence_is_found_by_keyword(alice, corpus):
    chinese = make_memory(
        alice, content="缓存键在每次部署时都会变化，请勿硬编码。", related_files=["cache.py"]
    )
    japanese = make_memory(
        alice, content="キャッシュキーはデプロイごとに変わります。", related_files=["cache.py"]
    )
    for query, memory in (("缓存键", chinese), ("部署", chinese), ("デプロイ", japanese)):
        result = search(SearchRequest(principal=alice.principal, project=alice.project, query=query, limit=3))
        assert result.rankings["keyword"][0] == str(memory.id), query


def test_reindexing_keywords_rebuilds_the_index_and_the_document_frequencies(alice):
    memory = make_memory(alice, content="缓存键在每次部署时都会变化。", tags=["缓存"])
    other = make_memory(alice, content="Cache keys change per deploy.")
    in_path = make_memory(alice, content="The design notes live here.", related_files=["docs/设计说明.md"])
    project_id = str(alice.project.id)

    def frequencies() -> dict[str, int]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT term, df FROM memories_termstat WHERE project_id = %s AND df <> 0", [project_id]
            )
            return dict(cursor.fetchall())

    def index_as_before(*memories) -> None:  # a CJK run one word, without the pairs
        ids = [m.id for m in memories]
        indexing._adjust_term_stats(ids, -1)
        Memory.objects.filter(id__in=ids).update(
            search_vector=RawSQL(
                "to_tsvector('english', content || ' ' || array_to_string(related_files, ' '))", []
            )
        )
        indexing._adjust_term_stats(ids, +1)

    kept = frequencies()
    index_as_before(memory)
    assert "部署" not in frequencies()
    assert not search(
        SearchRequest(principal=alice.principal, project=alice.project, query="部署")
    ).rankings.get("keyword")

    version = Memory.objects.get(pk=memory.pk).version
    assert services.memories_reindex_keywords([memory.id, other.id]) == 2
    assert frequencies() == kept
    # the data migration does the same for every memory with CJK text (it finds them by pattern)
    index_as_before(memory, in_path)
    assert "设计" not in frequencies()
    migration = importlib.import_module("apps.memories.migrations.0009_cjk_keyword_grams")
    migration.reindex(None, SimpleNamespace(connection=connection))
    assert frequencies() == kept
    result = search(SearchRequest(principal=alice.principal, project=alice.project, query="部署"))
    assert result.rankings["keyword"] == [str(memory.id)]
    assert Memory.objects.get(pk=memory.pk).version == version  # not a change of the memory


def test_context_lists_each_memory_with_the_citation_its_text_carries(alice, api_client):
    # A citation text written over several lines is cited on one line in the packed text; the
    # memories list named it with its line breaks, a citation the text does not hold.
    memory = make_memory(
        alice,
        content="verifyJwt rejects tokens whose clock skew exceeds 30 seconds.",
        citation_text="verifyJwt\nclock   skew",
    )
    response = api_client(alice.key).post(
        f"projects/{alice.project.id}/context", {"task": "verifyJwt clock skew"}
    )
    assert response.status_code == 200, response.content
    body = response.json()
    [listed] = [m for m in body["memories"] if m["id"] == str(memory.id)]
    assert listed["citation"] == f"[Memory #{str(memory.id)[:8]}: verifyJwt clock skew]"
    assert all(m["citation"] in body["text"] for m in body["memories"])


def test_cohere_rerank_through_the_real_sdk(alice, corpus, fake_cohere):
    result = search(
        SearchRequest(principal=alice.principal, project=alice.project, query="pages past the end", limit=3)
    )
    assert result.reranker == "cohere"
    request = fake_cohere.requests[0]
    assert request["path"] == "/v2/rerank" and request["auth"] == "Bearer test-cohere-key"
    assert request["query"] == "pages past the end"
    assert "paginator" in result.hits[0].memory.content
    assert result.hits[0].components["rerank"] == 1.0


def test_results_are_whole_memories_with_payload_and_relations(alice, corpus):
    dead_end = make_memory(
        alice,
        type="dead_end",
        content="Retrying verifyJwt with a longer clock skew did not fix the expiry errors.",
        payload={"approach_tried": "longer skew", "why_it_failed": "tokens were really expired"},
        relations=[{"relation_type": "conflicts_with", "target_memory_id": str(corpus["jwt"].id)}],
        related_files=["auth/tokens.ts"],
    )
    result = search(
        SearchRequest(principal=alice.principal, project=alice.project, query="verifyJwt clock skew", limit=5)
    )
    by_id = {hit.memory.id: hit.memory for hit in result.hits}
    assert {dead_end.id, corpus["jwt"].id} <= set(by_id)
    found = by_id[dead_end.id]
    assert found.payload["why_it_failed"] == "tokens were really expired"
    assert found.content == dead_end.content and found.version == dead_end.version
    with CaptureQueriesContext(connection) as queries:
        assert [r.target_memory_id for r in found.relations.all()] == [corpus["jwt"].id]
        assert list(by_id[corpus["jwt"].id].relations.all()) == []
    assert len(queries) == 0  # relations came with the results


def test_results_without_relations_cost_no_relations_query(alice, corpus):
    with CaptureQueriesContext(connection) as queries:
        search(
            SearchRequest(
                principal=alice.principal, project=alice.project, query="paginator EmptyPage", limit=5
            )
        )
    assert not any("memories_memoryrelation" in q["sql"] and "EXISTS" not in q["sql"] for q in queries)


def test_the_memories_gin_indexes_keep_no_pending_list(alice):
    """Searches read these indexes on every query; a pending list (fastupdate) of recent inserts
    would be scanned linearly on each of them until a vacuum merged it."""
    make_memory(alice, content="pending list probe", related_files=["probe/pending.py"])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, c.reloptions FROM pg_class c"
            " WHERE c.relname IN ('memory_related_files', 'memory_tenant_terms') ORDER BY c.relname"
        )
        rows = cursor.fetchall()
        cursor.execute(
            "SELECT gin_clean_pending_list('memory_related_files'::regclass)"
            " + gin_clean_pending_list('memory_tenant_terms'::regclass)"
        )
        merged = cursor.fetchone()[0]
    assert rows == [
        ("memory_related_files", ["fastupdate=false"]),
        ("memory_tenant_terms", ["fastupdate=false"]),
    ]
    assert merged == 0  # nothing was waiting: the insert went straight into the indexes


def test_a_memorys_vector_stays_in_its_row(alice):
    """Distances are computed from the row on every search; a vector moved to the TOAST table
    would be fetched back through its index each time."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltoastrelid::regclass::text FROM pg_class WHERE relname = 'memories_memory'")
        toast = cursor.fetchone()[0]
        cursor.execute(f"SELECT count(*) FROM {toast}")
        before = cursor.fetchone()[0]
    memory = make_memory(
        alice,
        content="Long memories keep their vector in the row. " * 20,  # ~900 bytes of content
        related_files=["probe/toast.py"],
        tags=["storage", "toast"],
    )
    memory.refresh_from_db()
    assert memory.embedding_status == "ready" and len(memory.embedding) == 384
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {toast}")
        assert cursor.fetchone()[0] == before


def test_every_session_searches_with_the_ann_and_planner_settings(settings):
    """Set on each new connection (vectors.set_session_search_params): iterative HNSW scans so a
    tenant filter does not cost recall, and an SSD's random page cost so the planner does not
    prefer an exact scan of a large project to an HNSW index grown by deletes."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('hnsw.iterative_scan'), current_setting('hnsw.ef_search'),"
            " current_setting('random_page_cost')::float"
        )
        assert cursor.fetchone() == (
            "relaxed_order",
            str(settings.MEMORY_HNSW_EF_SEARCH),
            settings.DATABASE_RANDOM_PAGE_COST,
        )
    assert settings.DATABASE_RANDOM_PAGE_COST < 4


def test_the_dense_path_measures_every_row_of_the_scope_when_the_index_scan_comes_back_short(alice, charlie):
    """Another tenant's memories crowd the query's neighbourhood and the index scan stops before
    it reaches this project's one memory (pgvector stops an iterative scan at
    hnsw.max_scan_tuples or its memory budget): the dense path still finds it, by measuring the
    project's rows."""
    from apps.memories.embedding.providers import embed_query, get_provider
    from apps.memories.search import dense_path
    from apps.memories.vectors import nearest, vector_literal

    query = "The cache key includes the tenant id."
    services.memories_create_batch(
        project=charlie.project,
        actor=charlie.principal,
        drafts=[draft(content=f"{query} ({n})", type="gotcha") for n in range(40)],
    )
    ours = make_memory(alice, content="Run the linter before committing.", type="preference")
    provider = get_provider()
    vector = embed_query(query, provider)
    scope = Scope.of(memories_visible(principal=alice.principal, project=alice.project).active())
    dims = provider.dimensions
    with connection.cursor() as cursor:
        # A scan that stops after one candidate, as an iterative scan stops at its limits, and
        # the index used although the table is tiny.
        cursor.execute(
            "SELECT set_config('hnsw.iterative_scan', 'off', true), set_config('hnsw.ef_search', '1', true),"
            " set_config('enable_sort', 'off', true)"
        )
        cursor.execute(
            *nearest(
                dims,
                columns="id",
                where=f"{scope.sql} AND embedding_dims = %s AND embedding_model = %s",
                params=[*scope.params, dims, provider.model_id],
                limit=10,
                query_params=[vector_literal(vector)],
            )
        )
        assert cursor.fetchall() == []  # the index scan alone finds nothing of this project
    found = dense_path(scope, vector, model_id=provider.model_id, limit=10)
    assert [memory_id for memory_id, _, _ in found] == [str(ours.id)]


def test_search_types_take_dex_aliases_as_create_and_list_do(alice, api_client):
    from tests.memories.factories import make_memory

    make_memory(alice, content="Never call save() in a signal handler.", type="gotcha")
    response = api_client(alice.key).post(
        f"projects/{alice.project.id}/search", {"query": "save in a signal handler", "types": ["pitfall"]}
    )
    assert response.status_code == 200, response.content
    assert [r["memory"]["type"] for r in response.json()["results"]] == ["gotcha"]
