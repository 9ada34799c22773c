"""Usage bookkeeping (MemoryUsage): accesses, their rewards, the decay clock and the daily job."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from apps.memories import services
from apps.memories.models import EmbeddingCache, Memory, MemoryUsage
from apps.memories.search import SearchRequest, search
from apps.tenants.principal import Principal
from tests.memories.factories import make_memory
from tests.processes import Worker, wait_until_another_session_waits_for_a_lock

pytestmark = pytest.mark.django_db


def _ctid(memory: Memory) -> str:
    """Where the memory's row version sits: every UPDATE of the row writes a new version."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT ctid::text FROM memories_memory WHERE id = %s", [memory.id])
        return cursor.fetchone()[0]


def _access(memory: Memory, times: int) -> None:
    for _ in range(times):
        services.memories_record_access(memory_ids=[memory.id])


def test_an_access_counts_on_the_usage_row_and_leaves_the_memory_row_alone(alice):
    memory = make_memory(alice, confidence=0.8)
    assert memory.access_count == 0 and memory.last_accessed_at is None
    before = _ctid(memory)
    services.memories_record_access(memory_ids=[memory.id, memory.id])  # twice in one call: once
    _access(memory, 3)
    assert _ctid(memory) == before  # no new version of the wide row (nor of its index entries)
    usage = MemoryUsage.objects.get(memory=memory)
    assert (usage.access_count, usage.uncorrected_access_count) == (4, 4)
    assert usage.last_accessed_at is not None
    memory = Memory.objects.select_related("usage_row").get(id=memory.id)
    assert memory.access_count == 4 and memory.last_accessed_at == usage.last_accessed_at
    assert memory.version == 1  # bookkeeping, not a change
    _access(memory, 1)  # the fifth raises confidence: that one writes the memory row
    assert _ctid(memory) != before


def test_every_fifth_access_raises_confidence_to_the_cap_and_the_tenth_clears_review(alice):
    memory = make_memory(alice, confidence=0.8, needs_review=True)
    _access(memory, 4)
    memory.refresh_from_db()
    assert memory.confidence == pytest.approx(0.8) and memory.needs_review
    _access(memory, 1)
    memory.refresh_from_db()
    assert memory.confidence == pytest.approx(0.85) and memory.needs_review
    _access(memory, 5)
    memory.refresh_from_db()
    assert memory.confidence == pytest.approx(0.9) and not memory.needs_review
    assert memory.access_count == 10

    above_cap = make_memory(alice, confidence=0.99)
    _access(above_cap, 5)
    above_cap.refresh_from_db()
    assert above_cap.confidence == pytest.approx(0.99)  # the cap limits rewards, it never lowers

    redacted = make_memory(alice, content="key sk-ant-api03-" + "a" * 40 + " leaked here")
    assert redacted.secrets_redacted and redacted.needs_review
    _access(redacted, 10)
    redacted.refresh_from_db()
    assert redacted.needs_review  # a redacted memory stays in review however often it is used


def test_a_flag_or_correction_restarts_the_uncorrected_count(alice):
    memory = make_memory(alice, confidence=0.8)
    _access(memory, 4)
    services.memory_feedback(memory=memory, actor=alice.principal, kind="flag")
    memory = Memory.objects.get(id=memory.id)
    assert (memory.access_count, memory.uncorrected_access_count) == (4, 0)
    _access(memory, 4)
    services.memory_feedback(memory=memory, actor=alice.principal, kind="correct", content="Fixed text.")
    memory = Memory.objects.get(id=memory.id)
    assert (memory.access_count, memory.uncorrected_access_count) == (8, 0)


def test_an_edit_of_the_text_or_a_return_to_review_restarts_the_uncorrected_count(alice):
    """Twelve accesses earned the old text its reward: putting it back in review by an update,
    or rewriting its content, was undone (review cleared, confidence raised) by the next access."""
    memory = make_memory(alice, confidence=0.8, needs_review=False)
    _access(memory, 12)
    services.memory_update(memory=memory, actor=alice.principal, changes={"needs_review": True})
    _access(memory, 1)
    memory = Memory.objects.get(id=memory.id)
    assert memory.needs_review and memory.uncorrected_access_count == 1
    _access(memory, 3)  # (5 uncorrected accesses would be at the next)
    earned = Memory.objects.get(id=memory.id).confidence
    services.memory_update(memory=memory, actor=alice.principal, changes={"content": "New text entirely."})
    _access(memory, 1)
    memory = Memory.objects.get(id=memory.id)
    assert (memory.confidence, memory.uncorrected_access_count) == (earned, 1)
    services.memory_update(memory=memory, actor=alice.principal, changes={"tags": ["other"]})
    assert Memory.objects.get(id=memory.id).uncorrected_access_count == 1  # (other fields: no restart)


