"""Webhooks end to end: a real receiver on 127.0.0.1 checks every signature; events from the
apps that own them become signed deliveries; a failed attempt is retried once it is due; private
addresses are refused unless the setting allows them."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from apps.webhooks import services, signing
from apps.webhooks.models import DeliveryStatus, WebhookAttempt, WebhookDelivery, WebhookEndpoint
from apps.webhooks.ssrf import UnsafeUrl, check_url


class Receiver:
    """An HTTP server that checks each request's signature and answers from a script of statuses
    (the last one repeats)."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = list(statuses)
        self.secret = ""
        self.requests: list[dict] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                header = self.headers.get(signing.HEADER, "")
                receiver.requests.append(
                    {
                        "verified": signing.verify(receiver.secret, header, body),
                        "event": self.headers.get("Memorysaas-Event"),
                        "body": json.loads(body),
                    }
                )
                status = receiver.statuses.pop(0) if len(receiver.statuses) > 1 else receiver.statuses[0]
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def sending(settings):
    settings.WEBHOOKS_SEND = True
    settings.WEBHOOKS_ALLOW_PRIVATE_URLS = True  # the receiver is on 127.0.0.1
    return settings


def _open_dispute(person):
    from apps.governance import services as governance
    from tests.memories.factories import make_memory

    memory = make_memory(person, content="Releases are cut from main on Tuesdays.")
    return governance.dispute_open(memory=memory, actor=person.principal, reason="We cut them on Mondays.")


def test_a_500_then_200_gives_exactly_one_successful_delivery_after_the_retry(
    sending, alice, charlie, api_client
):
    with Receiver([500, 200]) as receiver:
        created = api_client(alice.key).post(
            f"orgs/{alice.org.slug}/webhooks", {"url": receiver.url, "event_types": ["dispute.opened"]}
        )
        assert created.status_code == 201, created.content
        receiver.secret = created.json()["secret"]
        assert receiver.secret.startswith("whsec_")

        dispute = _open_dispute(alice)
        _open_dispute(charlie)  # another organization's event reaches no endpoint of alice's

        delivery = WebhookDelivery.objects.get()
        assert delivery.attempts == 1 and delivery.status == DeliveryStatus.PENDING  # the 500
        assert delivery.next_attempt_at > timezone.now() + timedelta(seconds=20)
        assert services.deliver_due() == 0  # not due yet: nothing is sent
        later = delivery.next_attempt_at + timedelta(seconds=1)
        assert services.deliver_due(now=later) == 1
        assert services.deliver_due(now=later + timedelta(hours=1)) == 0  # delivered: never again

    assert [r["verified"] for r in receiver.requests] == [True, True]
    assert {r["event"] for r in receiver.requests} == {"dispute.opened"}
    body = receiver.requests[0]["body"]
    assert body["type"] == "dispute.opened" and body["organization_id"] == str(alice.org.id)
    assert body["data"]["dispute_id"] == str(dispute.id)
    assert receiver.requests[0]["body"]["id"] == receiver.requests[1]["body"]["id"]  # one event id
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.SUCCEEDED
    attempts = list(WebhookAttempt.objects.filter(delivery=delivery).order_by("number"))
    assert [(a.number, a.status_code, a.succeeded) for a in attempts] == [(1, 500, False), (2, 200, True)]
    assert all(a.response_ms is not None and a.response_ms >= 0 for a in attempts)
    assert WebhookAttempt.objects.filter(succeeded=True).count() == 1

    log = api_client(alice.key).get(f"orgs/{alice.org.slug}/webhooks/{delivery.endpoint_id}/deliveries")
    assert log.status_code == 200
    [row] = log.json()
    assert row["status"] == "succeeded"
    assert [a["status_code"] for a in row["attempt_log"]] == [500, 200]


def test_redelivery_from_the_dashboard_sends_the_same_event_again(sending, alice):
    with Receiver([200]) as receiver:
        endpoint = services.endpoint_create(
            organization=alice.org, actor=alice.principal, url=receiver.url, event_types=["dispute.opened"]
        )
        receiver.secret = endpoint.secret
        _open_dispute(alice)
        delivery = WebhookDelivery.objects.get()
        client = Client()
        client.force_login(alice.user, backend="django.contrib.auth.backends.ModelBackend")
        page = client.get(reverse("webhook_detail", args=[alice.org.slug, endpoint.id]))
        assert page.status_code == 200 and b"succeeded" in page.content
        response = client.post(reverse("webhook_redeliver", args=[alice.org.slug, endpoint.id, delivery.id]))
        assert response.status_code == 302
    assert len(receiver.requests) == 2 and all(r["verified"] for r in receiver.requests)
    assert receiver.requests[0]["body"] == receiver.requests[1]["body"]
    manual = WebhookAttempt.objects.get(delivery=delivery, number=2)
    assert manual.manual and manual.succeeded


