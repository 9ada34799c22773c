from __future__ import annotations

import numpy as np
import pytest
from django.db import connection

from apps.memories import selectors, services
from apps.memories.models import EmbeddingStatus, Memory, MemoryVersion, TermStat
from apps.tenants.principal import Principal
from tests.factories import ProjectFactory
from tests.memories.factories import draft, make_memory

pytestmark = pytest.mark.django_db(transaction=False)


def test_create_stores_indexes_and_embeds(alice):
    memory = make_memory(alice, related_files=["django/db/models/query.py"], tags=["orm"])
    memory.refresh_from_db()
    assert memory.version == 1
    assert memory.embedding_status == EmbeddingStatus.READY
    assert memory.embedding_dims == 384 and memory.embedding_model.startswith("hashing")
    assert memory.decay_half_life_days == 60  # gotcha default
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tsvector_to_array(search_vector) FROM memories_memory WHERE id = %s", [memory.id]
        )
        lexemes = set(cursor.fetchone()[0])
    assert {"select_for_update", "selectforupdate", "atom", "django/db/models/query.py"} <= lexemes
    assert TermStat.objects.get(project=alice.project, term="").df == 1
    assert TermStat.objects.get(project=alice.project, term="select_for_update").df == 1
    assert MemoryVersion.objects.filter(memory=memory, version=1).exists()


def test_dex_alias_maps_to_v5_type(alice):
    assert make_memory(alice, type="pitfall").type == "gotcha"
    assert make_memory(alice, type="fix").type == "error_pattern"


def test_a_new_type_brings_its_half_life_unless_one_was_set_by_hand(alice):
    memory = make_memory(alice, type="work_state", content="Halfway through the billing refactor.")
    assert memory.decay_half_life_days == 7
    memory = services.memory_update(memory=memory, actor=alice.principal, changes={"type": "decision"})
    assert memory.decay_half_life_days is None  # a decision does not decay
    memory = services.memory_update(memory=memory, actor=alice.principal, changes={"type": "gotcha"})
    assert memory.decay_half_life_days == 60
    custom = make_memory(alice, type="gotcha", content="Set by hand.", decay_half_life_days=15)
    custom = services.memory_update(memory=custom, actor=alice.principal, changes={"type": "dead_end"})
    assert custom.decay_half_life_days == 15
    both = services.memory_update(
        memory=custom, actor=alice.principal, changes={"type": "work_state", "decay_half_life_days": 3}
    )
    assert both.decay_half_life_days == 3


def test_update_bumps_version_and_reindexes(alice):
    memory = make_memory(alice)
    services.memory_update(
        memory=memory, actor=alice.principal, changes={"content": "verifyJwt rejects expired"}
    )
    memory.refresh_from_db()
    assert memory.version == 2
    assert TermStat.objects.filter(
        project=alice.project, term="atom", df=0
    ).exists()  # "atomic" was only in the content
    assert TermStat.objects.get(project=alice.project, term="verifyjwt").df == 1
    assert list(memory.versions.values_list("version", flat=True)) == [2, 1]


def test_reinforce_adds_provenance_and_confidence(alice):
    memory = make_memory(alice, confidence=0.7)
    services.memory_reinforce(memory=memory, actor=Principal(), session_id="s-2")
    memory.refresh_from_db()
    assert memory.provenance_session_ids == ["s-2"]
    assert memory.confidence == pytest.approx(0.75)
    assert memory.version == 2


def test_files_renamed_and_deleted(alice):
    relation = {"relation_type": "validates", "target_file_path": "a/old.py"}
    moved = make_memory(alice, related_files=["a/old.py", "b.py"], relations=[relation])
    gone = make_memory(alice, related_files=["c/dead.py"])
    elsewhere = make_memory(alice, project=ProjectFactory(organization=alice.project.organization),
                            related_files=["a/old.py"], relations=[relation])  # fmt: skip
    assert services.memories_files_renamed(project=alice.project, renames={"a/old.py": "a/new.py"}) == 1
    assert services.memories_files_deleted(project=alice.project, paths=["c/dead.py"]) == 1
    moved.refresh_from_db()
    gone.refresh_from_db()
    assert moved.related_files == ["a/new.py", "b.py"]
    assert [r.target_file_path for r in moved.relations.all()] == ["a/new.py"]
    assert [r.target_file_path for r in elsewhere.relations.all()] == ["a/old.py"]  # another project's tree
    assert gone.stale_at is not None and moved.stale_at is None


@pytest.mark.parametrize(
    ("renames", "relations", "expected"),
    [
        ({"a.py": "b.py", "b.py": "c.py"}, ["a.py"], ["b.py"]),  # a chain: a went to b, not on to c
        ({"a.py": "b.py", "b.py": "a.py"}, ["a.py", "b.py"], ["a.py", "b.py"]),  # a swap
        ({"a.py": "b.py"}, ["a.py", "b.py"], ["b.py"]),  # onto a file it already names: once
    ],
)
def test_file_relations_follow_renames_as_related_files_do(alice, renames, relations, expected):
    """Relations moved one rename after another: a chain took them twice, a swap put both on
    one file, and a rename onto a named file left two identical relations."""
    memory = make_memory(
        alice,
        related_files=list(relations),
        relations=[{"relation_type": "validates", "target_file_path": p} for p in relations],
    )
    services.memories_files_renamed(project=alice.project, renames=renames)
    memory.refresh_from_db()
    assert sorted(r.target_file_path for r in memory.relations.all()) == expected
    assert sorted(memory.related_files) == expected


def test_the_same_relation_twice_is_stored_once(alice):
    relation = {"relation_type": "validates", "target_file_path": "a/tests.py"}
    memory = make_memory(
        alice, relations=[relation, relation, {**relation, "target_file_path": " a/tests.py"}]
    )
    assert [r.target_file_path for r in memory.relations.all()] == ["a/tests.py"]


def test_near_duplicate_found_above_threshold_only(alice):
    memory = make_memory(alice, content="QuerySet.update() does not call save() or send signals")
    found = selectors.find_near_duplicate(
        project=alice.project,
        text="QuerySet.update() does not call save() or send signals",
        memory_type="gotcha",
    )
    assert found == memory
    assert (
        selectors.find_near_duplicate(
            project=alice.project, text="Totally unrelated words here", memory_type="gotcha"
        )
        is None
    )


def test_batch_is_one_transaction(alice):
    drafts = [draft(content=f"memory {i}") for i in range(3)]
    memories = services.memories_create_batch(project=alice.project, actor=alice.principal, drafts=drafts)
    assert len(memories) == 3 and Memory.objects.count() == 3


def test_the_local_model_embeds_offline_on_the_configured_threads(real_embeddings, settings):
    from apps.memories.embedding.providers import get_provider, local_encoder

    provider = get_provider()
    vectors = provider.embed(["verifyJwt rejects expired tokens", "the paginator raises EmptyPage"])
    assert provider.model_id == "sentence-transformers/all-MiniLM-L6-v2"
    assert vectors.shape == (2, 384)
    assert abs(float(np.linalg.norm(vectors[0])) - 1.0) < 1e-4
    assert float(vectors[0] @ vectors[1]) < 0.9  # different sentences, different vectors
    encoder = local_encoder()
    if encoder is not None:  # ONNX Runtime runs it (torch is not even loaded where the graph is kept)
        assert encoder.session.get_session_options().intra_op_num_threads == settings.EMBEDDING_TORCH_THREADS
    else:
        import torch

        assert torch.get_num_threads() == settings.EMBEDDING_TORCH_THREADS
