"""`memorysaas login`'s server side (RFC 8628) through its real endpoints: the two API calls a
device makes and the /device page a signed-in person approves it on."""

from __future__ import annotations

import secrets
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from apps.tenants.models import Device, DeviceAuthorization, Membership
from apps.tenants.roles import Role
from tests.conftest import ApiClient

GRANT = "urn:ietf:params:oauth:grant-type:device_code"


@pytest.fixture(autouse=True)
def no_wait(settings):
    """Polls may follow each other at once, unless a test asks for the real interval."""
    settings.DEVICE_FLOW_INTERVAL = 0


def start(name: str = "laptop") -> dict:
    response = ApiClient().post("device/code", {"device_name": name, "platform": "Linux x86_64"})
    assert response.status_code == 200, response.content
    return response.json()


def poll(code: dict):
    return ApiClient().post("device/token", {"grant_type": GRANT, "device_code": code["device_code"]})


def signed_in(person) -> Client:
    client = Client()
    client.force_login(person.user, backend="django.contrib.auth.backends.ModelBackend")
    return client


def decide(person, code: dict, *, project=None, decision: str = "approve"):
    body = {"user_code": code["user_code"], "decision": decision}
    if project is not None:
        body["project"] = str(project.id)
    return signed_in(person).post("/device/decide/", body)


def error_code(response, status: int = 400) -> str:
    assert response.status_code == status, response.content
    return response.json()["error"]["code"]


def test_an_approved_device_gets_a_key_of_its_own_for_the_chosen_project(bob):
    code = start("bob-laptop")
    assert code["verification_uri"].endswith("/device/")
    assert code["verification_uri_complete"].endswith(f"?user_code={code['user_code']}")
    assert error_code(poll(code)) == "authorization_pending"

    page = signed_in(bob).get("/device/", {"user_code": code["user_code"].lower().replace("-", " ")})
    assert (
        page.status_code == 200
        and b"bob-laptop" in page.content
        and bob.project.name.encode() in page.content
    )
    assert decide(bob, code, project=bob.project).status_code == 302

    token = poll(code)
    assert token.status_code == 200, token.content
    body = token.json()
    assert body["token_type"] == "Bearer" and body["project"]["id"] == str(bob.project.id)
    assert set(body["scope"].split()) == {
        "memories:read",
        "memories:write",
        "observer:write",
        "graph:write",
        "sync",
    }
    device = Device.objects.get(id=body["device_id"])
    assert (device.user, device.name, device.platform) == (bob.user, "bob-laptop", "Linux x86_64")
    assert device.api_key.project_id == bob.project.id
    me = ApiClient(body["access_token"]).get("me").json()
    assert me["project_limit"] == str(bob.project.id)
    # the key exists once: the code cannot be exchanged again
    assert error_code(poll(code)) == "invalid_grant"


def test_a_denied_login_gets_access_denied(alice):
    code = start()
    assert decide(alice, code, decision="deny").status_code == 302
    assert error_code(poll(code)) == "access_denied"
    assert not Device.objects.exists()


def test_an_unknown_or_expired_code_is_refused(alice):
    assert error_code(poll({"device_code": "no-such-code"}), 404) == "invalid_grant"
    page = signed_in(alice).get("/device/", {"user_code": "BCDF-GHJK"})
    assert page.status_code == 404 and b"No login is waiting" in page.content

    code = start()
    DeviceAuthorization.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert error_code(poll(code)) == "expired_token"
    assert signed_in(alice).get("/device/", {"user_code": code["user_code"]}).status_code == 404
    assert decide(alice, code, project=alice.project).status_code == 404


def test_polling_faster_than_the_interval_is_told_to_slow_down(settings, alice):
    settings.DEVICE_FLOW_INTERVAL = 5
    code = start()
    assert code["interval"] == 5
    assert error_code(poll(code)) == "authorization_pending"
    too_soon = poll(code)
    assert error_code(too_soon) == "slow_down"
    assert too_soon.json()["error"]["details"] == {"interval": 10}  # five seconds more, from now on
    assert DeviceAuthorization.objects.get().interval == 10
    # once the device waits as long as it was told, it hears that the login still waits
    DeviceAuthorization.objects.update(last_polled_at=timezone.now() - timedelta(seconds=10))
    assert error_code(poll(code)) == "authorization_pending"


def test_another_organizations_member_cannot_approve_into_it(alice, charlie):
    code = start()
    # charlie (org B) names alice's project (org A): not found, and nothing is decided
    assert decide(charlie, code, project=alice.project).status_code == 404
    authorization = DeviceAuthorization.objects.get()
    assert authorization.status == "pending" and authorization.organization_id is None
    page = signed_in(charlie).get("/device/", {"user_code": code["user_code"]})
    assert alice.project.name.encode() not in page.content and charlie.project.name.encode() in page.content
    assert error_code(poll(code)) == "authorization_pending"


def test_a_viewer_cannot_put_a_device_on_a_project(person_with_role):
    viewer = person_with_role(Role.VIEWER)
    code = start()
    page = signed_in(viewer).get("/device/", {"user_code": code["user_code"]})
    assert b"no project where your role may sync" in page.content
    decide(viewer, code, project=viewer.project)
    assert DeviceAuthorization.objects.get().status == "pending"


def test_a_person_removed_after_approving_registers_no_device(bob):
    code = start()
    decide(bob, code, project=bob.project)
    Membership.objects.filter(user=bob.user).delete()
    assert error_code(poll(code)) == "access_denied"
    assert not Device.objects.exists()


def test_the_endpoints_refuse_bad_bodies_with_the_envelope():
    client = ApiClient()
    assert client.post("device/code", {}).status_code == 422
    wrong_grant = client.post("device/token", {"grant_type": "password", "device_code": "x"})
    assert wrong_grant.status_code == 422 and wrong_grant.json()["error"]["code"] == "validation_error"


def test_guessing_user_codes_spends_the_addresses_failed_authentication_budget(settings, alice):
    settings.RATE_LIMIT_ENABLED = True
    settings.RATE_LIMIT_STORE = "postgres"
    settings.RATE_LIMIT_FAILED_AUTH_BURST = 2
    settings.RATE_LIMIT_FAILED_AUTH_PER_MINUTE = 1
    browser = signed_in(alice)
    address = {"HTTP_X_FORWARDED_FOR": f"2001:db8::{secrets.token_hex(2)}"}  # (a bucket of its own)
    code = start()
    for guess in ("BCDF-BCDF", "GHJK-GHJK"):
        assert browser.get("/device/", {"user_code": guess}, **address).status_code == 404
    refused = browser.get("/device/", {"user_code": code["user_code"]}, **address)
    assert refused.status_code == 429 and b"Too many unknown codes" in refused.content
