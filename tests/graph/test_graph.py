"""Indexing real (small) repositories and reading the graph back through services and the API."""

from __future__ import annotations

import io
import os
import tarfile
import zipfile

import django
import pytest

from apps.graph import importcheck, selectors, services
from apps.graph.models import GraphClosure, GraphEdge, GraphNode, IndexJob
from apps.memories.models import Memory
from apps.memories.neighbours import file_neighbours
from apps.tenants.roles import Role
from tests.graph.conftest import PY_REPO
from tests.memories.factories import make_memory


@pytest.fixture(autouse=True)
def _hashing_embeddings(settings, tmp_path):
    settings.EMBEDDING_PROVIDER = "hashing"
    settings.EMBEDDING_DIMENSIONS = 384
    settings.GRAPH_UPLOAD_DIR = str(tmp_path / "uploads")


def file_edges(project, kind="imports") -> set[tuple[str, str]]:
    rows = GraphEdge.objects.filter(project=project, kind=kind, source__kind="file", target__kind="file")
    return set(rows.values_list("source__path", "target__path"))


def test_python_repository_edges_closure_and_impact(alice, py_repo):
    result = services.index_directory(alice.project, str(py_repo))
    assert result.files == 6 and result.skipped["vendored"] == 1
    assert file_edges(alice.project) == {
        ("app/auth/__init__.py", "app/auth/tokens.py"),
        ("app/api/views.py", "app/auth/tokens.py"),  # `from ..auth import tokens` is the submodule
        ("app/api/urls.py", "app/api/views.py"),
        ("tests/test_views.py", "app/api/views.py"),
    }
    calls = GraphEdge.objects.filter(project=alice.project, kind="calls").values_list(
        "source__key", "target__key"
    )
    assert ("app/api/views.py:LoginView.post", "app/auth/tokens.py:verify_jwt") in set(calls)
    assert ("app/auth/tokens.py:verify_jwt", "app/auth/tokens.py:decode") in set(calls)
    extends = GraphEdge.objects.filter(project=alice.project, kind="extends").values_list(
        "source__key", "target__key"
    )
    assert list(extends) == [("app/api/views.py:LoginView", "app/api/views.py:Base")]

    memory = make_memory(
        alice, content="verify_jwt must reject HS256.", type="gotcha", related_files=["app/auth/tokens.py"]
    )
    report = selectors.impact(project=alice.project, target="app/auth/tokens.py", depth=3)
    assert {(d["file"], d["depth"]) for d in report["direct"]} == {
        ("app/api/views.py", 1),
        ("app/auth/__init__.py", 1),
    }
    assert {(d["file"], d["depth"]) for d in report["transitive"]} == {
        ("app/api/urls.py", 2),
        ("tests/test_views.py", 2),
    }
    assert report["tests"] == ["tests/test_views.py"]
    assert [m["id"] for m in report["memories"]] == [str(memory.id)]
    shallow = selectors.impact(project=alice.project, target="app/auth/tokens.py", depth=1)
    assert shallow["transitive"] == []

    symbol = selectors.impact(project=alice.project, target="app/auth/tokens.py:verify_jwt", depth=2)
    assert {
        "file": "app/api/views.py",
        "symbol": "post",
        "depth": 1,
        "weight": 0.8,
        "edge_types": ["calls"],
        "is_test": False,
    } in symbol["direct"]
    deps = selectors.dependencies(project=alice.project, file="tests/test_views.py", depth=2)
    assert [(d["file"], d["depth"]) for d in deps["dependencies"]] == [
        ("app/api/views.py", 1),
        ("app/auth/tokens.py", 2),
    ]


