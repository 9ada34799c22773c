"""The full index's bulk path: COPY formatting, replacement, failure, streaming closure."""

from __future__ import annotations

import asyncio
import os

import pytest
from django.db import connection

from apps.graph import bulk, selectors, services
from apps.graph.closure import closure, copy_lines, strongest
from apps.graph.extract import extract
from apps.graph.models import CodeChunk, GraphClosure, GraphEdge, GraphFileLinks, GraphNode, IndexJob
from memorysaas.kernel.realtime import project_group
from tests.graph.conftest import write_tree

ODD_DIR = "we\\ird dir/ta\tb"  # a backslash and a tab in directory names
ODD_FILE = f"{ODD_DIR}/new\nline, {{brace}} é.py"
ODD_SOURCE = (
    '"""Back\\\\slash \\\\N tab\there, carriage\rreturn, quote\' and é."""\n'
    + "# " + "x" * 9000 + "\n"  # NUL only after the first 8 KiB: not taken for a binary file
    + "\n\n"
    + "def parse_header(value):\n"
    + '    """\\\\N is not NULL; \\\\t is not a tab."""\n'
    + '    return value.split("\\t") + ["\x00"]\n'
)  # fmt: skip


def counts(project) -> dict[str, int]:
    return {
        "nodes": GraphNode.objects.filter(project=project).count(),
        "edges": GraphEdge.objects.filter(project=project).count(),
        "closure": GraphClosure.objects.filter(project=project).count(),
        "chunks": CodeChunk.objects.filter(project=project).count(),
        "links": GraphFileLinks.objects.filter(project=project).count(),
    }


def test_field_formatting_escapes_what_copy_text_format_reads():
    assert bulk.text("a\\b\tc\nd\re\x00f") == "a\\\\b\\tc\\nd\\re" + "f"
    assert bulk.field(None) == "\\N" and bulk.field("\\N") == "\\\\N"
    assert bulk.field(True) == "t" and bulk.field(False) == "f" and bulk.field(3) == "3"
    assert bulk.field([1, 2]) == "{1,2}"
    assert bulk.json_text({"doc": "a\x00b", "list": ["c\x00"]}) == '{"doc": "ab", "list": ["c"]}'
    assert bulk.json_text({"doc": "\\u0000 is text"}) == '{"doc": "\\\\u0000 is text"}'


def test_odd_characters_in_paths_names_and_content_survive_the_copy(alice, tmp_path):
    root = write_tree(tmp_path / "odd", {ODD_FILE: ODD_SOURCE, "plain.py": "x = 1\n"})
    facts = extract(ODD_FILE, ODD_SOURCE.encode())
    assert "\\" in facts.docstring and "\\" in facts.definitions[0].docstring
    result = services.index_directory(alice.project, str(root))
    assert result.files == 2
    node = GraphNode.objects.get(project=alice.project, kind="file", path=ODD_FILE)
    assert node.key == ODD_FILE and node.name == os.path.basename(ODD_FILE)
    assert node.metadata["docstring"] == facts.docstring
    function = GraphNode.objects.get(project=alice.project, key=f"{ODD_FILE}:parse_header")
    assert function.metadata["docstring"] == facts.definitions[0].docstring
    assert GraphNode.objects.filter(project=alice.project, kind="directory", path=ODD_DIR).exists()
    chunk = CodeChunk.objects.get(project=alice.project, path=ODD_FILE, name="parse_header")
    body = ODD_SOURCE[ODD_SOURCE.index("def parse_header") :].rstrip("\n")
    assert "\x00" in body and chunk.content == body.replace("\x00", "")
    assert chunk.context_prefix == f"File: {ODD_FILE} | function: parse_header | Lines: 5-7"
    assert CodeChunk.objects.get(project=alice.project, path="plain.py").content == "x = 1\n"
    assert selectors.search_chunks(alice.project, "parse header")[0]["path"] == ODD_FILE


def test_a_full_reindex_replaces_the_graph_rather_than_adding_to_it(alice, py_repo):
    services.index_directory(alice.project, str(py_repo))
    first = counts(alice.project)
    assert all(first.values()), first
    services.index_directory(alice.project, str(py_repo))
    assert counts(alice.project) == first
    (py_repo / "tests" / "test_views.py").unlink()
    services.index_directory(alice.project, str(py_repo))
    assert not GraphNode.objects.filter(project=alice.project, path="tests/test_views.py").exists()
    assert not CodeChunk.objects.filter(project=alice.project, path="tests/test_views.py").exists()
    after = counts(alice.project)
    assert after["nodes"] < first["nodes"] and after["closure"] < first["closure"]


def test_a_full_index_that_fails_midway_leaves_the_previous_graph(alice, py_repo, monkeypatch):
    services.index_directory(alice.project, str(py_repo))
    before = counts(alice.project)
    real_chunks, seen = services.chunks, []

    def failing_chunks(facts, source):  # fails while the chunks' COPY is open
        seen.append(facts.path)
        if len(seen) == 3:
            raise RuntimeError("extraction failed")
        return real_chunks(facts, source)

    monkeypatch.setattr(services, "chunks", failing_chunks)
    with pytest.raises(RuntimeError):
        services.index_directory(alice.project, str(py_repo))
    assert counts(alice.project) == before  # rolled back, and the connection still works
    monkeypatch.setattr(services, "chunks", real_chunks)
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    assert services.index_directory(alice.project, str(py_repo)).files == 6


