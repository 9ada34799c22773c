"""Export my data, delete my account, and the same for an organization (GDPR: access and erasure).

Exports are built by the queued task (run inline here, as tests run django-q2 synchronously),
downloaded by their owner until the link expires. Deletion waits out a 30-day grace period that
can be cancelled, then erases the person in steps that are safe to run again after a crash.
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone
from django_q.models import OrmQ, Task
from django_q.signing import SignedPackage

from apps.governance.services import trust_level_set
from apps.memories.embedding.providers import cache_key
from apps.memories.models import EmbeddingCache, Memory, MemoryVersion
from apps.memories.services import embedding_text, memory_feedback, memory_update
from apps.tenants import gdpr, services
from apps.tenants.models import (
    ApiKey,
    AuditLog,
    DataExport,
    ExportStatus,
    Invitation,
    Membership,
    Organization,
    User,
)
from apps.tenants.roles import Role
from tests.conftest import csrf_token_for
from tests.memories.factories import make_memory


@pytest.fixture(autouse=True)
def _hashing_embeddings(settings):
    settings.EMBEDDING_PROVIDER = "hashing"
    settings.EMBEDDING_DIMENSIONS = 384


def _post(client, url, data=None):
    token = csrf_token_for(client)
    return client.post(url, {**(data or {}), "csrfmiddlewaretoken": token})


def _request_export(session_client, person, fmt: str, url: str = "/account/data/exports/"):
    client = session_client(person).client
    response = _post(client, url, {"format": fmt})
    assert response.status_code == 302
    export = DataExport.objects.filter(requested_by=person.user).latest("created_at")
    assert export.status == ExportStatus.READY, export.error
    return client, export


def _download(client, export):
    return client.get(f"/account/data/exports/{export.id}/download/")


def test_json_export_holds_everything_about_me_and_no_secret(alice, session_client):
    personal = make_memory(alice, content="I prefer rg over grep here.", type="preference", scope="personal")
    shared = make_memory(alice, content="Migrations must be reversible.", type="requirement")
    memory_feedback(memory=shared, actor=alice.principal, kind="confirm")
    device, device_key = services.device_register(
        organization=alice.org, actor=alice.principal, name="laptop"
    )
    services.invitation_create(
        organization=alice.org, actor=alice.principal, email="dora@else.test", role="member"
    )
    elsewhere = Organization.objects.create(name="Elsewhere", slug="elsewhere")
    Invitation.objects.create(
        organization=elsewhere, email="Alice@Acme.test", token_hash="x" * 64, expires_at=timezone.now()
    )
    Invitation.objects.create(
        organization=elsewhere, email="carol@acme.test", token_hash="y" * 64, expires_at=timezone.now()
    )
    # an address anyone may add to their account, unverified: not a way to read others' invitations
    alice.user.emailaddress_set.create(email="victim@corp.test", verified=False, primary=False)
    Invitation.objects.create(
        organization=elsewhere, email="victim@corp.test", token_hash="z" * 64, expires_at=timezone.now()
    )
    trust_level_set(project=alice.project, actor=alice.principal, level=1)

    client, export = _request_export(session_client, alice, "json")
    response = _download(client, export)

    assert response.status_code == 200
    assert response["Content-Disposition"].startswith('attachment; filename="memorysaas-my-data-')
    assert response["Cache-Control"] == "no-store"
    raw = response.content.decode()
    data = json.loads(raw)
    assert data["export"]["kind"] == "user"
    assert data["profile"]["email"] == "alice@acme.test"
    assert {o["slug"]: o["role"] for o in data["organizations"]} == {"acme": "owner"}
    assert {m["id"] for m in data["memories"]} == {str(personal.id), str(shared.id)}
    assert [f["kind"] for f in data["memory_feedback"]] == ["confirm"]
    assert [d["name"] for d in data["devices"]] == ["laptop"]
    assert [i["email"] for i in data["invitations_sent"]] == ["dora@else.test"]
    assert [i["organization"] for i in data["invitations_received"]] == ["elsewhere"]
    assert [(t["from_level"], t["to_level"]) for t in data["trust_changes"]] == [(None, 1)]
    assert {"memory.created", "device.registered"} <= {row["action"] for row in data["audit_log"]}
    assert any(k["display"] == alice.api_key.display for k in data["api_keys"])
    for secret in (alice.key, device_key, alice.key.split("_")[-1]):
        assert secret not in raw
    assert mail.outbox[-1].subject == "Your memorysaas export is ready"


def test_markdown_and_claude_md_exports_read_as_documents(alice, session_client):
    make_memory(
        alice,
        content="Never call save() inside a signal handler.",
        type="gotcha",
        related_files=["app/signals.py"],
    )
    make_memory(alice, content="Use snake_case for URL names.", type="preference")
    retired = make_memory(alice, content="Old rule nobody follows.", type="requirement")
    Memory.objects.filter(id=retired.id).update(deprecated=True)

    client, markdown = _request_export(session_client, alice, "markdown")
    text = _download(client, markdown).content.decode()
    assert text.startswith("# memorysaas export — Alice")
    assert "## Memories (3)" in text and "### acme/acme-api" in text
    assert "Never call save() inside a signal handler." in text

    _, claude = _request_export(session_client, alice, "claude_md")
    assert claude.filename.endswith(".CLAUDE.md")
    text = _download(client, claude).content.decode()
    assert text.startswith("# CLAUDE.md")
    pitfalls = text.split("## Pitfalls", 1)[1].split("##", 1)[0]
    assert "- Never call save() inside a signal handler. (files: app/signals.py)" in pitfalls
    assert "Use snake_case for URL names." in text.split("## Rules and conventions", 1)[1]
    assert "Old rule nobody follows." not in text


def test_download_link_belongs_to_its_requester_and_expires(alice, bob, session_client):
    client, export = _request_export(session_client, alice, "json")
    assert _download(session_client(bob).client, export).status_code == 404
    anonymous = _download(type(client)(), export)
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]

    assert gdpr.exports_expire(now=timezone.now() + timedelta(days=6)) == 0
    assert _download(client, export).status_code == 200
    assert gdpr.exports_expire(now=timezone.now() + timedelta(days=8)) == 1
    gone = _download(client, export)
    assert gone.status_code == 410
    assert b"no longer available" in gone.content
    export.refresh_from_db()
    assert export.status == ExportStatus.EXPIRED and export.content is None


def test_export_page_lists_exports_and_polls_only_while_one_is_pending(alice, session_client):
    client = session_client(alice).client
    export = DataExport.objects.create(requested_by=alice.user, format="json")
    page = client.get("/account/data/").content.decode()
    assert f'data-export="{export.id}"' in page and 'hx-trigger="every 3s"' in page
    gdpr.export_build(str(export.id))
    page = client.get("/account/data/").content.decode()
    assert 'hx-trigger="every 3s"' not in page
    assert f"/account/data/exports/{export.id}/download/" in page


def test_unknown_export_format_is_refused(alice, session_client):
    client = session_client(alice).client
    response = _post(client, "/account/data/exports/", {"format": "xml"})
    assert response.status_code == 302
    assert not DataExport.objects.exists()


def test_account_deletion_waits_out_its_grace_period_and_can_be_cancelled(bob, session_client):
    client = session_client(bob).client
    assert _post(client, "/account/delete/", {"confirm": "someone@else.test"}).status_code == 302
    bob.user.refresh_from_db()
    assert bob.user.deletion_requested_at is None

    _post(client, "/account/delete/", {"confirm": "BOB@acme.test"})
    bob.user.refresh_from_db()
    assert bob.user.deletion_requested_at is not None
    assert "will be deleted" in mail.outbox[-1].subject
    assert "scheduled for deletion" in client.get("/account/data/").content.decode()

    assert gdpr.deletions_process_due(now=timezone.now() + timedelta(days=29))["users"] == 0
    assert User.objects.filter(pk=bob.user.pk).exists()

    _post(client, "/account/delete/cancel/")
    bob.user.refresh_from_db()
    assert bob.user.deletion_requested_at is None
    assert gdpr.deletions_process_due(now=timezone.now() + timedelta(days=31))["users"] == 0
    assert User.objects.filter(pk=bob.user.pk).exists()

    _post(client, "/account/delete/", {"confirm": "bob@acme.test"})
    assert gdpr.deletions_process_due(now=timezone.now() + timedelta(days=31))["users"] == 1
    assert not User.objects.filter(pk=bob.user.pk).exists()


def test_the_only_owner_of_a_shared_org_cannot_delete_their_account(alice, bob, session_client):
    client = session_client(alice).client
    page = client.get("/account/data/").content.decode()
    assert "You are the only owner of" in page
    _post(client, "/account/delete/", {"confirm": "alice@acme.test"})
    alice.user.refresh_from_db()
    assert alice.user.deletion_requested_at is None


def _bob_with_data(bob):
    personal = make_memory(bob, content="My own scratch note about tox.", type="preference", scope="personal")
    shared = make_memory(bob, content="The API rate limit is 100/min.", type="requirement")
    memory_feedback(memory=shared, actor=bob.principal, kind="helpful")
    services.device_register(organization=bob.org, actor=bob.principal, name="bob-laptop")
    personal.refresh_from_db()  # embedded by the task that ran on commit
    assert personal.embedding_status == "ready"
    return personal, shared


def test_hard_delete_erases_the_person_and_keeps_the_teams_knowledge(alice, bob, api_client):
    personal, shared = _bob_with_data(bob)
    first_key = cache_key(embedding_text(personal), personal.embedding_model, personal.embedding_dims)
    memory_update(memory=personal, actor=bob.principal, changes={"content": "My own note about nox."})
    personal.refresh_from_db()
    personal_cache_key = cache_key(
        embedding_text(personal), personal.embedding_model, personal.embedding_dims
    )
    # Both texts were embedded: the first version's vector stays cached after the edit.
    assert EmbeddingCache.objects.filter(key__in=[first_key, personal_cache_key]).count() == 2
    user_id, label = bob.user.pk, f"user:{bob.user.pk}"

    counts = gdpr.account_hard_delete(user_id)

    assert counts["personal_memories"] == 1
    assert not User.objects.filter(pk=user_id).exists()
    assert not Memory.objects.filter(id=personal.id).exists()
    assert not EmbeddingCache.objects.filter(key__in=[first_key, personal_cache_key]).exists()
    shared.refresh_from_db()
    assert shared.owner_id is None and shared.content == "The API rate limit is 100/min."
    alias = gdpr.pseudonym("user", user_id)
    assert not AuditLog.objects.filter(actor_label=label).exists()
    assert not MemoryVersion.objects.filter(changed_by=label).exists()
    assert MemoryVersion.objects.filter(memory=shared, changed_by=alias).exists()
    assert AuditLog.objects.filter(action="account.deleted", actor_label=alias).exists()
    assert AuditLog.objects.filter(action="memory.created", actor_label=alias).exists()
    assert not ApiKey.objects.filter(prefix=bob.api_key.prefix, revoked_at__isnull=True).exists()
    assert api_client(bob.key).get("projects").status_code == 401
    assert gdpr.account_hard_delete(user_id) is None  # a second run finds nothing to do


def test_a_crashed_hard_delete_finishes_on_the_next_pass(alice, bob, monkeypatch):
    personal, shared = _bob_with_data(bob)
    bob.user.deletion_requested_at = timezone.now() - timedelta(days=31)
    bob.user.save()

    def crash(*args, **kwargs):
        raise RuntimeError("worker killed")

    monkeypatch.setattr(gdpr, "_pseudonymise_audit", crash)
    assert gdpr.deletions_process_due()["users"] == 0  # logged, not raised: others still run
    assert User.objects.filter(pk=bob.user.pk).exists()
    assert not Memory.objects.filter(id=personal.id).exists()  # steps before the crash stay done

    monkeypatch.undo()
    assert gdpr.deletions_process_due()["users"] == 1
    assert not User.objects.filter(pk=bob.user.pk).exists()
    assert gdpr.deletions_process_due()["users"] == 0


def _signed(func: str, *args) -> str:
    return SignedPackage.dumps(
        {"id": uuid.uuid4().hex, "name": "t", "func": func, "args": args, "kwargs": {}}
    )


def test_hard_delete_purges_queued_task_arguments_that_name_the_person(bob, alice):
    mine = OrmQ.objects.create(
        key="memorysaas", payload=_signed("apps.x.send", bob.user.email), lock=timezone.now()
    )
    other = OrmQ.objects.create(
        key="memorysaas", payload=_signed("apps.x.send", alice.user.email), lock=timezone.now()
    )
    for name, args, kwargs, result in (
        ("done", (), {"user_id": bob.user.pk}, None),
        # another tenant's work that happens to hold the same number: an index job's id, a count
        ("job", (bob.user.pk,), {}, {"deprecated": bob.user.pk}),
    ):
        Task.objects.create(
            id=uuid.uuid4().hex,
            name=name,
            func="apps.x.send",
            args=args,
            kwargs=kwargs,
            result=result,
            started=timezone.now(),
            stopped=timezone.now(),
            success=True,
        )
    queued_job = OrmQ.objects.create(
        key="memorysaas", payload=_signed("apps.graph.tasks.index_job_task", bob.user.pk), lock=timezone.now()
    )
    gdpr.account_hard_delete(bob.user.pk)
    assert not OrmQ.objects.filter(id=mine.id).exists()
    assert OrmQ.objects.filter(id=other.id).exists()
    assert not Task.objects.filter(name="done").exists()
    assert Task.objects.filter(name="job").exists() and OrmQ.objects.filter(id=queued_job.id).exists()


@pytest.mark.redis
@pytest.mark.skipif(
    not os.environ.get("REDIS_URL"), reason="needs a real Redis at REDIS_URL (the Redis broker)"
)
def test_purge_reaches_tasks_queued_in_redis(bob, alice):
    from django_q.brokers.redis_broker import Redis

    broker = Redis(list_key=f"gdpr-test-{uuid.uuid4().hex}")
    try:
        broker.enqueue(_signed("apps.x.send", f"user:{bob.user.pk}"))
        broker.enqueue(_signed("apps.x.send", alice.user.email))
        assert gdpr.purge_task_arguments(gdpr.user_identifiers(bob.user), broker=broker) == 1
        left = [
            SignedPackage.loads(item)["args"] for item in broker.connection.lrange(broker.list_key, 0, -1)
        ]
        assert left == [(alice.user.email,)]
    finally:
        broker.delete_queue()


def test_owner_exports_the_organization_without_members_personal_memories(alice, bob, session_client):
    make_memory(bob, content="Bob's private note.", type="preference", scope="personal")
    shared = make_memory(bob, content="Deploys happen on Tuesdays.", type="decision")
    client, export = _request_export(session_client, alice, "json", url="/o/acme/settings/export/")
    assert export.organization_id == alice.org.id
    data = json.loads(_download(client, export).content)
    assert data["export"]["kind"] == "organization"
    assert {m["email"]: m["role"] for m in data["members"]} == {
        "alice@acme.test": "owner",
        "bob@acme.test": "member",
    }
    assert [m["id"] for m in data["memories"]] == [str(shared.id)]
    assert [p["slug"] for p in data["projects"]] == ["acme-api"]


def test_an_organization_export_is_an_owners_only_while_they_own_it(alice, person_with_role, session_client):
    person_with_role(Role.OWNER)  # (someone must stay an owner)
    client, export = _request_export(session_client, alice, "json", url="/o/acme/settings/export/")
    assert _download(client, export).status_code == 200
    Membership.objects.filter(user=alice.user, organization=alice.org).update(role=Role.ADMIN)
    assert _download(session_client(alice).client, export).status_code == 403
    pending = DataExport.objects.create(requested_by=alice.user, organization=alice.org, format="json")
    gdpr.export_build(str(pending.id))
    pending.refresh_from_db()
    assert pending.status == ExportStatus.FAILED and pending.content is None


def test_only_owners_reach_organization_settings(alice, person_with_role, session_client):
    for role in (Role.ADMIN, Role.STEWARD, Role.MEMBER, Role.VIEWER):
        client = session_client(person_with_role(role)).client
        assert client.get("/o/acme/settings/").status_code == 403
        assert _post(client, "/o/acme/settings/delete/", {"confirm": "acme"}).status_code == 403
    assert session_client(alice).client.get("/o/acme/settings/").status_code == 200
    assert Organization.objects.get(slug="acme").deletion_requested_at is None


def test_organization_deletion_grace_cancel_and_hard_delete(alice, bob, session_client):
    memory = make_memory(alice, content="Cache keys include the tenant.", type="gotcha")
    client = session_client(alice).client
    _post(client, "/o/acme/settings/delete/", {"confirm": "acme"})
    org = Organization.objects.get(slug="acme")
    assert org.deletion_requested_at is not None
    assert "Scheduled for deletion" in client.get("/o/acme/settings/").content.decode()
    _post(client, "/o/acme/settings/delete/cancel/")
    org.refresh_from_db()
    assert org.deletion_requested_at is None

    _post(client, "/o/acme/settings/delete/", {"confirm": "acme"})
    result = gdpr.deletions_process_due(now=timezone.now() + timedelta(days=31))
    assert result["organizations"] == 1
    assert not Organization.objects.filter(id=alice.org.id).exists()
    assert not Memory.objects.filter(id=memory.id).exists()
    assert User.objects.filter(pk=bob.user.pk).exists()  # people outlive their organization
    alias = gdpr.pseudonym("organization", alice.org.id)
    assert AuditLog.objects.filter(action="organization.deleted", target_id=alias).exists()
    assert not AuditLog.objects.filter(target_id=str(alice.org.id)).exists()


def test_hard_delete_of_a_solo_user_removes_their_personal_workspace(db):
    user = User.objects.create_user("solo@example.test", "pw")
    project = services.personal_workspace_create(user=user)
    org_id = project.organization_id
    gdpr.account_hard_delete(user.pk)
    assert not Organization.objects.filter(id=org_id).exists()


def test_device_removal_revokes_its_key_and_others_devices_are_invisible(alice, bob, session_client):
    device, key = services.device_register(organization=alice.org, actor=alice.principal, name="alice-box")
    assert _post(session_client(bob).client, f"/account/devices/{device.id}/remove/").status_code == 404
    client = session_client(alice).client
    assert "alice-box" in client.get("/account/devices/").content.decode()
    assert _post(client, f"/account/devices/{device.id}/remove/").status_code == 302
    assert ApiKey.objects.get(id=device.api_key_id).revoked_at is not None


def test_profile_name_is_editable_and_keys_page_lists_own_keys(alice, session_client):
    client = session_client(alice).client
    _post(client, "/account/", {"name": "Alice Liddell"})
    alice.user.refresh_from_db()
    assert alice.user.name == "Alice Liddell"
    keys = client.get("/account/keys/").content.decode()
    assert alice.api_key.display in keys and alice.key not in keys


def test_deletion_schedule_is_registered(db):
    from django_q.models import Schedule

    schedule = Schedule.objects.get(name="tenants.deletions")
    assert schedule.func == "apps.tenants.tasks.deletions_process_due_task"
    assert schedule.schedule_type == Schedule.DAILY


def test_an_erasure_that_would_leave_an_organization_without_an_owner_promotes_an_heir(
    alice, bob, person_with_role
):
    """The only-owner check ran at the request: an owner who asked while another owner was there,
    and whom that owner left meanwhile, was erased with the organization left ownerless — which
    nobody could then export or delete."""
    co_owner = person_with_role(Role.OWNER)
    admin = person_with_role(Role.ADMIN)
    gdpr.account_deletion_request(user=alice.user)  # (allowed: there is another owner)
    Membership.objects.filter(user=co_owner.user).delete()  # the other owner leaves
    counts = gdpr.account_hard_delete(alice.user.pk)
    assert counts["owners_promoted"] == 1
    owners = Membership.objects.filter(organization=alice.org, role=Role.OWNER)
    assert [m.user_id for m in owners] == [admin.user.pk]  # the highest role left, not bob (member)
    assert AuditLog.objects.filter(action="membership.owner_on_erasure", organization=alice.org).exists()


def test_an_erased_persons_invitations_and_their_address_in_the_audit_log_go(alice, bob):
    """The invitation row and the audit metadata of `invitation.created` kept the erased
    person's email address."""
    from apps.tenants.models import Invitation
    from tests.factories import UserFactory

    dana = UserFactory(email="dana@elsewhere.test")
    services.invitation_create(
        organization=alice.org, actor=alice.principal, email=dana.email, role=Role.MEMBER
    )
    assert AuditLog.objects.filter(metadata__email=dana.email).exists()
    gdpr.account_hard_delete(dana.pk)
    assert not Invitation.objects.filter(email__iexact=dana.email).exists()
    assert not AuditLog.objects.filter(metadata__email__iexact=dana.email).exists()
