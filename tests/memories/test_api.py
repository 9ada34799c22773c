from __future__ import annotations

import uuid

import pytest
from django.db import connection

from apps.memories.models import Memory, MemoryVersion
from apps.tenants.roles import Role
from tests.factories import ProjectFactory, TeamFactory
from tests.memories.factories import make_memory
from tests.tables import tables_holding

pytestmark = pytest.mark.django_db

FAKE_ANTHROPIC_KEY = "sk-ant-api03-" + "A1b2C3d4E5f6G7h8" * 5


def _get(client, path: str, params: dict | None = None):
    return client.client.get(f"/api/v1/{path}", params or {}, **client.headers)


def _body(**fields):
    return {"type": "gotcha", "content": "QuerySet.update() skips save() and signals.", **fields}


def test_it_creates_one_memory(alice, api_client):
    client = api_client(alice.key)
    response = client.post(f"projects/{alice.project.id}/memories", _body(related_files=["./a/b.py"]))
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["type"] == "gotcha" and body["version"] == 1
    assert body["related_files"] == ["a/b.py"]
    assert body["embedding_status"] == "ready"
    assert body["citation"].startswith(f"[Memory #{body['id'][:8]}: ")


def test_it_creates_a_batch_in_one_transaction(alice, api_client):
    client = api_client(alice.key)
    url = f"projects/{alice.project.id}/memories"
    response = client.post(url, {"memories": [_body(content=f"fact {i}") for i in range(3)]})
    assert response.status_code == 201, response.content
    assert response.json()["count"] == 3
    bad = client.post(url, {"memories": [_body(content="fine"), _body(type="nonsense")]})
    assert bad.status_code == 422
    assert Memory.objects.filter(project=alice.project).count() == 3
    # what only the service can judge names the item too
    # (a scope the project cannot have is a conflict with its state; a memory it names that does
    # not exist, a 404)
    teamless = client.post(url, {"memories": [_body(content="fine"), _body(content="ours", scope="team")]})
    assert teamless.status_code == 409 and teamless.json()["error"]["details"]["index"] == 1
    dangling = {"relation_type": "validates", "target_memory_id": "00000000-0000-4000-8000-000000000000"}
    linked = client.post(url, {"memories": [_body(content="a", relations=[dangling]), _body(content="b")]})
    assert linked.status_code == 404 and linked.json()["error"]["details"]["index"] == 0
    assert Memory.objects.filter(project=alice.project).count() == 3


def test_batch_over_500_and_long_content_are_422(alice, api_client):
    client = api_client(alice.key)
    url = f"projects/{alice.project.id}/memories"
    assert client.post(url, {"memories": [_body()] * 501}).status_code == 422
    response = client.post(url, _body(content="x" * 4001))
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "validation_error"
    # reported against one memory's shape only, not also against a batch's
    assert [e["loc"][-1] for e in response.json()["error"]["details"]] == ["content"]
    batch = client.post(url, {"memories": [_body(content="x" * 4001)]}).json()["error"]["details"]
    assert [e["loc"][-3:] for e in batch] == [["memories", "0", "content"]]
    assert client.post(url, _body(colour="red")).status_code == 422


def test_a_secret_never_reaches_the_database(alice, api_client):
    client = api_client(alice.key)
    response = client.post(
        f"projects/{alice.project.id}/memories",
        _body(content=f"Deploy with ANTHROPIC key {FAKE_ANTHROPIC_KEY} set.", tags=[FAKE_ANTHROPIC_KEY]),
    )
    assert response.status_code == 201
    body = response.json()
    assert body["secrets_redacted"] and body["needs_review"]
    assert "[REDACTED:" in body["content"]
    memory_id = body["id"]
    client.patch(f"memories/{memory_id}", {"content": f"now {FAKE_ANTHROPIC_KEY}"})
    client.post(f"memories/{memory_id}/feedback", {"kind": "flag", "note": FAKE_ANTHROPIC_KEY})
    with connection.cursor() as cursor:
        for table in (
            "memories_memory",
            "memories_memoryversion",
            "memories_memoryfeedback",
            "tenants_auditlog",
        ):
            cursor.execute(
                f"SELECT count(*) FROM {table} t WHERE t::text LIKE %s", [f"%{FAKE_ANTHROPIC_KEY[:30]}%"]
            )
            assert cursor.fetchone()[0] == 0, table


