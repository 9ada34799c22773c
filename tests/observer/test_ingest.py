"""The observer through its API: opening sessions, ingesting event batches (idempotent, validated
whole, secrets and private spans never stored), validation, completion, and the scratchpad
across processes (services.py)."""

from __future__ import annotations

import copy
import json

import psycopg
import pytest
from django.db import transaction

from apps.observer import services
from apps.observer.models import EventBatch, Session
from apps.observer.traces import Trace
from tests.processes import database_url
from tests.tables import tables_holding

pytestmark = pytest.mark.django_db(transaction=False)


def test_open_returns_an_id_a_group_and_a_start_plan(agent):
    session = agent.open(
        methodology="bmad", phase="dev", work_unit={"hierarchy": ["epic_3", "story_3_2"]}, task="add refunds"
    )
    assert session["ab_group"] in ("full", "passive", "control")
    assert session["universal_phase"] == "implement"
    assert session["work_unit"] == {
        "methodology": "bmad",
        "hierarchy": ["epic_3", "story_3_2"],
        "label": "Epic epic_3 / Story story_3_2",
    }
    assert set(session["start_context"]) == {"modules", "prefetch", "work_state", "recipes"}


def test_the_same_batch_twice_leaves_the_same_state(agent):
    session = agent.open()
    events = Trace().read("shop/a.py").edit("shop/b.py").events
    first = agent.send(session["id"], events)
    stored = Session.objects.get(id=session["id"])
    pad_before = services.load_scratchpad(stored).to_dict()
    again = agent.send(session["id"], events)
    assert (first["accepted"], first["duplicates"]) == (len(events), 0)
    assert (again["accepted"], again["duplicates"]) == (0, len(events))
    stored.refresh_from_db()
    assert stored.event_count == len(events) and EventBatch.objects.filter(session=stored).count() == 1
    assert services.load_scratchpad(stored).to_dict() == pad_before


def test_a_restarted_process_rebuilds_the_scratchpad_from_checkpoint_and_log(agent, monkeypatch):
    monkeypatch.setattr(services, "CHECKPOINT_EVERY", 4)
    session = agent.open()
    trace = Trace().read("shop/a.py").grep("total").edit("shop/b.py").think("Correction: totals live in b")
    agent.send(session["id"], trace.events[:5])
    agent.send(session["id"], trace.events[5:])
    stored = Session.objects.get(id=session["id"])
    live = services.load_scratchpad(stored).to_dict()
    assert 0 < stored.checkpoint_events < stored.event_count  # part checkpointed, part only in the log
    services._pads.clear()  # a new process
    assert services.load_scratchpad(stored).to_dict() == live
    agent.send(session["id"], trace.events)  # and it still knows every seq
    stored.refresh_from_db()
    assert stored.event_count == len(trace.events)


def test_a_validation_another_process_recorded_is_never_written_over(agent, monkeypatch):
    """A process's cached scratchpad counted as fresh while the event count matched; a validation
    changes the scratchpad and not the count, so the other process checkpointed its copy over it."""
    session = agent.open()
    agent.send(session["id"], Trace().read("shop/a.py").events)
    first_process = copy.deepcopy(services._pads)
    agent.validate(session["id"], False, report="from the second process")
    monkeypatch.setattr(services, "_pads", first_process)
    assert agent.validate(session["id"], True, report="from the first process")["validations"] == 2
    monkeypatch.setattr(services, "_pads", type(services._pads)())  # a third, with no copy at all
    pad = services.load_scratchpad(Session.objects.get(id=session["id"]))
    assert [v["report"] for v in pad.validations] == ["from the second process", "from the first process"]


def test_notes_another_process_injected_are_not_injected_again(agent, monkeypatch):
    session = agent.open()
    agent.send(session["id"], Trace().note("gotcha", "refund webhooks retry for a day").events)
    first_process = copy.deepcopy(services._pads)
    url = f"sessions/{session['id']}/step-injection"
    assert agent.client.post(url, {"step": 6}).json()["injection"]["type"] == "scratchpad_reflection"
    monkeypatch.setattr(services, "_pads", first_process)
    assert agent.client.post(url, {"step": 7}).json()["injection"] is None