def test_stale_edges_are_skipped_until_rebuilt_and_incremental_changes_update_the_closure(alice, py_repo):
    services.index_directory(alice.project, str(py_repo))
    services.mark_stale(alice.project, ["app/api/views.py"])
    report = selectors.impact(project=alice.project, target="app/auth/tokens.py", depth=3)
    assert {d["file"] for d in report["direct"] + report["transitive"]} == {"app/auth/__init__.py"}

    # views.py stops importing tokens directly; urls.py now imports tokens itself.
    services.index_changes(
        alice.project,
        changed={
            "app/api/views.py": b"class LoginView:\n    pass\n",
            "app/api/urls.py": b"from . import views\nfrom app.auth import tokens\n",
        },
    )
    assert not GraphNode.objects.filter(project=alice.project, stale_at__isnull=False).exists()
    report = selectors.impact(project=alice.project, target="app/auth/tokens.py", depth=3)
    assert {(d["file"], d["depth"]) for d in report["direct"]} == {
        ("app/auth/__init__.py", 1),
        ("app/api/urls.py", 1),
    }
    assert "tests/test_views.py" not in {d["file"] for d in report["transitive"]}
    closure_files = set(
        GraphClosure.objects.filter(
            project=alice.project, descendant__path="tests/test_views.py"
        ).values_list("ancestor__path", flat=True)
    )
    assert closure_files == {"app/api/views.py"}


def test_a_memory_is_fresh_again_when_its_deleted_file_comes_back(alice, py_repo):
    """Nothing ever cleared stale_at: a file deleted and then restored left its memories out of
    injection for good."""
    services.index_directory(alice.project, str(py_repo))
    tests_only = make_memory(alice, content="Tests need a token.", related_files=["tests/test_views.py"])
    both = make_memory(
        alice,
        content="Views and tests share a fixture.",
        related_files=["tests/test_views.py", "app/api/urls.py"],
    )
    services.index_changes(alice.project, changed={}, deleted=["tests/test_views.py", "app/api/urls.py"])
    assert Memory.objects.filter(stale_at__isnull=False).count() == 2
    services.index_changes(
        alice.project, changed={"tests/test_views.py": PY_REPO["tests/test_views.py"].encode()}
    )
    assert Memory.objects.get(id=tests_only.id).stale_at is None
    assert Memory.objects.get(id=both.id).stale_at is not None  # (urls.py is still gone)
    services.index_directory(alice.project, str(py_repo))  # (the whole tree, urls.py included)
    assert Memory.objects.get(id=both.id).stale_at is None


def test_a_full_index_marks_stale_only_what_it_looked_at_and_did_not_find(alice, py_repo):
    """An index of `--include tests` marked memories about every other file stale, and so did a
    vendored or oversized file, which exist but are not parsed."""
    import os

    services.index_directory(alice.project, str(py_repo))
    views = make_memory(alice, content="Login is a POST.", related_files=["app/api/views.py"])
    vendored = make_memory(
        alice, content="left-pad is vendored.", related_files=["node_modules/left-pad/index.js"]
    )
    huge = make_memory(alice, content="The fixture file is big.", related_files=["tests/big.py"])
    (py_repo / "tests" / "big.py").write_text("x = 1\n" * 300_000)
    gone = make_memory(alice, content="An old test.", related_files=["tests/test_old.py"])
    services.index_directory(alice.project, str(py_repo), include=["tests"])
    stale = set(Memory.objects.filter(stale_at__isnull=False).values_list("id", flat=True))
    assert stale == {gone.id}, {views.id, vendored.id, huge.id} & stale
    assert os.path.exists(py_repo / "app" / "api" / "views.py")


def test_renames_and_deletions_carry_memories_along(alice, py_repo):
    services.index_directory(alice.project, str(py_repo))
    moved = make_memory(
        alice, content="URL names are snake_case.", type="preference", related_files=["app/api/urls.py"]
    )
    doomed = make_memory(
        alice, content="Tests need a token.", type="gotcha", related_files=["tests/test_views.py"]
    )
    services.index_changes(
        alice.project,
        changed={"app/api/routes.py": PY_REPO["app/api/urls.py"].encode()},
        deleted=["tests/test_views.py"],
        renamed={"app/api/urls.py": "app/api/routes.py"},
    )
    assert Memory.objects.get(id=moved.id).related_files == ["app/api/routes.py"]
    assert Memory.objects.get(id=doomed.id).stale_at is not None
    assert not GraphNode.objects.filter(
        project=alice.project, path__in=["app/api/urls.py", "tests/test_views.py"]
    ).exists()
    assert ("app/api/routes.py", "app/api/views.py") in file_edges(alice.project)


