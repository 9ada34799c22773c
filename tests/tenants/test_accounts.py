"""Accounts through django-allauth: signup, verification, login, password reset, TOTP MFA."""

import re
import time

from allauth.mfa.models import Authenticator
from allauth.mfa.totp.internal.auth import SECRET_SESSION_KEY, format_hotp_value, hotp_value
from django.core import mail
from django.test import Client

from apps.tenants.models import Membership, Project, User
from apps.tenants.roles import Role
from tests.conftest import PASSWORD


def _link_in(message, pattern: str) -> str:
    match = re.search(rf"https?://[^\s]+{pattern}[^\s]*", message.body)
    assert match, message.body
    return match.group(0).split("testserver", 1)[-1] if "testserver" in match.group(0) else match.group(0)


def _path(url: str) -> str:
    return re.sub(r"^https?://[^/]+", "", url)


def test_signup_creates_a_personal_org_with_a_first_project_and_asks_to_verify(db):
    client = Client()
    response = client.post(
        "/accounts/signup/", {"email": "Dana@Example.com", "password1": PASSWORD, "password2": PASSWORD}
    )
    assert response.status_code == 302
    user = User.objects.get(email="dana@example.com")
    membership = Membership.objects.get(user=user)
    assert membership.role == Role.OWNER and membership.organization.is_personal
    assert Project.objects.filter(organization=membership.organization).count() == 1
    assert len(mail.outbox) == 1 and "confirm" in mail.outbox[0].body.lower()


def test_a_long_address_signs_up_whole_with_a_workspace_named_to_fit(db):
    """The workspace's name ("<address>'s workspace") overflowed its 120 characters: a 500, and a
    user left behind with no workspace, who could neither sign up again nor use the account."""
    email = "a" * 110 + "@example.com"
    response = Client().post(
        "/accounts/signup/", {"email": email, "password1": PASSWORD, "password2": PASSWORD}
    )
    assert response.status_code == 302
    organization = Membership.objects.get(user__email=email).organization
    assert organization.is_personal and len(organization.name) <= 120


def test_login_waits_for_email_verification_then_lands_on_the_project(db):
    client = Client()
    client.post(
        "/accounts/signup/", {"email": "erin@example.com", "password1": PASSWORD, "password2": PASSWORD}
    )
    client.logout()
    blocked = client.post("/accounts/login/", {"login": "erin@example.com", "password": PASSWORD})
    assert "/accounts/confirm-email/" in blocked.url
    confirm_path = _path(re.search(r"https?://\S+/accounts/confirm-email/\S+", mail.outbox[-1].body).group(0))
    assert client.post(confirm_path).status_code == 302
    home = client.get("/", follow=True)
    assert home.status_code == 200
    assert b"My first project" in home.content


def test_password_reset_sends_a_working_link(alice):
    client = Client()
    client.post("/accounts/password/reset/", {"email": alice.user.email})
    assert len(mail.outbox) == 1
    reset_path = _path(
        re.search(r"https?://\S+/accounts/password/reset/key/\S+", mail.outbox[0].body).group(0)
    )
    form_page = client.get(reset_path, follow=True)
    assert form_page.status_code == 200
    new_password = "a-brand-new-passphrase-42"
    done = client.post(
        form_page.redirect_chain[-1][0] if form_page.redirect_chain else reset_path,
        {"password1": new_password, "password2": new_password},
    )
    assert done.status_code == 302
    alice.user.refresh_from_db()
    assert alice.user.check_password(new_password)


def _current_code(secret: str) -> str:
    return format_hotp_value(hotp_value(secret, int(time.time()) // 30))


def test_totp_mfa_can_be_enabled_and_is_then_required_at_login(alice):
    client = Client()
    client.post("/accounts/login/", {"login": alice.user.email, "password": PASSWORD})
    assert client.get("/accounts/2fa/totp/activate/").url.startswith("/accounts/reauthenticate/")
    client.post("/accounts/reauthenticate/", {"password": PASSWORD})
    page = client.get("/accounts/2fa/totp/activate/")
    assert page.status_code == 200
    secret = client.session[SECRET_SESSION_KEY]
    activated = client.post("/accounts/2fa/totp/activate/", {"code": _current_code(secret)})
    assert activated.status_code == 302
    assert Authenticator.objects.filter(user=alice.user, type=Authenticator.Type.TOTP).exists()

    fresh = Client()
    step = fresh.post("/accounts/login/", {"login": alice.user.email, "password": PASSWORD})
    assert step.url.startswith("/accounts/2fa/authenticate")
    assert fresh.get("/o/acme/members/").status_code == 302  # not signed in yet
    wrong = fresh.post("/accounts/2fa/authenticate/", {"code": "000000"})
    assert wrong.status_code == 200
    assert fresh.get("/o/acme/members/").status_code == 302