def test_unstorable_paths_and_symbols_are_skipped_and_counted(alice, tmp_path):
    root = write_tree(tmp_path / "repo", {"ok.py": "import deep\n", "deep.py": "x = 1\n"})
    (root / os.fsdecode(b"latin\xe9.py")).write_bytes(b"x = 1\n")  # not UTF-8
    long_dir = root / ("d" * 250) / ("e" * 250)
    long_dir.mkdir(parents=True)
    (long_dir / "f.py").write_text("x = 1\n")  # a path over 500 characters
    nested = "class A:\n" + "".join(f"{'    ' * i}class {'N' * 200}{i}:\n" for i in range(1, 5))
    (root / "nested.py").write_text(nested + "    " * 5 + "pass\n")
    result = services.index_directory(alice.project, str(root))
    assert result.files == 3
    assert result.skipped == {"binary": 0, "vendored": 0, "huge": 0, "undecodable_name": 1, "long_path": 1}
    keys = set(
        GraphNode.objects.filter(project=alice.project, path="nested.py").values_list("key", flat=True)
    )
    assert "nested.py:A" in keys and all(len(k) <= services.MAX_KEY for k in keys)
    assert len(keys) == 5  # the file, A and the three nested classes whose keys still fit


def test_copy_lines_are_the_closure_rows_in_copy_text_format():
    forward = strongest(
        [(1, 2, "imports", 0.9), (2, 3, "calls", 0.8), (3, 1, "imports", 0.9), (2, 4, "exports", 0.6)]
    )
    rows = closure([1, 2, 3], forward, max_depth=5)
    expected = [
        f"p\t{r.ancestor}\t{r.descendant}\t{r.depth}\t{{{','.join(map(str, r.path))}}}\t{{{','.join(r.kinds)}}}\t{r.weight}"
        for r in rows
    ]
    assert list(copy_lines([1, 2, 3], forward, 5, "p")) == expected
    assert "p\t4\t1\t2\t{1,2,4}\t{imports,exports}\t0.54" in expected


def test_a_full_index_job_announces_rising_progress_on_the_project_group(alice, py_repo):
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(project_group(alice.project.id), channel)
    job = IndexJob.objects.create(project=alice.project, kind="full", source_dir=str(py_repo))
    services.job_run(
        job, lambda progress: services.index_directory(alice.project, str(py_repo), progress=progress)
    )
    events = []
    while not events or events[-1]["status"] == "running":
        # A guard against hanging if an event never comes, not a timing assertion.
        message = async_to_sync(asyncio.wait_for)(layer.receive(channel), 10)
        events.append(message["data"])
    values = [e["progress"] for e in events]
    assert values == [10, 50, 75, 90, 100] and events[-1]["status"] == "done"
    job.refresh_from_db()
    assert job.status == "done" and job.files == 6


def test_deleting_a_project_takes_its_whole_graph_with_it(alice, charlie, py_repo):
    services.index_directory(alice.project, str(py_repo))
    services.index_directory(charlie.project, str(py_repo))
    kept = counts(charlie.project)
    assert all(counts(alice.project).values())
    alice.project.delete()  # closure rows have no project cascade of their own: they go with the nodes
    assert GraphClosure.objects.count() == kept["closure"]
    assert GraphNode.objects.count() == kept["nodes"] and GraphEdge.objects.count() == kept["edges"]
    assert CodeChunk.objects.count() == kept["chunks"]
    assert GraphFileLinks.objects.count() == kept["links"]


def stored_graph(project) -> dict[str, set]:
    """The project's graph with node ids replaced by keys, to compare two indexes of one tree."""
    keys = dict(GraphNode.objects.filter(project=project).values_list("id", "key"))
    closure_rows = GraphClosure.objects.filter(project=project).values_list(
        "ancestor_id", "descendant_id", "depth", "path", "edge_kinds", "weight"
    )
    return {
        "nodes": set(GraphNode.objects.filter(project=project).values_list("key", "kind", "start_line")),
        "edges": {
            (keys[s], keys[t], kind, confidence)
            for s, t, kind, confidence in GraphEdge.objects.filter(project=project).values_list(
                "source_id", "target_id", "kind", "confidence"
            )
        },
        "closure": {
            (keys[a], keys[d], depth, tuple(keys[i] for i in path), tuple(kinds), weight)
            for a, d, depth, path, kinds, weight in closure_rows
        },
        "chunks": set(
            CodeChunk.objects.filter(project=project).values_list("path", "name", "start_line", "content")
        ),
    }


def test_parsing_in_several_processes_stores_the_same_graph(alice, charlie, py_repo, settings, monkeypatch):
    settings.GRAPH_PARSE_PROCESSES = 1
    services.index_directory(charlie.project, str(py_repo))
    settings.GRAPH_PARSE_PROCESSES = 3
    monkeypatch.setattr(services.fanout, "MIN_FILES_PER_PROCESS", 1)  # fork even for six files
    forks = []
    real_fork = os.fork
    monkeypatch.setattr(os, "fork", lambda: forks.append(1) or real_fork())
    services.index_directory(alice.project, str(py_repo))
    assert len(forks) == 3
    alone, shared = stored_graph(charlie.project), stored_graph(alice.project)
    assert all(alone.values()) and shared == alone
    assert selectors.search_chunks(alice.project, "verify jwt")[0]["path"] == "app/auth/tokens.py"