def test_typescript_fixture_with_aliases_index_files_and_reexports(alice, ts_repo):
    services.index_directory(alice.project, str(ts_repo))
    assert file_edges(alice.project) == {
        ("src/lib/index.ts", "src/lib/math.ts"),
        ("src/lib/index.ts", "src/lib/format.ts"),
        ("src/lib/format.ts", "src/lib/math.ts"),
        ("src/components/Counter.tsx", "src/lib/math.ts"),
        ("src/components/Counter.tsx", "src/lib/index.ts"),
        ("src/components/Counter.tsx", "src/util/index.js"),
        ("src/util/index.js", "src/util/inner.js"),
        ("src/app.ts", "src/components/Counter.tsx"),
    }
    assert file_edges(alice.project, "exports") == {
        ("src/lib/index.ts", "src/lib/math.ts"),
        ("src/lib/index.ts", "src/lib/format.ts"),
    }
    math_impact = selectors.impact(project=alice.project, target="src/lib/math.ts", depth=3)
    assert "src/app.ts" in {d["file"] for d in math_impact["transitive"]}


def test_neighbours_and_code_chunks_feed_retrieval(alice, py_repo):
    services.index_directory(alice.project, str(py_repo))
    neighbours, origin = file_neighbours(alice.project.id, ["app/auth/tokens.py"])
    assert neighbours["app/api/views.py"] == pytest.approx(0.9) and neighbours[
        "app/auth/__init__.py"
    ] == pytest.approx(0.9)
    assert origin["app/api/views.py"].endswith("neighbour_files")
    for query in ("verify_jwt", "verifyJwt", "verify jwt token"):
        found = selectors.search_chunks(alice.project, query)
        assert found[0]["name"] == "verify_jwt", query
    assert found[0]["context_prefix"] == "File: app/auth/tokens.py | function: verify_jwt | Lines: 5-7"


def _tar(files: dict[str, str], extra=None) -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path, content in files.items():
            data = content.encode()
            info = tarfile.TarInfo(path)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        for info in extra or []:
            archive.addfile(info)
    buffer.seek(0)
    buffer.name = "repo.tar.gz"
    return buffer


def test_archive_upload_indexes_and_reports_status(alice, api_client, session_client):
    client = api_client(alice.key)
    assert client.get(f"projects/{alice.project.id}/graph/index").json()["status"] == "idle"
    files = {**PY_REPO, "big/huge.py": "x = 1\n" * 200_000, "bin/blob.py": "\x00binary"}
    response = client.client.post(
        f"/api/v1/projects/{alice.project.id}/graph/index", {"archive": _tar(files)}, **client.headers
    )
    assert response.status_code == 202, response.content
    status = client.get(f"projects/{alice.project.id}/graph/index").json()
    assert status["status"] == "done" and status["progress"] == 100
    assert client.get(f"projects/{alice.project.id}/graph/index/{response.json()['id']}").json() == status
    assert client.get(f"projects/{alice.project.id}/graph/index/{status['id'] + 1}").status_code == 404
    assert status["files"] == 6 and status["skipped"] == 3 and status["nodes"] > 6 and status["edges"] > 5
    impact = client.get(f"projects/{alice.project.id}/graph/impact", {"target": "app/auth/tokens.py"}).json()
    assert {d["file"] for d in impact["direct"]} == {"app/api/views.py", "app/auth/__init__.py"}
    deps = client.get(f"projects/{alice.project.id}/graph/dependencies", {"file": "app/api/urls.py"}).json()
    assert deps == {
        "file": "app/api/urls.py",
        "dependencies": [{"file": "app/api/views.py", "depth": 1, "edge_types": ["imports"]}],
    }
    nodes = client.get(f"projects/{alice.project.id}/graph/nodes", {"q": "verify_jwt"}).json()
    assert nodes[0]["key"] == "app/auth/tokens.py:verify_jwt"
    assert client.get(f"projects/{alice.project.id}/graph/impact", {"target": "nope.py"}).status_code == 404