def test_events_another_process_took_are_not_checkpointed_over(agent, monkeypatch):
    monkeypatch.setattr(services, "CHECKPOINT_EVERY", 2)
    session = agent.open()
    trace = Trace().read("shop/a.py").edit("shop/b.py").read("shop/c.py")
    agent.send(session["id"], trace.events[:2])
    first_process = copy.deepcopy(services._pads)
    agent.validate(session["id"], False, report="from the second process")
    monkeypatch.setattr(services, "_pads", first_process)
    agent.send(session["id"], trace.events[2:])  # (a checkpoint: four events since the last)
    monkeypatch.setattr(services, "_pads", type(services._pads)())
    pad = services.load_scratchpad(Session.objects.get(id=session["id"]))
    assert [v["report"] for v in pad.validations] == ["from the second process"]
    assert list(pad.files) == ["shop/a.py", "shop/b.py", "shop/c.py"]


def test_more_than_a_thousand_events_is_a_413(agent):
    session = agent.open()
    events = [{"seq": i + 1, "type": "reasoning", "text": "x"} for i in range(1001)]
    response = agent.client.post(f"sessions/{session['id']}/events", {"events": events})
    assert response.status_code == 413 and response.json()["error"]["code"] == "batch_too_large"


def test_a_batch_with_invalid_events_is_refused_whole_with_each_bad_item(agent):
    session = agent.open()
    events = [
        {"seq": 1, "type": "tool_call", "tool": "Read", "args": {"file_path": "a.py"}},
        {"seq": 2, "type": "tool_call"},
        {"seq": 3, "type": "teleport"},
        {"seq": 0, "type": "reasoning", "text": "x"},
    ]
    response = agent.client.post(f"sessions/{session['id']}/events", {"events": events})
    assert response.status_code == 422
    details = response.json()["error"]["details"]
    assert [d["index"] for d in details] == [1, 2, 3]
    assert Session.objects.get(id=session["id"]).event_count == 0


def test_a_refused_batch_for_a_session_the_caller_may_not_write_to_is_a_404_or_403(
    agent, alice, charlie, api_client
):
    """The batch was checked before the session: an outsider or a read-only key learnt a 422."""
    from uuid import uuid4

    from apps.tenants.services import api_key_create

    session = agent.open()
    _, read_only = api_key_create(
        organization=alice.org, actor=alice.principal, name="read only", scopes=["memories:read"]
    )
    refused = [
        {"events": [{"seq": 1, "type": "teleport"}]},
        {"events": [{"seq": 1, "type": "reasoning", "text": "a\u0000b"}]},
        {"events": [{"seq": i + 1, "type": "reasoning", "text": "x"} for i in range(1001)]},
    ]
    for body in refused:
        assert api_client(charlie.key).post(f"sessions/{session['id']}/events", body).status_code == 404
        assert agent.client.post(f"sessions/{uuid4()}/events", body).status_code == 404
        assert api_client(read_only).post(f"sessions/{session['id']}/events", body).status_code == 403
    own = [agent.client.post(f"sessions/{session['id']}/events", body).status_code for body in refused]
    assert own == [422, 422, 413]


def test_paths_under_the_sessions_root_are_taken_relative_to_it(agent, alice):
    """Agents' tools name files by absolute path; the graph, memories and co-access all use
    repository-relative ones, so a session's paths never met them."""
    from apps.memories.services import memory_create
    from apps.memories.validation import MemoryDraft

    memory_create(
        project=alice.project,
        actor=alice.principal,
        draft=MemoryDraft(
            type="gotcha",
            content="Order totals round half-even.",
            related_files=["orders/models.py"],
            confidence=0.9,
        ),
    )
    root = "/home/ada/src/shop"
    session = agent.open(root=root + "/", files=[f"{root}/orders/models.py"])
    assert session["root"] == root
    assert session["start_context"]["modules"] == ["orders"]
    trace = (
        Trace()
        .read(f"{root}/orders/models.py")
        .edit(f"{root}/orders/views.py")
        .read("/etc/hosts")
        .note("gotcha", "Views recompute totals per request.", [f"{root}/orders/views.py"])
        .commit("abc123", [f"{root}/orders/views.py", "orders/urls.py"])
    )
    agent.send(session["id"], trace.events)
    stored = Session.objects.get(id=session["id"])
    assert stored.edited_files == ["orders/views.py"]
    assert set(services.load_scratchpad(stored).files) == {
        "orders/models.py",
        "orders/views.py",
        "/etc/hosts",
    }
    logged = EventBatch.objects.get(session=stored).events
    named = [
        *(e["args"]["file_path"] for e in logged if "file_path" in e.get("args", {})),
        *(f for e in logged for f in e.get("files", ())),
        *(f for e in logged for f in e.get("memory", {}).get("related_files", ())),
    ]
    assert named == [
        "orders/models.py",
        "orders/views.py",
        "/etc/hosts",
        "orders/views.py",
        "orders/urls.py",
        "orders/views.py",
    ]  # (a path outside the root is kept as sent)
    injected = agent.client.post(
        f"sessions/{session['id']}/step-injection", {"step": 6, "files": [f"{root}/orders/models.py"]}
    ).json()
    assert injected["injection"] and "half-even" in injected["injection"]["content"]
    context = agent.client.post(
        f"projects/{alice.project.id}/context", {"session_id": session["id"], "files": ["orders/views.py"]}
    ).json()
    assert "- (session note) Views recompute totals per request." in context["text"]