def test_list_filters_and_paginates(alice, api_client, django_assert_max_num_queries):
    for i in range(5):
        make_memory(
            alice, content=f"verifyJwt rejects token {i}", tags=["auth"], related_files=["auth/tokens.ts"]
        )
    make_memory(alice, type="decision", content="We chose Postgres.", confidence=0.3, source="user_taught")
    client = api_client(alice.key)
    url = f"projects/{alice.project.id}/memories"
    seen = []
    cursor = None
    while True:
        params = {"limit": 2, "tag": "auth"} | ({"cursor": cursor} if cursor else {})
        with django_assert_max_num_queries(12):
            page = _get(client, url, params).json()
        seen += [m["id"] for m in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert len(seen) == len(set(seen)) == 5
    assert len(_get(client, url, {"type": "decision"}).json()["items"]) == 1
    assert len(_get(client, url, {"min_confidence": 0.5}).json()["items"]) == 5
    assert len(_get(client, url, {"source": "user_taught"}).json()["items"]) == 1
    assert len(_get(client, url, {"file": "auth/tokens.ts"}).json()["items"]) == 5
    assert len(_get(client, url, {"text": "verify_jwt"}).json()["items"]) == 5
    assert len(_get(client, url, {"text": "Postgres"}).json()["items"]) == 1
    assert len(_get(client, url, {"embedding_status": "pending"}).json()["items"]) == 0
    assert _get(client, url, {"cursor": "garbage!"}).status_code == 422
    assert _get(client, url, {"type": "nonsense"}).status_code == 422


@pytest.mark.parametrize(
    "cursor", ["garbage!", "MjAyMC0wMS0wMVQwMDowMDowMHw", f"-1-{uuid.uuid4().hex}", "1-2"]
)
def test_a_cursor_not_of_the_documented_shape_is_a_422(alice, api_client, cursor):
    response = _get(api_client(alice.key), f"projects/{alice.project.id}/memories", {"cursor": cursor})
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["loc"] == ["query", "cursor"]


def test_any_cursor_of_the_documented_shape_is_a_position_in_the_list(alice, api_client):
    """The schema gives the cursor's pattern (microseconds since 1970, a memory id), so any cursor
    of that shape is taken, from before the first memory to the latest time it allows."""
    make_memory(alice)
    url = f"projects/{alice.project.id}/memories"
    assert _get(api_client(alice.key), url, {"cursor": f"0-{uuid.uuid4().hex}"}).json()["items"] == []
    latest = _get(api_client(alice.key), url, {"cursor": f"{'9' * 17}-{uuid.uuid4().hex}"})
    assert latest.status_code == 200 and len(latest.json()["items"]) == 1


def test_patch_makes_a_new_version_and_reembeds(alice, api_client):
    memory = make_memory(alice)
    client = api_client(alice.key)
    response = client.patch(f"memories/{memory.id}", {"content": "Use atomic(durable=True) at the top only."})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["version"] == 2 and body["embedding_status"] == "ready"
    assert MemoryVersion.objects.filter(memory=memory).count() == 2
    assert client.patch(f"memories/{memory.id}", {}).status_code == 422
    assert client.patch(f"memories/{memory.id}", {"confidence": 2}).status_code == 422


def test_an_edit_or_correction_remakes_a_citation_made_from_the_content_but_keeps_a_written_one(
    alice, api_client
):
    client = api_client(alice.key)
    url = f"projects/{alice.project.id}/memories"
    made = client.post(url, {"type": "decision", "content": "We deploy the billing service nightly."}).json()
    titled = client.post(
        url, {"type": "decision", "content": "Deploys run from CI.", "citation_text": "deploy cadence"}
    ).json()
    assert made["citation_text"] == "We deploy the billing service nightly."
    patched = client.patch(
        f"memories/{made['id']}", {"content": "We deploy the billing service weekly."}
    ).json()
    assert patched["citation_text"] == "We deploy the billing service weekly."
    corrected = client.post(
        f"memories/{made['id']}/feedback", {"kind": "correct", "content": "We deploy it on Mondays."}
    )
    assert corrected.status_code == 200, corrected.content
    assert client.get(f"memories/{made['id']}").json()["citation_text"] == "We deploy it on Mondays."
    kept = client.patch(f"memories/{titled['id']}", {"content": "Deploys run from CI, tagged."}).json()
    assert kept["citation_text"] == "deploy cadence"
    # a citation cleared is made from the content (it was stored empty, and cited as "[Memory #…: ]")
    cleared = client.patch(f"memories/{titled['id']}", {"citation_text": " "}).json()
    assert cleared["citation_text"] == "Deploys run from CI, tagged."
    both = client.patch(
        f"memories/{titled['id']}", {"citation_text": "", "content": "Deploys run at 9."}
    ).json()
    assert both["citation_text"] == "Deploys run at 9."
    context = client.post(
        f"projects/{alice.project.id}/context", {"task": "when do we deploy billing"}
    ).json()
    assert "nightly" not in context["text"] and "weekly" not in context["text"]


def test_a_citation_cut_from_content_never_keeps_a_piece_of_a_secret(alice, api_client):
    """The citation is cut from the redacted content: cut first, a 40-character key split by the
    cut no longer matches its pattern and its first 26 characters were kept."""
    key = "msk_ab12cd34_" + "Q7x9Lm2Pz8Kw4Rt6Yb1Nc5Vh3Jd0Fg8Ss2Aa4Ee6"
    client = api_client(alice.key)
    made = client.post(
        f"projects/{alice.project.id}/memories", {"type": "gotcha", "content": f"{key} is the CI key"}
    )
    assert made.status_code == 201, made.content
    assert made.json()["citation_text"] == "[REDACTED:memorysaas_key] is the CI key"
    patched = client.patch(f"memories/{made.json()['id']}", {"content": f"{key} is the deploy key"}).json()
    assert patched["citation_text"] == "[REDACTED:memorysaas_key] is the…"  # (40 characters at most)
    assert tables_holding(key[13:30]) == []


def test_the_file_filter_takes_a_path_as_memories_store_it(alice, api_client):
    make_memory(alice, content="Windows paths too.", related_files=["src/app.py"])
    client = api_client(alice.key)
    for path in ("src/app.py", "./src/app.py", "././src/app.py", "src\\app.py", " src/app.py "):
        items = _get(client, f"projects/{alice.project.id}/memories", {"file": path}).json()["items"]
        assert [m["content"] for m in items] == ["Windows paths too."], path


def test_feedback_kinds(alice, api_client):
    memory = make_memory(alice, confidence=0.8)
    client = api_client(alice.key)
    url = f"memories/{memory.id}/feedback"
    flagged = client.post(url, {"kind": "flag"}).json()
    assert flagged["confidence"] == pytest.approx(0.6) and flagged["needs_review"]
    confirmed = client.post(url, {"kind": "confirm"}).json()
    assert confirmed["user_verified"] and not confirmed["needs_review"]
    assert client.post(url, {"kind": "correct"}).status_code == 422
    corrected = client.post(url, {"kind": "correct", "content": "The right fact."}).json()
    assert corrected["content"] == "The right fact."
    assert MemoryVersion.objects.filter(memory=memory, content__startswith="Use select_for_update").exists()
    assert client.post(url, {"kind": "helpful"}).json()["helpful_count"] == 1
    assert client.post(url, {"kind": "dispute"}).json()["disputed"]
    assert client.post(url, {"kind": "bogus"}).status_code == 422


def test_roles_decide_writes(alice, bob, person_with_role, api_client):
    viewer = person_with_role(Role.VIEWER)
    memory = make_memory(alice)
    as_viewer = api_client(viewer.key)
    assert as_viewer.get(f"memories/{memory.id}").status_code == 200
    assert as_viewer.post(f"projects/{alice.project.id}/memories", _body()).status_code == 403
    assert as_viewer.patch(f"memories/{memory.id}", {"tags": ["x"]}).status_code == 403
    # bob (member) may delete his own memory, not alice's; pinning is a steward's call.
    as_bob = api_client(bob.key)
    assert as_bob.delete(f"memories/{memory.id}").status_code == 403
    assert as_bob.patch(f"memories/{memory.id}", {"pinned": True}).status_code == 403
    assert (
        as_bob.patch(f"memories/{memory.id}", {"pinned": False, "tags": ["x"]}).status_code == 200
    )  # no change
    own = as_bob.post(f"projects/{alice.project.id}/memories", _body()).json()
    assert as_bob.delete(f"memories/{own['id']}").status_code == 204
    assert api_client(alice.key).delete(f"memories/{memory.id}").status_code == 204
    assert not Memory.objects.filter(id__in=[memory.id, own["id"]]).exists()


def test_creating_a_pinned_memory_is_a_stewards_call_like_pinning_one(
    person_with_role, bob, api_client, session_client
):
    url = f"projects/{bob.project.id}/memories"
    as_bob = api_client(bob.key)
    assert as_bob.post(url, _body(pinned=True)).status_code == 403
    batch = {"memories": [_body(content="plain"), _body(content="pinned", pinned=True)]}
    assert as_bob.post(url, batch).status_code == 403
    assert not Memory.objects.filter(project=bob.project).exists()  # nothing of the batch either
    assert as_bob.post(url, _body(pinned=False)).status_code == 201
    steward = session_client(person_with_role(Role.STEWARD), enforce_csrf=False)
    created = steward.post(url, _body(content="Pinned by a steward.", pinned=True))
    assert created.status_code == 201 and created.json()["pinned"]


def test_scope_visibility(alice, bob, org_a, api_client, session_client):
    team = TeamFactory(organization=org_a)
    team_project = ProjectFactory(organization=org_a, team=team)
    other_project = ProjectFactory(organization=org_a)
    personal = make_memory(alice, content="alice only", scope="personal", principal=alice.principal)
    team_memory = make_memory(alice, project=team_project, content="team fact", scope="team")
    org_memory = make_memory(alice, content="org fact", scope="org")
    alice_api = session_client(alice, enforce_csrf=False)

    def listed(client, project):
        return {m["content"] for m in _get(client, f"projects/{project.id}/memories").json()["items"]}

    bob_session = session_client(bob, enforce_csrf=False)
    assert "alice only" in listed(alice_api, alice.project)
    assert "alice only" not in listed(bob_session, alice.project)
    assert bob_session.get(f"memories/{personal.id}").status_code == 404
    assert "team fact" in listed(alice_api, team_project)
    assert "team fact" not in listed(alice_api, other_project)
    assert "org fact" in listed(alice_api, other_project) and "org fact" in listed(bob_session, other_project)
    assert api_client(alice.key).get(f"memories/{team_memory.id}").status_code == 200
    assert api_client(alice.key).get(f"memories/{org_memory.id}").status_code == 200


def test_patch_refuses_null_for_fields_that_cannot_be_null(alice, api_client):
    from tests.memories.factories import make_memory

    memory = make_memory(alice)
    response = api_client(alice.key).patch(f"memories/{memory.id}", {"commit_sha": None, "confidence": 0.5})
    assert response.status_code == 422
    assert "commit_sha" in str(response.json()["error"]["details"])
    assert (
        api_client(alice.key).patch(f"memories/{memory.id}", {"decay_half_life_days": None}).status_code
        == 200
    )


def _nested(depth: int) -> dict:
    value: dict = {"leaf": "x"}
    for _ in range(depth - 1):
        value = {"k": value}
    return value


def test_json_nested_past_the_depth_limit_is_a_422_naming_where(alice, api_client):
    """Every walker of a payload (the NUL check, the secret scanner) recursed: a payload 500 levels
    deep hit Python's recursion limit and answered 500."""
    from apps.memories.models import Memory
    from memorysaas.kernel.schemas import MAX_DEPTH

    client = api_client(alice.key)
    draft = {"type": "gotcha", "content": "Deep payloads are refused."}
    response = client.post(f"projects/{alice.project.id}/memories", {**draft, "payload": _nested(500)})
    assert response.status_code == 422, response.content
    assert f"deeper than {MAX_DEPTH} levels" in str(response.json()["error"])
    assert not Memory.objects.exists()
    created = client.post(
        f"projects/{alice.project.id}/memories", {**draft, "payload": _nested(MAX_DEPTH - 2)}
    )
    assert created.status_code == 201, created.content
    patched = client.patch(f"memories/{created.json()['id']}", {"payload": _nested(900)})
    assert patched.status_code == 422
    assert Memory.objects.get().version == 1


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("confidence", True, "valid number"),
        ("confidence", "0.9", "valid number"),
        ("pinned", "yes", "valid boolean"),
        ("pinned", 1, "valid boolean"),
        ("decay_half_life_days", False, "valid"),
    ],
)
def test_numbers_and_booleans_keep_their_json_types(alice, api_client, field, value, says):
    """Lax coercion stored `true` as confidence 1.0 and `"yes"` as pinned: a client's mistake
    became something it never said."""
    from apps.memories.models import Memory

    client = api_client(alice.key)
    draft = {"type": "gotcha", "content": "Types are kept.", field: value}
    response = client.post(f"projects/{alice.project.id}/memories", draft)
    assert response.status_code == 422, response.content
    details = str(response.json()["error"]["details"])
    assert field in details and says in details
    assert not Memory.objects.exists()