@pytest.mark.parametrize(
    "entry",
    [
        ("../evil.py", tarfile.REGTYPE),
        ("/etc/evil.py", tarfile.REGTYPE),
        ("link.py", tarfile.SYMTYPE),
        ("dev", tarfile.CHRTYPE),
    ],
)
def test_unsafe_archives_are_refused_whole(alice, api_client, entry):
    name, kind = entry
    info = tarfile.TarInfo(name)
    info.type = kind
    if kind == tarfile.SYMTYPE:
        info.linkname = "/etc/passwd"
    client = api_client(alice.key)
    response = client.client.post(
        f"/api/v1/projects/{alice.project.id}/graph/index",
        {"archive": _tar({"ok.py": "x = 1\n"}, [info])},
        **client.headers,
    )
    assert response.status_code == 422
    assert name in response.json()["error"]["details"]["entries"]
    assert not IndexJob.objects.exists() and not GraphNode.objects.exists()


@pytest.mark.parametrize(
    ("files", "offender"),
    [
        ({"a": "x", "a/b.py": "y = 1\n"}, "a/b.py"),
        ({"d/f.py": "y = 1\n", "d": "x"}, "d"),
        ({"x" * 300 + ".py": "y = 1\n"}, "x" * 300 + ".py"),
    ],
)
def test_entries_the_filesystem_cannot_hold_are_refused(alice, api_client, files, offender):
    client = api_client(alice.key)
    response = client.client.post(
        f"/api/v1/projects/{alice.project.id}/graph/index", {"archive": _tar(files)}, **client.headers
    )
    assert response.status_code == 422, response.content
    assert response.json()["error"]["details"]["entries"] == [offender]
    assert not IndexJob.objects.exists() and not GraphNode.objects.exists()


def test_a_dotted_directory_keeps_its_dot(alice, api_client):
    client = api_client(alice.key)
    files = {"./.ci/check.py": "from .ci import util\n", ".ci/util.py": "x = 1\n"}
    response = client.client.post(
        f"/api/v1/projects/{alice.project.id}/graph/index", {"archive": _tar(files)}, **client.headers
    )
    assert response.status_code == 202, response.content
    paths = set(GraphNode.objects.filter(project=alice.project, kind="file").values_list("path", flat=True))
    assert paths == {".ci/check.py", ".ci/util.py"}
    batch = {"files": [{"path": "./.ci/other.py", "content": "x = 2\n"}]}
    assert client.post(f"projects/{alice.project.id}/graph/index", batch).status_code in (200, 202)
    assert GraphNode.objects.filter(project=alice.project, kind="file", path=".ci/other.py").exists()


def test_zip_archives_and_bad_uploads(alice, api_client):
    client = api_client(alice.key)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("pkg/__init__.py", "")
        archive.writestr("pkg/a.py", "from . import b\n")
        archive.writestr("pkg/b.py", "")
    buffer.seek(0)
    buffer.name = "repo.zip"
    url = f"/api/v1/projects/{alice.project.id}/graph/index"
    assert client.client.post(url, {"archive": buffer}, **client.headers).status_code == 202
    assert file_edges(alice.project) == {("pkg/a.py", "pkg/b.py")}
    junk = io.BytesIO(b"not an archive")
    junk.name = "x.tar.gz"
    assert client.client.post(url, {"archive": junk}, **client.headers).status_code == 422
    assert client.client.post(url, {"other": junk}, **client.headers).status_code == 422
    assert client.post(url, "x", content_type="text/plain").status_code == 415