def test_a_glob_under_the_sessions_root_is_searched_as_the_repositorys_path(agent, alice):
    """A Glob names files by absolute path too (`/home/ada/src/shop/orders/models.py`), and the
    memories that already answer the search name the repository's path."""
    from apps.memories.services import memory_create
    from apps.memories.validation import MemoryDraft

    draft = MemoryDraft(type="gotcha", content="Totals round half-even.", related_files=["orders/models.py"])
    orders = memory_create(project=alice.project, actor=alice.principal, draft=draft)
    root = "/home/ada/src/shop"
    pattern = f"{root}/orders/models.py"
    session = agent.open(root=root)
    escaped = f"{root}/docs/\\[draft\\].md"  # a POSIX glob's escapes are no Windows separators
    trace = Trace().glob(pattern, [pattern]).grep(f"{root}/x|total").glob("/etc/*.conf", []).glob(escaped, [])
    agent.send(session["id"], trace.events)
    logged = EventBatch.objects.get(session_id=session["id"]).events
    patterns = [e["args"]["pattern"] for e in logged if e["type"] == "tool_call"]
    # (a Grep's pattern is a regex, kept as sent)
    assert patterns == ["orders/models.py", f"{root}/x|total", "/etc/*.conf", "docs/\\[draft\\].md"]

    url = f"sessions/{session['id']}/step-injection"
    injected = agent.client.post(url, {"step": 6, "searches": [pattern]}).json()["injection"]
    assert injected["type"] == "search_short_circuit" and injected["memory_ids"] == [str(orders.id)]


def test_a_completed_session_takes_no_more_events_and_completing_twice_changes_nothing(agent):
    session = agent.open()
    done = agent.complete(session["id"])
    again = agent.complete(session["id"])
    assert done["status"] == again["status"] == "completed" and done["finalized_at"] == again["finalized_at"]
    response = agent.client.post(
        f"sessions/{session['id']}/events", {"events": [{"seq": 1, "type": "reasoning", "text": "x"}]}
    )
    assert response.status_code == 409


def test_private_spans_never_stored(agent):
    session = agent.open()
    agent.send(session["id"], Trace().think("token is <private>sk-live-123</private> fine").events)
    stored = EventBatch.objects.get(session_id=session["id"]).events
    assert "sk-live-123" not in str(stored)


def test_a_note_with_a_secret_is_served_and_stored_redacted(agent):
    key = "sk-ant-api03-" + "Q7w9E2r4T6y8" * 4
    session = agent.open(task="deploy")
    trace = (
        Trace()
        .idle(5, "deploy/release.py")
        .think(f"MEMORY:gotcha: The deploy script reads {key} from the environment.")
        .note("gotcha", f"Staging deploys use the key {key} too.")
    )
    agent.send(session["id"], trace.events)
    context = agent.client.post(
        f"projects/{agent.project_id}/context", {"task": "deploy", "session_id": session["id"]}
    ).json()
    assert context["session_notes"] == 2 and context["text"].count("[REDACTED:anthropic_key]") == 2
    assert key not in context["text"]
    step = agent.client.post(f"sessions/{session['id']}/step-injection", {"step": 6}).json()
    assert "[REDACTED:" in step["injection"]["content"] and key not in step["injection"]["content"]
    stored = EventBatch.objects.get(session_id=session["id"]).events
    assert key not in str(stored) and key not in str(Session.objects.get(id=session["id"]).scratchpad)


