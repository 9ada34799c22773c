"""Work whose task was lost is found again: memories left pending, index jobs and exports never
run are queued again by the sweeps; an embedding that fails before it starts leaves the memory
`failed`, not pending; a task that meets the database gone tries again. (The tests' queue runs
tasks inline when their transaction commits.)"""

from __future__ import annotations

import io
import tarfile
from datetime import timedelta

import psycopg
import pytest
from django.db import IntegrityError, OperationalError, connection
from django.utils import timezone
from django_q.conf import Conf
from tenacity import stop_after_attempt, wait_none

from apps.graph import tasks as graph_tasks
from apps.graph.models import GraphNode, IndexJob
from apps.memories import services
from apps.memories.embedding import providers
from apps.memories.models import EmbeddingStatus, Memory
from apps.tenants import tasks as tenant_tasks
from apps.tenants.models import DataExport, ExportStatus
from memorysaas.kernel.queue import retry_on_database_error
from tests.graph.conftest import PY_REPO
from tests.memories.factories import make_memory
from tests.processes import Worker, database_url

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def hashing_embeddings(settings):
    settings.EMBEDDING_PROVIDER = "hashing"
    settings.EMBEDDING_DIMENSIONS = 384


def _age(model, ids, *, field: str, seconds: int) -> None:
    model.objects.filter(id__in=ids).update(**{field: timezone.now() - timedelta(seconds=seconds)})


def _left_pending(memory: Memory, *, seconds: int) -> None:
    Memory.objects.filter(id=memory.id).update(
        embedding_status=EmbeddingStatus.PENDING, embedding=None, embedding_model=""
    )
    _age(Memory, [memory.id], field="updated_at", seconds=seconds)


# ---------------------------------------------------------------- memories


def test_a_memory_pending_past_the_limit_is_embedded_by_the_sweep(alice, settings):
    stranded = make_memory(alice, content="The nightly export runs at 02:00 UTC.")
    recent = make_memory(alice, content="Invoices are numbered per organization.")
    _left_pending(stranded, seconds=settings.STRANDED_WORK_AFTER_SECONDS + 60)
    _left_pending(recent, seconds=settings.STRANDED_WORK_AFTER_SECONDS - 60)  # its task may still come
    assert services.memories_embed_stranded() == 1
    stranded.refresh_from_db()
    recent.refresh_from_db()
    assert stranded.embedding_status == EmbeddingStatus.READY and stranded.embedding_model == "hashing-v1-384"
    assert recent.embedding_status == EmbeddingStatus.PENDING
    assert services.memories_embed_stranded() == 0


def test_a_broker_that_cannot_take_the_task_loses_no_memory(alice, api_client, monkeypatch, settings):
    """The queue is unreachable when the write commits: the write still succeeds (201), the memory
    waits as pending, and the sweep embeds it."""
    settings.EMBEDDING_MODE = "async"
    monkeypatch.setattr(Conf, "SYNC", False)
    monkeypatch.setattr(Conf, "BROKER_CLASS", "memorysaas.kernel.brokers.AcknowledgedRedis")
    monkeypatch.setattr(Conf, "REDIS", "redis://127.0.0.1:1/0")  # nothing listens there
    response = api_client(alice.key).post(
        f"projects/{alice.project.id}/memories", {"type": "gotcha", "content": "Refunds settle in 5 days."}
    )
    assert response.status_code == 201, response.content
    memory = Memory.objects.get(id=response.json()["id"])
    assert memory.embedding_status == EmbeddingStatus.PENDING
    monkeypatch.setattr(Conf, "SYNC", True)
    _age(Memory, [memory.id], field="updated_at", seconds=settings.STRANDED_WORK_AFTER_SECONDS + 1)
    assert services.memories_embed_stranded() == 1
    memory.refresh_from_db()
    assert memory.embedding_status == EmbeddingStatus.READY


def test_an_embedding_that_fails_before_it_starts_marks_the_memory_failed(alice, monkeypatch):
    memory = make_memory(alice, content="Staging uses the production CDN.")
    _left_pending(memory, seconds=0)

    def misconfigured():
        raise ValueError("EMBEDDING_PROVIDER 'nope' is not one of local, openai, hashing")

    monkeypatch.setattr(providers, "get_provider", misconfigured)
    assert services.memories_embed([str(memory.id)]) == 0
    memory.refresh_from_db()
    assert memory.embedding_status == EmbeddingStatus.FAILED
    assert memory.embedding_error.startswith("EMBEDDING_PROVIDER 'nope'")


def test_a_failed_memory_is_not_taken_by_the_sweep_but_by_a_retry(alice, settings, monkeypatch):
    memory = make_memory(alice, content="Feature flags are cached for 30 s.")
    Memory.objects.filter(id=memory.id).update(
        embedding_status=EmbeddingStatus.FAILED, embedding_error="boom"
    )
    _age(Memory, [memory.id], field="updated_at", seconds=settings.STRANDED_WORK_AFTER_SECONDS + 60)
    assert services.memories_embed_stranded() == 0
    retried = services.memory_embed_retry(memory=memory, actor=alice.principal)
    assert retried.embedding_status == EmbeddingStatus.READY and retried.embedding_error == ""


# ---------------------------------------------------------------- index jobs


def _extracted(tmp_path) -> str:
    for path, content in PY_REPO.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(content)
    return str(tmp_path)