def test_json_batches_update_incrementally(alice, api_client, py_repo):
    services.index_directory(alice.project, str(py_repo))
    client = api_client(alice.key)
    body = {
        "files": [{"path": "app/api/urls.py", "content": "from app.auth import tokens\n"}],
        "deleted": ["tests/test_views.py"],
    }
    response = client.post(f"projects/{alice.project.id}/graph/index", body)
    assert response.status_code == 202 and response.json()["kind"] == "incremental"
    assert client.get(f"projects/{alice.project.id}/graph/index").json()["status"] == "done"
    assert ("app/api/urls.py", "app/auth/tokens.py") in file_edges(alice.project)
    assert ("app/api/urls.py", "app/api/views.py") not in file_edges(alice.project)
    moved = client.post(
        f"projects/{alice.project.id}/graph/index", {"renamed": {"app/api/urls.py": "app/api/r.py"}}
    )
    assert moved.status_code == 422 and "app/api/r.py" in str(moved.json()["error"]["details"])
    assert ("app/api/urls.py", "app/auth/tokens.py") in file_edges(alice.project)  # nothing lost
    for bad in (
        {"files": [{"path": "../x.py", "content": ""}]},
        {},
        {"files": [], "nope": 1},
        {"deleted": ["/abs.py"]},
    ):
        assert client.post(f"projects/{alice.project.id}/graph/index", bad).status_code == 422, bad


def test_roles_gate_indexing(alice, person_with_role, api_client):
    viewer = person_with_role(Role.VIEWER)
    body = {"files": [{"path": "a.py", "content": "import os\n"}]}
    assert api_client(viewer.key).post(f"projects/{alice.project.id}/graph/index", body).status_code == 403
    assert api_client(viewer.key).get(f"projects/{alice.project.id}/graph/index").status_code == 200


@pytest.mark.slow
def test_python_import_edges_match_the_interpreter_on_djangos_source(alice):
    """Precision and recall of import edges from django/db and django/core (about 200 real
    files, resolved against all of Django), against ast + importlib. `bench_graph` reports the
    same check over the whole package."""
    root = os.path.dirname(os.path.dirname(django.__file__))
    services.index_directory(alice.project, root, include=["django"])
    reference, excluded, files = importcheck.reference_edges(
        root, "django", under=("django/db", "django/core")
    )
    mine = {(s, t) for s, t in file_edges(alice.project) if s.startswith(("django/db/", "django/core/"))}
    check = importcheck.compare(mine, reference, excluded, files)
    assert check.files > 150 and check.reference_edges > 500
    assert check.precision >= 0.97 and check.recall >= 0.97, check