def test_paced_accesses_within_the_hour_count_but_earn_nothing_again(alice):
    """Outside a session, an access within an hour of the last one counts (access_count) but not
    toward confidence or review — nor does it pay the fifth access's reward a second time."""
    memory = make_memory(alice, confidence=0.8)
    _access(memory, 5)
    assert Memory.objects.get(id=memory.id).confidence == pytest.approx(0.85)
    for _ in range(3):
        services.memories_record_access(memory_ids=[memory.id], paced=True)
    memory = Memory.objects.get(id=memory.id)
    assert (memory.access_count, memory.uncorrected_access_count) == (8, 5)
    assert memory.confidence == pytest.approx(0.85)
    MemoryUsage.objects.filter(memory=memory).update(last_counted_at=timezone.now() - timedelta(hours=2))
    services.memories_record_access(memory_ids=[memory.id], paced=True)
    assert Memory.objects.get(id=memory.id).uncorrected_access_count == 6


def test_a_dispute_restarts_the_count_and_keeps_its_review_however_often_it_is_used(alice):
    memory = make_memory(alice, confidence=0.8)
    _access(memory, 9)
    services.memory_feedback(memory=memory, actor=alice.principal, kind="dispute")
    assert Memory.objects.get(id=memory.id).uncorrected_access_count == 0
    _access(memory, 12)
    memory.refresh_from_db()
    assert memory.disputed and memory.needs_review  # the steward's, not the access count's
    assert memory.uncorrected_access_count == 12


def test_a_correction_that_brings_a_secret_along_stays_in_review_unverified(alice):
    memory = make_memory(alice, confidence=0.8, needs_review=True)
    leaked = "Use the key sk-ant-api03-" + "b" * 40 + " for the staging API."
    memory = services.memory_feedback(memory=memory, actor=alice.principal, kind="correct", content=leaked)
    assert "[REDACTED:" in memory.content and memory.secrets_redacted
    assert memory.needs_review and not memory.user_verified
    clean = services.memory_feedback(
        memory=memory, actor=alice.principal, kind="correct", content="Staging reads its key from the vault."
    )
    assert not clean.needs_review and clean.user_verified


def test_bringing_back_confirming_or_using_a_memory_restarts_its_clock(alice):
    now = timezone.now()
    long_ago = now - timedelta(days=400)
    retired = make_memory(alice, content="Retired once, wanted again.")
    confirmed = make_memory(alice, content="Old, then confirmed by a person.")
    untouched = make_memory(alice, content="Old and left alone.")
    Memory.objects.filter(id__in=[retired.id, confirmed.id, untouched.id]).update(created_at=long_ago)
    assert services.memories_decay_and_prune(now=now)["deprecated"] == 3
    services.memory_update(
        memory=Memory.objects.get(id=retired.id), actor=alice.principal, changes={"deprecated": False}
    )
    Memory.objects.filter(id=confirmed.id).update(deprecated=False, deprecated_at=None)
    services.memory_feedback(
        memory=Memory.objects.get(id=confirmed.id), actor=alice.principal, kind="confirm"
    )
    services.memories_decay_and_prune(now=now)
    states = dict(
        Memory.objects.filter(id__in=[retired.id, confirmed.id, untouched.id]).values_list("id", "deprecated")
    )
    assert states == {retired.id: False, confirmed.id: False, untouched.id: True}


def test_reinforcing_restarts_the_decay_clock(alice):
    memory = make_memory(alice)
    assert memory.last_accessed_at is None  # the clock runs from created_at
    memory = services.memory_reinforce(memory=memory, actor=Principal(), session_id="s-2")
    assert memory.last_accessed_at is not None and memory.access_count == 0