def test_the_list_text_filter_wants_every_character_pair_of_a_cjk_word(alice, api_client):
    # one shared pair (部署) is not a match for 部署时: any one pair matches most such text
    make_memory(alice, content="缓存键在每次部署时都会变化。")
    make_memory(alice, content="部署脚本在这里。")
    url = f"projects/{alice.project.id}/memories"
    client = api_client(alice.key)
    assert [m["content"] for m in _get(client, url, {"text": "部署时"}).json()["items"]] == [
        "缓存键在每次部署时都会变化。"
    ]
    assert len(_get(client, url, {"text": "部署"}).json()["items"]) == 2


def test_query_parameters_still_convert_from_text(alice, api_client):
    from tests.memories.factories import make_memory

    make_memory(alice, confidence=0.9)
    listed = api_client(alice.key).get(
        f"projects/{alice.project.id}/memories",
        {"min_confidence": "0.5", "limit": "5", "needs_review": "false"},
    )
    assert listed.status_code == 200, listed.content
    assert len(listed.json()["items"]) == 1


def test_an_invalid_patch_names_the_field_in_structured_details(alice, api_client):
    """The details were pydantic's error printed as one string, unlike every other 422."""
    from tests.memories.factories import make_memory

    memory = make_memory(alice)  # a gotcha, without a recipe's payload
    change = {"type": "dead_end", "payload": {"approach_tried": ""}}
    response = api_client(alice.key).patch(f"memories/{memory.id}", change)
    assert response.status_code == 422, response.content
    details = response.json()["error"]["details"]
    assert details and all(set(d) == {"loc", "msg", "type"} for d in details)
    assert any(d["loc"][:1] == ["payload"] for d in details), details


