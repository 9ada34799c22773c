"""The weekly synthesis: written by the LLM when one is configured (a fake OpenAI server on
127.0.0.1 here), by the template otherwise or when the call fails; emailed to stewards, admins
and owners who have not opted out; announced to the organization's webhooks; written once."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core import mail
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from apps.insights import weekly
from apps.insights.history import WeeklySynthesis
from apps.tenants.roles import Role
from apps.webhooks.models import WebhookDelivery, WebhookEndpoint


class FakeChat(BaseHTTPRequestHandler):
    requests: list[dict] = []
    status = 200
    answer = ""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeChat.requests.append({"path": self.path, **body})
        if FakeChat.status != 200:
            payload = {"error": {"message": "down", "type": "server_error"}}
        else:
            payload = {
                "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": FakeChat.answer}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30},
            }  # fmt: skip
        raw = json.dumps(payload).encode()
        self.send_response(FakeChat.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def fake_chat(settings):
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeChat)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    settings.OPENAI_API_KEY = "test-key"
    settings.OPENAI_BASE_URL = f"http://127.0.0.1:{server.server_port}/v1"
    FakeChat.requests, FakeChat.status, FakeChat.answer = [], 200, ""
    yield FakeChat
    server.shutdown()
    server.server_close()


@pytest.fixture
def week(alice):
    """Last week in alice's project: two memories learned, one of them a dead end injected into
    a session, and a dispute."""
    from apps.governance import services as governance
    from apps.observer.models import Session
    from tests.memories.factories import make_memory

    start = weekly.last_week()
    during = timezone.make_aware(
        timezone.datetime.combine(start + timedelta(days=2), timezone.datetime.min.time())
    )
    gotcha = make_memory(
        alice, type="gotcha", content="The staging database refuses connections before 06:00 UTC."
    )
    dead_end = make_memory(
        alice, type="dead_end", content="Vendoring the SDK broke its type stubs; pin it instead."
    )
    governance.dispute_open(memory=gotcha, actor=alice.principal, reason="It opens at 05:00 now.")
    session = Session.objects.create(
        organization=alice.org,
        project=alice.project,
        injected_memory_ids=[dead_end.id, dead_end.id, gotcha.id],
    )
    type(gotcha).objects.filter(pk__in=[gotcha.pk, dead_end.pk]).update(created_at=during)
    Session.objects.filter(pk=session.pk).update(started_at=during)
    from apps.governance.models import Dispute

    Dispute.objects.filter(project=alice.project).update(created_at=during)
    return start


def test_the_template_writes_the_week_and_stewards_who_did_not_opt_out_get_it(
    week, alice, bob, person_with_role
):
    steward = person_with_role(Role.STEWARD)
    admin = person_with_role(Role.ADMIN)
    weekly.opt_out(organization_id=alice.org.id, user=admin.user, out=True)
    mail.outbox.clear()

    synthesis = weekly.synthesize(alice.project, week)

    assert not synthesis.used_llm
    assert "Learned: 2 new memories" in synthesis.text
    assert "Vendoring the SDK" in synthesis.text  # a dead end avoided
    assert "Disputed: 1 opened" in synthesis.text
    assert "not enough sessions yet" in synthesis.text
    assert synthesis.facts["dead_ends_avoided"]["count"] == 2
    assert synthesis.facts["used_most"][0]["injections"] == 2
    emailed = {m.to[0] for m in mail.outbox}
    assert emailed == {alice.user.email, steward.user.email}  # not bob (member), not the admin who opted out
    assert synthesis.emailed_to == 2
    assert weekly.synthesize(alice.project, week).pk == synthesis.pk  # written once
    assert WeeklySynthesis.objects.count() == 1 and len(mail.outbox) == 2


def test_the_llm_writes_the_week_when_one_is_configured(fake_chat, week, alice):
    fake_chat.answer = "A quiet, useful week: two memories learned, one dead end avoided twice."
    synthesis = weekly.synthesize(alice.project, week, email=False)
    assert synthesis.used_llm and synthesis.text == fake_chat.answer
    [request] = fake_chat.requests
    assert request["path"].endswith("/chat/completions")
    facts = json.loads(request["messages"][1]["content"])
    assert facts["learned"]["count"] == 2 and facts["dead_ends_avoided"]["count"] == 2


def test_a_failing_llm_falls_back_to_the_template(fake_chat, week, alice):
    fake_chat.status = 500
    synthesis = weekly.synthesize(alice.project, week, email=False)
    assert not synthesis.used_llm and "Learned: 2 new memories" in synthesis.text


def test_the_week_goes_to_webhooks_and_shows_on_the_dashboard(week, alice):
    WebhookEndpoint.objects.create(
        organization=alice.org,
        url="https://192.0.2.7/hook",
        secret="whsec_x",
        event_types=["insights.weekly"],
    )
    synthesis = weekly.synthesize(alice.project, week, email=False)
    delivery = WebhookDelivery.objects.get(event_type="insights.weekly")
    body = json.loads(delivery.body)
    assert body["data"]["week_start"] == week.isoformat() and body["data"]["text"] == synthesis.text
    client = Client()
    client.force_login(alice.user, backend="django.contrib.auth.backends.ModelBackend")
    page = client.get(reverse("insights", args=[alice.org.slug, alice.project.slug])).content.decode()
    assert 'data-testid="weekly-synthesis"' in page and "Learned: 2 new memories" in page


def test_opting_out_from_the_dashboard(alice):
    client = Client()
    client.force_login(alice.user, backend="django.contrib.auth.backends.ModelBackend")
    url = reverse("weekly_opt_out", args=[alice.org.slug, alice.project.slug])
    assert client.post(url, {}).status_code == 302  # the box unticked
    assert weekly.opted_out(organization_id=alice.org.id, user=alice.user)
    assert client.post(url, {"email": "on"}).status_code == 302
    assert not weekly.opted_out(organization_id=alice.org.id, user=alice.user)