def test_a_secret_anywhere_in_a_session_never_reaches_any_table(agent):
    """Tool output is where an agent's secrets turn up (`cat .env`, a failing request): every
    event is scanned before it is logged, as are the task and validation reports."""
    key = "sk-ant-api03-" + "Hx4Lm8Qp2Wz6" * 4
    edit = {"file_path": "deploy/settings.py", "new_string": f'KEY = "{key}"', "edits": [{"old": key}]}
    trace = (
        Trace()
        .read("deploy/.env", f"ANTHROPIC_API_KEY={key}\nDEBUG=1\n")
        .bash(f"curl -H 'x-api-key: {key}' https://api.example.com", f"401: key {key} revoked", error=True)
        ._tool("Edit", edit, "ok")
        .think(f"The key {key} was revoked; use the other one.")
        .note("gotcha", f"Staging uses {key}.", [f"deploy/{key}.env"])
        .commit(key, ["deploy/settings.py"])
    )
    work_unit = {"hierarchy": [f"rotate {key}"], "label": key, "parallel_group": key}
    session = agent.open(task=f"rotate {key}", client=key[:100], work_unit=work_unit)
    agent.send(session["id"], trace.events)
    agent.validate(session["id"], passed=True, work_unit=key, report=f"checked with {key}")
    agent.complete(session["id"])
    assert tables_holding(key[13:40]) == []
    logged = str(EventBatch.objects.get(session_id=session["id"]).events)
    assert logged.count("[REDACTED:anthropic_key]") == 9
    assert "DEBUG=1" in logged and "https://api.example.com" in logged  # the rest is kept as sent


def test_a_secret_only_a_detect_secrets_plugin_knows_is_redacted_in_events(agent):
    session = agent.open()
    agent.send(session["id"], Trace().read("config/db.yml", 'db_pass: "Zq8pW3nLx7"\nhost: db').events)
    logged = str(EventBatch.objects.get(session_id=session["id"]).events)
    assert "Zq8pW3nLx7" not in logged and "[REDACTED:keyword]" in logged and "host: db" in logged


def test_structured_arguments_lose_the_values_their_keys_name_as_credentials(agent):
    session = agent.open()
    env = {"DB_PASSWORD": "Xy9$kLm2pQ", "DEBUG": "1"}
    headers = {"Authorization": "Basic dXNlcjpwYXNzd29yZA=="}
    trace = Trace()._tool("Bash", {"command": "make deploy", "env": env}, "ok")
    trace = trace._tool("WebFetch", {"url": "https://ci.example.com", "headers": headers}, "200")
    agent.send(session["id"], trace.events)
    assert tables_holding("Xy9$kLm2pQ") == [] and tables_holding("dXNlcjpwYXNzd29yZA") == []
    calls = [e for e in EventBatch.objects.get(session_id=session["id"]).events if e["type"] == "tool_call"]
    assert calls[0]["args"]["env"] == {"DB_PASSWORD": "[REDACTED:password_assignment]", "DEBUG": "1"}
    assert calls[1]["args"]["headers"] == {"Authorization": "Basic [REDACTED:authorization_token]"}


def test_a_task_loses_its_private_spans_before_it_is_scanned(agent):
    """A secret's value runs to whitespace: redacted first, `password=x1y2<private>…` took the
    opening tag with it and the private text was stored."""
    session = agent.open(task="Rotate creds: password=x1y2<private>customer Jane Roe</private> done")
    task = Session.objects.get(id=session["id"]).task
    assert "Jane Roe" not in task and task.endswith("[private] done")


@pytest.mark.django_db(transaction=True)
@pytest.mark.django_db(transaction=True)
def test_a_validation_locks_its_session_and_not_the_project(agent):
    """Validation and completion hold the session's row while they promote; holding the
    project's row too kept every insert that names the project (a memory, an event batch)
    waiting, and could deadlock with one."""
    session = Session.objects.get(id=agent.open()["id"])
    with transaction.atomic():
        services._locked_open(session)
        with psycopg.connect(database_url(), autocommit=True) as other:
            project = other.execute(
                "SELECT 1 FROM tenants_project WHERE id = %s FOR KEY SHARE NOWAIT", [session.project_id]
            )
            assert project.fetchall() == [(1,)]
            with pytest.raises(psycopg.errors.LockNotAvailable):
                other.execute(
                    "SELECT 1 FROM observer_session WHERE id = %s FOR KEY SHARE NOWAIT", [session.id]
                )


def test_a_nul_character_in_an_event_is_a_422_and_stores_nothing(agent):
    session = agent.open()
    response = agent.client.post(
        f"sessions/{session['id']}/events", {"events": [{"seq": 1, "type": "reasoning", "text": "a\x00b"}]}
    )
    assert response.status_code == 422 and "NUL" in response.json()["error"]["message"]
    assert Session.objects.get(id=session["id"]).event_count == 0