@pytest.mark.parametrize("path", ["projects/{project}/memories", "projects/{project}/graph/index"])
def test_json_too_deep_for_the_parser_itself_is_a_422(alice, api_client, path):
    """Past about a thousand levels json.loads gives up with a RecursionError: a 500 on the graph
    batch, ninja's generic 400 elsewhere."""
    body = '{"files": ' + "[" * 3000 + "]" * 3000 + "}"
    response = api_client(alice.key).post(
        path.format(project=alice.project.id), body, content_type="application/json"
    )
    assert response.status_code == 422, response.content
    assert "nests deeper than" in response.json()["error"]["message"]


def test_a_relation_to_someone_elses_personal_memory_is_not_shown(alice, bob, api_client):
    """A shared memory derived from its author's personal note named the note's id to every
    teammate (who gets 404 for the note itself)."""
    personal = make_memory(alice, content="alice only", scope="personal", principal=alice.principal)
    client = api_client(alice.key)
    body = _body(
        content="Shared, from a personal note.",
        relations=[
            {"relation_type": "derived_from", "target_memory_id": str(personal.id)},
            {"relation_type": "validates", "target_file_path": "src/a.py"},
        ],
    )
    shared = client.post(f"projects/{alice.project.id}/memories", body).json()

    def relations(key):
        return api_client(key).get(f"memories/{shared['id']}").json()["relations"]

    assert [r["target_memory_id"] for r in relations(alice.key)] == [str(personal.id), None]
    assert [r["target_memory_id"] for r in relations(bob.key)] == [None]
    listed = api_client(bob.key).get(f"projects/{alice.project.id}/memories").json()["items"]
    assert str(personal.id) not in str(listed)