def test_an_index_job_whose_task_was_lost_is_run_by_the_sweep(alice, settings, tmp_path):
    job = IndexJob.objects.create(
        project=alice.project, kind="full", source_dir=_extracted(tmp_path / "repo")
    )
    _age(IndexJob, [job.id], field="created_at", seconds=settings.STRANDED_WORK_AFTER_SECONDS + 60)
    assert graph_tasks.index_stranded_task() == {"queued": 1, "superseded": 0}
    job.refresh_from_db()
    assert job.status == "done" and GraphNode.objects.filter(project=alice.project).count() > len(PY_REPO)
    assert not (tmp_path / "repo").exists()  # its upload is gone once it is done
    assert graph_tasks.index_stranded_task() == {"queued": 0, "superseded": 0}


def test_a_running_job_is_left_to_its_worker_and_an_older_one_is_not_run_over_a_newer(
    alice, settings, tmp_path
):
    old = IndexJob.objects.create(project=alice.project, kind="full", source_dir=_extracted(tmp_path / "old"))
    running = IndexJob.objects.create(
        project=alice.project, kind="full", status="running", source_dir=_extracted(tmp_path / "new")
    )
    _age(IndexJob, [old.id], field="created_at", seconds=settings.STRANDED_WORK_AFTER_SECONDS + 120)
    _age(IndexJob, [running.id], field="created_at", seconds=settings.STRANDED_WORK_AFTER_SECONDS + 60)
    # Another process runs the newer job: it holds the job's lock on its own connection.
    with psycopg.connect(database_url(), autocommit=True) as worker:
        worker.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", [f"graph-job:{running.id}"])
        assert graph_tasks.index_stranded_task() == {"queued": 0, "superseded": 1}
        assert graph_tasks.index_job_task(running.id) == "running elsewhere"
    old.refresh_from_db()
    running.refresh_from_db()
    assert old.status == "failed" and "later index job" in old.error and not (tmp_path / "old").exists()
    assert running.status == "running" and not GraphNode.objects.filter(project=alice.project).exists()
    # Its worker died (the lock went with its connection): now the sweep runs it.
    assert graph_tasks.index_stranded_task() == {"queued": 1, "superseded": 0}
    running.refresh_from_db()
    assert running.status == "done"


def test_a_full_job_whose_upload_is_gone_fails_and_keeps_the_graph(alice, api_client):
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        for path, content in PY_REPO.items():
            info = tarfile.TarInfo(path)
            info.size = len(content.encode())
            tar.addfile(info, io.BytesIO(content.encode()))
    archive.seek(0)
    archive.name = "repo.tar.gz"
    client = api_client(alice.key)
    response = client.client.post(
        f"/api/v1/projects/{alice.project.id}/graph/index", {"archive": archive}, **client.headers
    )
    assert response.status_code == 202, response.content
    nodes = GraphNode.objects.filter(project=alice.project).count()
    assert nodes > len(PY_REPO)
    lost = IndexJob.objects.create(project=alice.project, kind="full", source_dir="/nonexistent/upload")
    assert graph_tasks.index_job_task(lost.id) == "failed"
    lost.refresh_from_db()
    assert lost.status == "failed" and "upload it again" in lost.error
    assert GraphNode.objects.filter(project=alice.project).count() == nodes


# ---------------------------------------------------------------- exports


def test_an_export_never_built_is_built_by_the_sweep(alice, settings):
    export = DataExport.objects.create(requested_by=alice.user, format="json")
    assert tenant_tasks.exports_stranded_task() == {"queued": 0}  # just asked for: its task may come
    _age(DataExport, [export.id], field="created_at", seconds=settings.STRANDED_WORK_AFTER_SECONDS + 60)
    assert tenant_tasks.exports_stranded_task() == {"queued": 1}
    export.refresh_from_db()
    assert export.status == ExportStatus.READY and export.content


# ---------------------------------------------------------------- database errors


def _refused(calls: list[bool], failures: int):
    """A task that finds the database unreachable `failures` times, then works. It notes whether
    it started without an open connection (the retry closed the one the failure left)."""

    def task() -> str:
        calls.append(connection.connection is None)
        if len(calls) <= failures:
            connection.ensure_connection()  # (it had one: the outage broke it mid-task)
            raise OperationalError("connection failed: Connection refused")  # as Django raises it
        return "done"

    return task


def test_a_task_retries_while_the_database_is_unreachable(db):
    calls: list[bool] = []
    task = retry_on_database_error(_refused(calls, failures=2)).retry_with(wait=wait_none())
    assert Worker(task).finish() == "done"  # (a thread of its own: no transaction open, as in a worker)
    assert calls == [True, True, True]


def test_it_gives_up_after_its_time_and_never_retries_other_errors(db):
    calls: list[bool] = []
    task = retry_on_database_error(_refused(calls, failures=10)).retry_with(
        wait=wait_none(), stop=stop_after_attempt(3)
    )
    assert isinstance(Worker(task).finish(), OperationalError) and len(calls) == 3

    def duplicate() -> None:
        calls.append(True)
        raise IntegrityError("duplicate key value violates unique constraint")

    calls.clear()
    assert isinstance(Worker(retry_on_database_error(duplicate)).finish(), IntegrityError)
    assert len(calls) == 1


def test_inside_a_callers_transaction_nothing_is_retried(db):
    """Run inline in a transaction (the tests' sync queue), a retry could not redo what the lost
    transaction had done: the error goes to the caller."""
    calls: list[bool] = []
    with pytest.raises(OperationalError):
        retry_on_database_error(_refused(calls, failures=1)).retry_with(wait=wait_none())()
    assert len(calls) == 1
