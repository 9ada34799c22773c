"""Module summaries written from the graph's structure as module_insight memories."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from apps.graph import services
from apps.graph.models import IndexJob
from apps.graph.summaries import SUMMARY_TAG, collect, module_depth, module_summaries_write
from apps.graph.tasks import index_job_task
from apps.memories.models import Memory
from tests.graph.conftest import write_tree

REPO = {
    "billing/__init__.py": '"""Invoices and payment retries.\n\nMore detail here."""\nfrom .invoice import Invoice\n\n__all__ = ["Invoice"]\n',
    "billing/invoice.py": "from auth.tokens import verify\n\n\nclass Invoice:\n    def pay(self):\n        return verify(self)\n",
    "auth/__init__.py": "",
    "auth/tokens.py": '"""Token checks."""\n\n\ndef verify(token):\n    return token\n',
    "auth/tests/test_tokens.py": "from auth.tokens import verify\n\n\ndef test_verify():\n    assert verify(1)\n",
    "setup.py": "",
}


@pytest.fixture(autouse=True)
def _hashing_embeddings(settings):
    settings.EMBEDDING_PROVIDER = "hashing"
    settings.EMBEDDING_DIMENSIONS = 384


def summaries(project) -> dict[str, Memory]:
    rows = Memory.objects.filter(project=project, type="module_insight", tags__contains=[SUMMARY_TAG])
    return {m.related_modules[0]: m for m in rows}


def test_module_depth_descends_into_a_single_root_directory():
    assert module_depth(["a/x.py", "b/y.py", "setup.py"]) == 1
    assert module_depth(["src/a/x.py", "src/b/y.py"]) == 2


def test_structure_becomes_one_reviewable_summary_per_module(alice, tmp_path):
    services.index_directory(alice.project, str(write_tree(tmp_path / "repo", REPO)))
    facts = {m.name: m for m in collect(alice.project)}
    assert set(facts) == {"auth", "billing"}
    assert facts["billing"].entry_points == ["billing/__init__.py"]
    assert facts["billing"].exports == ["Invoice"]
    assert facts["billing"].docstring == "Invoices and payment retries. More detail here."
    assert facts["billing"].uses == ["auth"] and facts["auth"].used_by == ["billing"]
    assert facts["auth"].most_used == ["auth/tokens.py"] and facts["auth"].tests == 1

    assert module_summaries_write(project=alice.project)["created"] == 2
    made = summaries(alice.project)
    billing = made["billing"]
    assert billing.needs_review and billing.source == "observer_inferred"
    assert "Invoices and payment retries." in billing.content and "Exports: Invoice." in billing.content
    assert "Uses modules: auth." in billing.content
    assert made["auth"].related_files == ["auth/__init__.py", "auth/tokens.py"]

    assert module_summaries_write(project=alice.project) == {
        "created": 0, "updated": 0, "unchanged": 2, "kept_reviewed": 0,
    }  # fmt: skip


def test_refresh_updates_changed_modules_and_keeps_reviewed_ones(alice, tmp_path):
    services.index_directory(alice.project, str(write_tree(tmp_path / "repo", REPO)))
    module_summaries_write(project=alice.project)
    Memory.objects.filter(id=summaries(alice.project)["auth"].id).update(
        user_verified=True, content="Reviewed."
    )

    changed = {**REPO, "billing/__init__.py": '"""Invoices only."""\n'}
    services.index_directory(alice.project, str(write_tree(tmp_path / "repo2", changed)))
    counts = module_summaries_write(project=alice.project)
    assert counts == {"created": 0, "updated": 1, "unchanged": 0, "kept_reviewed": 1}
    made = summaries(alice.project)
    assert "Invoices only." in made["billing"].content and made["billing"].version == 2
    assert made["auth"].content == "Reviewed."


def test_index_repo_command_writes_summaries(alice, tmp_path, capsys):
    root = write_tree(tmp_path / "repo", REPO)
    call_command("index_repo", str(root), "--project", str(alice.project.id))
    assert "module summaries" in capsys.readouterr().out
    assert set(summaries(alice.project)) == {"auth", "billing"}


def test_a_full_index_job_queues_the_summaries(alice, tmp_path, django_capture_on_commit_callbacks):
    root = write_tree(tmp_path / "repo", REPO)
    job = IndexJob.objects.create(project=alice.project, kind="full", source_dir=str(root))
    with django_capture_on_commit_callbacks(execute=True):
        assert index_job_task(job.id) == "done"
    assert set(summaries(alice.project)) == {"auth", "billing"}