def test_the_daily_job_deprecates_by_the_usage_clock_then_deletes_after_the_grace(alice):
    now = timezone.now()
    unused = make_memory(alice, content="Never used since it was written.")
    used = make_memory(alice, content="Written long ago, used last week.")
    pinned = make_memory(alice, content="Pinned, never used.", pinned=True)
    half_life = unused.decay_half_life_days
    Memory.objects.filter(id__in=[unused.id, used.id, pinned.id]).update(
        created_at=now - timedelta(days=3 * half_life + 1)
    )
    MemoryUsage.objects.create(memory=used, access_count=3, last_accessed_at=now - timedelta(days=7))

    assert services.memories_decay_and_prune(now=now)["deprecated"] == 1
    assert set(Memory.objects.filter(deprecated=True).values_list("id", flat=True)) == {unused.id}

    verified = make_memory(alice, content="Verified but unused.", user_verified=True)
    Memory.objects.filter(id=verified.id).update(deprecated=True, deprecated_at=now - timedelta(days=31))
    Memory.objects.filter(id=unused.id).update(deprecated_at=now - timedelta(days=31))
    EmbeddingCache.objects.create(
        key="x" * 64, model_id="m", dims=3, vector=[1, 0, 0], expires_at=now - timedelta(days=1)
    )
    result = services.memories_decay_and_prune(now=now)
    assert result["deleted"] == 1 and result["cache_evicted"] == 1
    assert not Memory.objects.filter(id=unused.id).exists()
    assert Memory.objects.filter(id=verified.id).exists()  # user_verified: kept


def test_the_grace_ends_in_no_deletion_for_a_pinned_or_disputed_memory(alice, bob):
    """A dispute resolved by deprecating its memory lost its whole thread 30 days later (the
    cascade took it), and a pinned memory deprecated by hand was deleted like any other."""
    from apps.governance import services as governance

    now = timezone.now()
    plain = make_memory(alice, content="Deprecated, nothing else.")
    pinned = make_memory(alice, content="Pinned, deprecated by hand.", pinned=True)
    disputed = make_memory(alice, content="Deprecated by a dispute's resolution.")
    governance.dispute_open(memory=disputed, actor=bob.principal, reason="It is wrong.")
    # disputed through feedback: flagged, with no dispute thread of its own
    flagged = make_memory(alice, content="Disputed through feedback.")
    services.memory_feedback(memory=flagged, actor=bob.principal, kind="dispute", note="Not since 5.1.")
    Memory.objects.filter(id__in=[plain.id, pinned.id, disputed.id, flagged.id]).update(
        deprecated=True, deprecated_at=now - timedelta(days=31)
    )
    assert services.memories_decay_and_prune(now=now)["deleted"] == 1
    assert set(Memory.objects.values_list("id", flat=True)) == {pinned.id, disputed.id, flagged.id}
    assert disputed.disputes.count() == 1


def test_a_half_life_beyond_a_century_is_refused_and_cannot_stop_the_daily_job(alice, api_client):
    client = api_client(alice.key)
    url = f"projects/{alice.project.id}/memories"
    body = {"type": "gotcha", "content": "Cache keys carry the tenant.", "decay_half_life_days": 1e6}
    assert client.post(url, body).status_code == 422
    memory = make_memory(alice, content="Cache keys carry the locale.")
    assert client.patch(f"memories/{memory.id}", {"decay_half_life_days": 1e9}).status_code == 422
    # a row that holds one anyway (written before the bound, or by hand) is read as a century
    Memory.objects.filter(id=memory.id).update(decay_half_life_days=1e9)
    stale = make_memory(alice, content="Written long ago, never used.")
    Memory.objects.filter(id=stale.id).update(created_at=timezone.now() - timedelta(days=400))
    assert services.memories_decay_and_prune()["deprecated"] == 1
    assert not Memory.objects.get(id=memory.id).deprecated