@pytest.mark.parametrize(
    "event",
    [
        {"seq": 1, "type": "tool_call", "tool": "Edit", "args": {"file_path": "\ud800"}},
        {"seq": 1, "type": "tool_call", "tool": "NotebookEdit", "args": {"notebook_path": "nb\udfff.ipynb"}},
        {"seq": 1, "type": "tool_call", "tool": "Grep", "args": {"\ud83d": "x"}},
    ],
)
def test_a_lone_surrogate_in_an_event_is_a_422_and_stores_nothing(agent, event):
    """JSON can escape half a UTF-16 pair (\\ud800), which is no character and has no UTF-8
    form: an edited path holding one reached the database driver and answered 500."""
    session = agent.open()
    response = agent.client.post(f"sessions/{session['id']}/events", {"events": [event]})
    assert response.status_code == 422, response.content
    assert "lone surrogate" in response.json()["error"]["message"]
    assert Session.objects.get(id=session["id"]).event_count == 0
    pair = {**event, "args": {"file_path": "src/\U0001f600.py"}}  # an escaped pair is one character
    assert agent.client.post(f"sessions/{session['id']}/events", {"events": [pair]}).status_code == 200


def test_an_event_batch_not_in_utf8_is_malformed_not_a_500(agent):
    """json.loads guessed UTF-16 from the bytes, past the raw-body check for escaped surrogates."""
    session = agent.open()
    body = json.dumps(
        {"events": [{"seq": 1, "type": "tool_call", "tool": "Edit", "args": {"file_path": "\ud800"}}]}
    )
    response = agent.client.client.post(
        f"/api/v1/sessions/{session['id']}/events", body.encode("utf-16-le"), content_type="application/json",
        **agent.client.headers,
    )  # fmt: skip
    assert response.status_code == 400 and response.json()["error"]["code"] == "malformed_json"
    assert Session.objects.get(id=session["id"]).event_count == 0


def test_a_search_pattern_longer_than_a_postgresql_word_is_no_500(agent, alice):
    """A term past ~2,000 bytes reached to_tsquery: 'word is too long in tsquery'."""
    from tests.memories.factories import make_memory

    make_memory(alice, content="register_handler wires the refund hooks.")
    session = agent.open()
    for pattern in ["register_" + "a" * 400, "aa_" * 160]:
        response = agent.client.post(
            f"sessions/{session['id']}/step-injection", {"step": 8, "searches": [pattern]}
        )
        assert response.status_code == 200, response.content
    too_long = agent.client.post(
        f"sessions/{session['id']}/step-injection", {"step": 8, "searches": ["a" * 501]}
    )
    assert too_long.status_code == 422


def test_a_failed_validation_leaves_no_phantom_in_the_cached_scratchpad(agent, monkeypatch):
    """The cached scratchpad kept a validation whose transaction rolled back; the next one counted
    it and stored it, and finalize could read it as the last word."""
    session = agent.open()
    real = services._save_checkpoint

    def fail_once(*args, **kwargs):
        monkeypatch.setattr(services, "_save_checkpoint", real)
        raise RuntimeError("disk full")

    monkeypatch.setattr(services, "_save_checkpoint", fail_once)
    failed = agent.client.post(f"sessions/{session['id']}/validation", {"passed": False, "report": "phantom"})
    assert failed.status_code == 500  # (the failure this test injects, in the error envelope)
    assert agent.validate(session["id"], True, report="real")["validations"] == 1
    pad = services.load_scratchpad(Session.objects.get(id=session["id"]))
    assert [v["report"] for v in pad.validations] == ["real"]


def test_tool_arguments_nested_past_the_depth_limit_are_a_422_and_store_nothing(agent):
    """The secret scanner walks the arguments recursively: 500 levels answered 500."""
    args: dict = {"path": "a.py"}
    for _ in range(500):
        args = {"k": args}
    session = agent.open()
    events = [{"seq": 1, "type": "tool_call", "tool": "Read", "args": args}]
    response = agent.client.post(f"sessions/{session['id']}/events", {"events": events})
    assert response.status_code == 422 and "deeper than" in str(response.json()["error"])
    assert Session.objects.get(id=session["id"]).event_count == 0


def test_an_event_seq_of_true_and_a_validation_passed_of_yes_are_422s(agent):
    session = agent.open()
    response = agent.client.post(
        f"sessions/{session['id']}/events", {"events": [{"seq": True, "type": "reasoning", "text": "x"}]}
    )
    assert response.status_code == 422 and "valid integer" in str(response.json()["error"])
    response = agent.client.post(f"sessions/{session['id']}/validation", {"passed": "yes"})
    assert response.status_code == 422 and "valid boolean" in str(response.json()["error"])
    assert Session.objects.get(id=session["id"]).event_count == 0
