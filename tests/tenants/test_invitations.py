"""One open invitation per address: a spare link must not outlive a membership."""

from django.test import Client

from apps.tenants import services
from apps.tenants.models import Invitation, Membership
from tests.factories import UserFactory


def _accept(user, token) -> int:
    client = Client()
    client.force_login(user, backend="django.contrib.auth.backends.ModelBackend")
    return client.post(f"/invitations/{token}/").status_code


def test_a_removed_member_cannot_walk_back_in_through_a_spare_invitation(alice):
    """Inviting an address twice left two open links; after the invitee joined through one and was
    removed, the other let them back in on their own."""
    _, first = services.invitation_create(
        organization=alice.org, actor=alice.principal, email="dave@acme.test", role="member"
    )
    _, second = services.invitation_create(
        organization=alice.org, actor=alice.principal, email="Dave@acme.test", role="member"
    )
    assert Invitation.objects.pending().filter(email__iexact="dave@acme.test").count() == 1
    dave = UserFactory(email="dave@acme.test")
    assert _accept(dave, first) == 404  # replaced by the newer link
    assert _accept(dave, second) == 302
    membership = Membership.objects.get(user=dave, organization=alice.org)

    # a spare made before invitations replaced each other
    spare = Invitation.objects.create(
        organization=alice.org,
        email="DAVE@acme.test",
        role="member",
        token_hash=Invitation.hash_token("spare"),
        invited_by=alice.user,
        expires_at=Invitation.objects.get(email="dave@acme.test", accepted_at__isnull=False).expires_at,
    )
    someone_elses = Invitation.objects.create(
        organization=alice.org,
        email="dave.other@acme.test",  # an address dave added but never verified
        role="member",
        token_hash=Invitation.hash_token("other"),
        invited_by=alice.user,
        expires_at=spare.expires_at,
    )
    dave.emailaddress_set.create(email="dave.other@acme.test", verified=False, primary=False)
    services.membership_remove(membership=membership, actor=alice.principal)

    assert list(Invitation.objects.pending().filter(organization=alice.org)) == [someone_elses]
    assert _accept(dave, "spare") == 404
    assert not Membership.objects.filter(user=dave, organization=alice.org).exists()


def test_accepting_closes_the_other_links_to_that_address(alice):
    _, token = services.invitation_create(
        organization=alice.org, actor=alice.principal, email="erin@acme.test", role="member"
    )
    spare = Invitation.objects.create(
        organization=alice.org,
        email="ERIN@acme.test",
        role="member",
        token_hash="0" * 64,
        invited_by=alice.user,
        expires_at=Invitation.objects.get(email="erin@acme.test").expires_at,
    )
    assert _accept(UserFactory(email="erin@acme.test"), token) == 302
    spare.refresh_from_db()
    assert spare.revoked_at is not None