def test_a_memory_that_held_a_secret_leaves_review_only_through_a_steward(
    alice, bob, person_with_role, api_client, session_client
):
    """Its review waits for a steward (README), yet any member could end it with a confirm or
    `needs_review: false`."""
    client = api_client(bob.key)
    body = _body(content="Deploy with AWS key AKIAIOSFODNN7EXAMPLE set in the shell.")
    made = client.post(f"projects/{alice.project.id}/memories", body).json()
    assert made["needs_review"] and made["secrets_redacted"]
    url = f"memories/{made['id']}"
    assert client.patch(url, {"needs_review": False}).status_code == 403
    assert client.post(f"{url}/feedback", {"kind": "confirm"}).status_code == 403
    assert client.patch(url, {"tags": ["deploy"]}).status_code == 200  # the rest of an edit is theirs
    corrected = client.post(f"{url}/feedback", {"kind": "correct", "content": "Deploy with the CI key."})
    assert corrected.status_code == 200  # the correction is kept, and still waits
    assert (corrected.json()["needs_review"], corrected.json()["user_verified"]) == (True, False)
    assert client.get(url).json()["needs_review"] is True
    steward = session_client(person_with_role(Role.STEWARD), enforce_csrf=False)
    assert steward.post(f"{url}/feedback", {"kind": "confirm"}).json()["needs_review"] is False
    assert client.post(f"{url}/feedback", {"kind": "confirm"}).status_code == 200  # nothing to end


def test_relations_are_checked_in_one_query_however_many_memories_have_them(alice, api_client):
    """The visibility of each memory's relation targets was asked once per memory (an N+1 over a
    page of 200)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client = api_client(alice.key)
    url = f"projects/{alice.project.id}/memories"

    def related_pair(n):
        target = client.post(url, _body(content=f"Target {n}.")).json()["id"]
        relation = {"relation_type": "derived_from", "target_memory_id": target}
        client.post(url, _body(content=f"Derived {n}.", relations=[relation]))

    def queries_for_the_list() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(url, {"limit": 200}).status_code == 200
        return len(captured)

    related_pair(1)
    few = queries_for_the_list()
    for n in range(2, 6):
        related_pair(n)
    assert queries_for_the_list() == few