def test_a_flagged_memory_sends_review_needed_to_the_endpoints_that_asked_for_it(sending, alice, api_client):
    from tests.memories.factories import make_memory

    memory = make_memory(alice, content="The nightly job reads S3 credentials from the vault.")
    with Receiver([200]) as receiver:
        wanted = services.endpoint_create(
            organization=alice.org,
            actor=alice.principal,
            url=receiver.url,
            event_types=["memory.review_needed"],
        )
        services.endpoint_create(  # an endpoint for another event gets no delivery of this one
            organization=alice.org, actor=alice.principal, url=receiver.url, event_types=["dispute.opened"]
        )
        receiver.secret = wanted.secret
        flagged = api_client(alice.key).post(
            f"memories/{memory.id}/feedback", {"kind": "flag", "note": "stale"}
        )
        assert flagged.status_code == 200, flagged.content
        assert flagged.json()["needs_review"] is True
        delivery = WebhookDelivery.objects.get()
        assert delivery.endpoint_id == wanted.id and delivery.status == DeliveryStatus.SUCCEEDED
        again = api_client(alice.key).post(f"memories/{memory.id}/feedback", {"kind": "flag"})
        assert again.status_code == 200  # already waiting for review: no second event
    assert WebhookDelivery.objects.count() == 1
    [request] = receiver.requests
    assert request["verified"] and request["event"] == "memory.review_needed"
    assert request["body"]["data"] == {"project_id": str(alice.project.id), "memory_ids": [str(memory.id)]}


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/hook",
        "http://localhost/hook",
        "http://10.1.2.3/hook",
        "http://192.168.0.5/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://0.0.0.0/hook",
    ],
)
def test_a_private_address_is_refused_when_the_setting_is_off(settings, alice, api_client, url):
    settings.WEBHOOKS_ALLOW_PRIVATE_URLS = False
    response = api_client(alice.key).post(
        f"orgs/{alice.org.slug}/webhooks", {"url": url, "event_types": ["session.completed"]}
    )
    assert response.status_code == 422, response.content
    assert response.json()["error"]["code"] == "unsafe_url"
    assert not WebhookEndpoint.objects.exists()


def test_the_dashboard_form_refuses_a_private_address_too(settings, alice):
    settings.WEBHOOKS_ALLOW_PRIVATE_URLS = False
    client = Client()
    client.force_login(alice.user, backend="django.contrib.auth.backends.ModelBackend")
    response = client.post(
        reverse("webhooks", args=[alice.org.slug]),
        {"url": "http://127.0.0.1:8000/x", "event_types": ["dispute.opened"], "active": "on"},
    )
    assert response.status_code == 422
    assert b"private, loopback or link-local" in response.content
    assert not WebhookEndpoint.objects.exists()


def test_an_address_that_turned_private_is_refused_at_send_time(sending, alice):
    with Receiver([200]) as receiver:
        endpoint = services.endpoint_create(
            organization=alice.org, actor=alice.principal, url=receiver.url, event_types=["dispute.opened"]
        )
        sending.WEBHOOKS_ALLOW_PRIVATE_URLS = False
        _open_dispute(alice)
    assert receiver.requests == []
    delivery = WebhookDelivery.objects.get(endpoint=endpoint)
    assert delivery.status == DeliveryStatus.FAILED
    assert WebhookAttempt.objects.get(delivery=delivery).error.startswith("refused:")


def test_only_admins_manage_webhooks(bob, api_client):
    response = api_client(bob.key).get(f"orgs/{bob.org.slug}/webhooks")
    assert response.status_code == 403


def test_unknown_event_types_are_refused(alice, api_client):
    response = api_client(alice.key).post(
        f"orgs/{alice.org.slug}/webhooks", {"url": "https://192.0.2.1/x", "event_types": ["memory.eaten"]}
    )
    assert response.status_code == 422


def test_retries_back_off_exponentially(settings):
    settings.WEBHOOKS_RETRY_BASE_SECONDS = 30
    assert [services.retry_delay(n).total_seconds() for n in (1, 2, 3, 4)] == [30, 60, 120, 240]


def test_signatures_bind_body_secret_and_time():
    body = b'{"id":"1"}'
    header = signing.signature_header("whsec_a", body, timestamp=1_700_000_000)
    assert signing.verify("whsec_a", header, body, now=1_700_000_010)
    assert not signing.verify("whsec_b", header, body, now=1_700_000_010)
    assert not signing.verify("whsec_a", header, b'{"id":"2"}', now=1_700_000_010)
    assert not signing.verify("whsec_a", header, body, now=1_700_000_000 + 301)  # a replay
    assert not signing.verify("whsec_a", "v1=abc", body)
    assert signing.verify("whsec_a", signing.signature_header("whsec_a", body), body, now=time.time())


def test_check_url_accepts_a_public_address_and_refuses_schemes():
    assert check_url("https://93.184.216.34/hook", allow_private=False) == ["93.184.216.34"]
    with pytest.raises(UnsafeUrl):
        check_url("ftp://93.184.216.34/hook", allow_private=False)
    with pytest.raises(UnsafeUrl):
        check_url("http://user:pw@93.184.216.34/", allow_private=False)
    assert check_url("http://127.0.0.1/", allow_private=True) == ["127.0.0.1"]