@pytest.mark.django_db(transaction=True)
def test_two_updates_of_one_project_at_once_both_land(alice):
    """The second waits for the first and then reads its nodes (both inserted the same file's
    nodes, and the later one failed on the unique key with its files lost)."""
    from django.db import transaction

    from tests.processes import Worker, wait_until_another_session_waits_for_a_lock

    with transaction.atomic():
        services.index_changes(alice.project, changed={"app/util.py": b"def helper():\n    return 1\n"})
        second = Worker(
            lambda: services.index_changes(
                alice.project,
                changed={"app/util.py": b"def helper():\n    return 2\n", "app/b.py": b"x = 1\n"},
            )
        )
        wait_until_another_session_waits_for_a_lock()
    assert isinstance(second.finish(), services.IndexResult)
    files = GraphNode.objects.filter(project=alice.project, kind="file")
    assert sorted(files.values_list("path", flat=True)) == ["app/b.py", "app/util.py"]
    assert GraphNode.objects.filter(project=alice.project, key="app/util.py:helper").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_full_index_reports_progress_without_holding_the_project_row(alice, tmp_path, monkeypatch):
    """Progress was numbered (an UPDATE of the project row) inside the index's transaction: every
    other write to the project that announced itself waited for the whole index, and a failed
    index handed the sequence numbers it had sent out to the next events again."""
    import threading

    from django.db import OperationalError, connection, transaction

    from apps.tenants.models import Project
    from tests.processes import Worker

    for path, content in PY_REPO.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(content)
    job = IndexJob.objects.create(project=alice.project, kind="full", source_dir=str(tmp_path))
    reached, go = threading.Event(), threading.Event()
    refresh = services._refresh_statistics

    def paused(*args, **kwargs):  # (inside the index's transaction, after its last report)
        reached.set()
        go.wait(timeout=60)
        return refresh(*args, **kwargs)

    monkeypatch.setattr(services, "_refresh_statistics", paused)
    before = Project.objects.get(id=alice.project.id).event_seq
    index = Worker(
        lambda: services.job_run(
            job, lambda report: services.index_directory(alice.project, str(tmp_path), progress=report)
        )
    )
    try:
        assert reached.wait(timeout=60)
        assert IndexJob.objects.get(id=job.id).progress == 90  # (a poller sees it, too)
        with transaction.atomic(), connection.cursor() as cursor:
            try:
                cursor.execute(
                    "SELECT 1 FROM tenants_project WHERE id = %s FOR UPDATE NOWAIT", [str(alice.project.id)]
                )
            except OperationalError:
                pytest.fail("the index holds the project's row")
    finally:
        go.set()
    assert index.finish().status == "done"
    assert Project.objects.get(id=alice.project.id).event_seq > before


def test_what_a_tar_decompresses_counts_toward_its_budget_skipped_members_too(
    alice, api_client, settings, monkeypatch
):
    """Only the members unpacked counted: a gzip bomb in a vendored (or too large) member was
    decompressed whole, minutes of a worker, and then skipped."""
    from apps.graph import archive

    client = api_client(alice.key)
    url = f"/api/v1/projects/{alice.project.id}/graph/index"
    settings.MAX_UNPACKED_BYTES = 4_000
    bomb = _tar({"node_modules/zeros.js": "0" * 5_000, "a.py": "x = 1\n"})
    response = client.client.post(url, {"archive": bomb}, **client.headers)
    assert response.status_code == 413 and response.json()["error"]["code"] == "too_large"
    monkeypatch.setattr(archive, "MAX_MEMBERS", 3)
    many = _tar({f"m{i}.py": "x = 1\n" for i in range(4)})
    assert client.client.post(url, {"archive": many}, **client.headers).status_code == 413
    assert not IndexJob.objects.exists()


def test_a_zip_entry_without_a_name_is_refused_not_a_500(alice, api_client):
    client = api_client(alice.key)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(zipfile.ZipInfo(""), b"1")
        archive.writestr("a.py", "x = 1\n")
    buffer.seek(0)
    buffer.name = "repo.zip"
    response = client.client.post(
        f"/api/v1/projects/{alice.project.id}/graph/index", {"archive": buffer}, **client.headers
    )
    assert response.status_code == 422 and response.json()["error"]["details"]["entries"] == [""]


def test_a_file_sent_and_deleted_or_renamed_onto_itself_keeps_the_edges_into_it(alice):
    """It was cleared with its nodes, and the other files' edges into it went with them."""
    files = {
        "pkg/__init__.py": b"",
        "pkg/a.py": b"from pkg import b\n",
        "pkg/b.py": b"def f():\n    return 1\n",
    }
    services.index_changes(alice.project, changed=files)
    assert ("pkg/a.py", "pkg/b.py") in file_edges(alice.project)
    again = {"pkg/b.py": b"def f():\n    return 3\n"}
    services.index_changes(alice.project, changed=again, deleted=["pkg/b.py"])
    assert ("pkg/a.py", "pkg/b.py") in file_edges(alice.project)
    services.index_changes(alice.project, changed={}, renamed={"pkg/b.py": "pkg/b.py"})
    assert ("pkg/a.py", "pkg/b.py") in file_edges(alice.project)