def test_search_weighs_by_the_usage_clock_and_reports_the_counts(alice, api_client):
    fresh = make_memory(alice, content="verifyJwt rejects tokens whose clock skew exceeds 30 seconds.")
    old = make_memory(alice, content="verifyJwt rejects tokens whose clock skew exceeds 30 seconds!")
    long_ago = timezone.now() - timedelta(days=3 * fresh.decay_half_life_days)
    Memory.objects.filter(id__in=[fresh.id, old.id]).update(created_at=long_ago)
    MemoryUsage.objects.create(memory=fresh, access_count=7, last_accessed_at=timezone.now())

    result = search(
        SearchRequest(principal=alice.principal, project=alice.project, query="verifyJwt clock skew")
    )
    by_id = {hit.memory.id: hit for hit in result.hits}
    assert by_id[fresh.id].components["confidence"] == pytest.approx(fresh.confidence, rel=1e-3)
    assert by_id[old.id].components["confidence"] < 0.2 * old.confidence  # three half-lives
    assert by_id[fresh.id].memory.access_count == 7 and by_id[old.id].memory.access_count == 0

    client = api_client(alice.key)
    found = client.post(f"projects/{alice.project.id}/search", {"query": "verifyJwt clock skew"}).json()
    counts = {r["memory"]["id"]: r["memory"]["access_count"] for r in found["results"]}
    assert counts == {str(fresh.id): 7, str(old.id): 0}
    got = client.get(f"memories/{fresh.id}").json()
    assert got["access_count"] == 7 and got["last_accessed_at"] is not None


def test_search_keeps_pinned_and_verified_memories_whole_however_long_unused(alice):
    unused = make_memory(alice, content="verifyJwt checks the audience claim first.")
    pinned = make_memory(alice, content="verifyJwt checks the audience claim first!", pinned=True)
    verified = make_memory(alice, content="verifyJwt checks the audience claim first?", user_verified=True)
    long_ago = timezone.now() - timedelta(days=3 * unused.decay_half_life_days)
    Memory.objects.filter(id__in=[unused.id, pinned.id, verified.id]).update(created_at=long_ago)

    result = search(
        SearchRequest(principal=alice.principal, project=alice.project, query="verifyJwt audience claim")
    )
    confidence = {hit.memory.id: hit.components["confidence"] for hit in result.hits}
    assert confidence[unused.id] < 0.2 * unused.confidence  # three half-lives
    assert confidence[pinned.id] == pytest.approx(pinned.confidence)
    assert confidence[verified.id] == pytest.approx(verified.confidence)


@pytest.mark.django_db(transaction=True)
def test_the_migration_keeps_counts_and_decay_clocks(alice):
    """0005 copies the columns it drops: migrate back, write old-style rows, migrate forward."""
    used = make_memory(alice, content="Used often.")
    reinforced = make_memory(alice, content="Reinforced, never injected.")
    untouched = make_memory(alice, content="Never used.")
    executor = MigrationExecutor(connection)
    executor.migrate([("memories", "0004_embedding_stored_inline")])
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE memories_memory SET access_count = 12, uncorrected_access_count = 2,"
                " last_accessed_at = now() WHERE id = %s",
                [used.id],
            )
            cursor.execute(
                "UPDATE memories_memory SET last_accessed_at = created_at + interval '3 days' WHERE id = %s",
                [reinforced.id],
            )
            cursor.execute(
                "UPDATE memories_memory SET last_accessed_at = created_at WHERE id = %s", [untouched.id]
            )
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        # Every app's leaf, not only memories': going back unapplied other apps' migrations that
        # depend on a later memories migration, and later tests need their tables.
        executor.migrate(executor.loader.graph.leaf_nodes())
    rows = {u.memory_id: u for u in MemoryUsage.objects.all()}
    assert (rows[used.id].access_count, rows[used.id].uncorrected_access_count) == (12, 2)
    assert rows[reinforced.id].access_count == 0 and rows[reinforced.id].last_accessed_at is not None
    assert untouched.id not in rows  # its clock is its created_at, as it was


@pytest.mark.django_db(transaction=True)
def test_an_access_and_a_flag_on_one_memory_take_their_locks_in_the_same_order(alice):
    """A flag locks the memory, then resets its usage; an access (here the 5th, which rewards)
    must wait for the memory before it touches the usage row, or the two deadlock."""
    memory = make_memory(alice, confidence=0.8)
    _access(memory, 4)
    with transaction.atomic():
        Memory.objects.select_for_update().get(id=memory.id)  # what feedback's _locked() does
        access = Worker(lambda: services.memories_record_access(memory_ids=[memory.id]))
        wait_until_another_session_waits_for_a_lock()
        MemoryUsage.objects.filter(memory=memory).update(uncorrected_access_count=0)
    assert not isinstance(access.finish(), BaseException)
    usage = MemoryUsage.objects.get(memory=memory)
    assert (usage.access_count, usage.uncorrected_access_count) == (5, 1)  # counted after the reset
    memory.refresh_from_db()
    assert memory.confidence == pytest.approx(0.8)  # so no reward
