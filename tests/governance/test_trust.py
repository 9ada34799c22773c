"""Trust levels: thresholds, the offers the trust rules make, and who may accept them."""

from __future__ import annotations

import pytest
from django.conf import settings

from apps.governance import trust
from apps.governance.models import ProjectTrust, TrustLevel
from apps.memories import services as memory_services
from apps.memories.thresholds import injection_min_confidence
from apps.tenants.roles import Role
from tests.memories.factories import make_memory

pytestmark = pytest.mark.django_db


def _stats(**overrides) -> trust.TrustStats:
    values = {
        "sessions": 0,
        "memories": 10,
        "confirmed_memories": 0,
        "confirmations": 0,
        "corrections": 0,
        "flags": 0,
        "worst_session_flags": 0,
    }
    return trust.TrustStats(**{**values, **overrides})


def test_levels_and_thresholds():
    assert [trust.THRESHOLDS[level] for level in TrustLevel.values] == [0.80, 0.65, 0.55, 0.45]


def test_injection_threshold_follows_the_project_level(alice):
    assert injection_min_confidence(alice.project) == settings.MEMORY_INJECTION_MIN_CONFIDENCE
    ProjectTrust.objects.create(project=alice.project, organization=alice.org, level=TrustLevel.CONFIDENT)
    assert injection_min_confidence(alice.project) == 0.55


def test_context_holds_a_disputed_memory_to_its_confidence_times_0_8(alice, api_client):
    ProjectTrust.objects.create(project=alice.project, organization=alice.org, level=TrustLevel.CAUTIOUS)
    kept = make_memory(alice, type="gotcha", content="Refund totals are cached for 60 s.", confidence=0.85)
    disputed = make_memory(
        alice, type="gotcha", content="Refund totals are rounded per line.", confidence=0.85
    )
    memory_services.memory_feedback(memory=disputed, actor=alice.principal, kind="dispute")
    response = api_client(alice.key).post(
        f"projects/{alice.project.id}/context", {"phase": "implement", "task": "refund totals"}
    )
    assert response.status_code == 200, response.content
    # Cautious injects from 0.80: 0.85 passes, a disputed 0.85 is used as 0.68 and does not
    assert [m["id"] for m in response.json()["memories"]] == [str(kept.id)]


@pytest.mark.parametrize(
    ("level", "stats", "expected"),
    [
        (None, _stats(), (1, "advance")),
        (1, _stats(sessions=2, confirmed_memories=10), None),
        (1, _stats(sessions=3, confirmed_memories=4), None),
        (1, _stats(sessions=3, confirmed_memories=5), (2, "advance")),
        (2, _stats(sessions=10, confirmations=20, corrections=1), (3, "advance")),
        (2, _stats(sessions=10, confirmations=19, corrections=1), None),  # exactly 5%: not under
        (2, _stats(sessions=9, confirmations=100), None),
        (2, _stats(sessions=30), None),  # no judgements yet: no evidence
        (3, _stats(sessions=100, confirmations=100), None),  # Autonomous is opt-in only
        (3, _stats(worst_session_flags=3), (2, "regress")),
        (2, _stats(worst_session_flags=2), None),
        (1, _stats(worst_session_flags=5), None),
    ],
)
def test_offer_rules(level, stats, expected):
    offer = trust.offer_for(level, stats)
    assert (offer.level, offer.direction) == expected if expected else offer is None


def test_allowed_levels():
    assert trust.allowed_levels(None, trust.Offer(1, "advance", "")) == [1]
    assert trust.allowed_levels(2, None) == [1]
    assert trust.allowed_levels(3, None) == [1, 2, 4]


def test_stats_come_from_feedback(alice):
    principal = alice.principal
    memories = [
        make_memory(alice, content=f"Fact {i} about the build.", session_id=f"s{i}") for i in range(4)
    ]
    memory_services.memory_feedback(memory=memories[0], actor=principal, kind="confirm", session_id="s9")
    memory_services.memory_feedback(memory=memories[1], actor=principal, kind="confirm")
    for memory in memories[1:]:
        memory_services.memory_feedback(memory=memory, actor=principal, kind="flag", session_id="s10")
    stats = trust.trust_stats(alice.project)
    assert (stats.sessions, stats.memories, stats.confirmed_memories) == (6, 4, 2)
    assert (stats.confirmations, stats.flags, stats.worst_session_flags) == (2, 3, 3)


@pytest.mark.parametrize(
    ("role", "status"),
    [(Role.VIEWER, 403), (Role.MEMBER, 403), (Role.STEWARD, 403), (Role.ADMIN, 200), (Role.OWNER, 200)],
)
def test_only_admins_and_owners_accept_a_level(api_client, person_with_role, role, status):
    person = person_with_role(role)
    url = f"projects/{person.project.id}/trust"
    assert api_client(person.key).get(url).json()["offer"]["level"] == 1
    response = api_client(person.key).put(url, {"level": 1})
    assert response.status_code == status, response.content
    if status == 200:
        body = response.json()
        assert body["level"] == 1 and body["injection_min_confidence"] == 0.80 and body["offer"] is None


def test_a_level_not_on_offer_is_refused(api_client, alice):
    url = f"projects/{alice.project.id}/trust"
    response = api_client(alice.key).put(url, {"level": 3})
    assert response.status_code == 409 and 3 not in response.json()["error"]["details"]["allowed"]
    assert not ProjectTrust.objects.exists()


def test_a_level_of_true_is_not_level_one(api_client, alice):
    """Lax coercion read `{"level": true}` as level 1 and set it."""
    response = api_client(alice.key).put(f"projects/{alice.project.id}/trust", {"level": True})
    assert response.status_code == 422 and "valid integer" in str(response.json()["error"])
    assert not ProjectTrust.objects.exists()


def test_trust_page_shows_and_accepts_the_offer(session_client, alice, bob):
    page = f"/o/{alice.org.slug}/p/{alice.project.slug}/trust/"
    client = session_client(alice, enforce_csrf=False)
    html = client.client.get(page).content.decode()
    assert "Suggested: move to Cautious" in html and "Accept: Cautious" in html
    response = client.client.post(page + "set/", {"level": "1"})
    assert response.status_code == 302
    assert ProjectTrust.objects.get(project=alice.project).level == 1
    assert "Trust: Cautious (L1)" in client.client.get(page).content.decode()
    as_member = session_client(bob, enforce_csrf=False).client
    assert "Accept:" not in as_member.get(page).content.decode()
    assert as_member.post(page + "set/", {"level": "1"}).status_code == 403


def test_owners_and_admins_hear_of_a_regression_offer_once(alice, bob, person_with_role):
    from apps.governance.models import Notification

    admin = person_with_role(Role.ADMIN)
    ProjectTrust.objects.create(project=alice.project, organization=alice.org, level=TrustLevel.STANDARD)
    memories = [make_memory(alice, content=f"Claim {i} about deploys.") for i in range(4)]
    for memory in memories:
        memory_services.memory_feedback(memory=memory, actor=bob.principal, kind="flag", session_id="s1")
    offers = Notification.objects.filter(kind="trust.offer")
    assert {n.user_id for n in offers} == {alice.user.pk, admin.user.pk}
    assert "step back to Cautious" in offers[0].title and "/trust/" in offers[0].url
