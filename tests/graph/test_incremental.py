"""Incremental batches that add, delete or rename files end where a full index of the final tree
does: other files' imports that the batch moved are linked again from their stored facts."""

from __future__ import annotations

from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.graph import services
from apps.graph.models import EDGE_WEIGHTS, GraphClosure, GraphEdge, GraphFileLinks, GraphNode
from tests.graph.conftest import write_tree


def dependency_graph(project) -> dict[str, set]:
    """The edges that carry impact and the closure, by key, to compare two projects."""
    keys = dict(GraphNode.objects.filter(project=project).values_list("id", "key"))
    edges = GraphEdge.objects.filter(project=project, kind__in=list(EDGE_WEIGHTS))
    closure_rows = GraphClosure.objects.filter(project=project).values_list(
        "ancestor_id", "descendant_id", "depth", "path", "edge_kinds", "weight"
    )
    return {
        "edges": {
            (keys[s], keys[t], kind) for s, t, kind in edges.values_list("source_id", "target_id", "kind")
        },
        "closure": {
            (keys[a], keys[d], depth, tuple(keys[i] for i in path), tuple(kinds), weight)
            for a, d, depth, path, kinds, weight in closure_rows
        },
    }


def assert_same_as_full_index(incremental, full, tree: dict[str, str], root) -> None:
    services.index_directory(full, str(write_tree(root, tree)))
    assert dependency_graph(incremental) == dependency_graph(full)


def encoded(files: dict[str, str]) -> dict[str, bytes]:
    return {path: content.encode() for path, content in files.items()}


A_USES_TOOLS = {
    "a.py": "from tools.util import helper\n\n\ndef main():\n    return helper()\n",
    "b.py": "from a import main\n\n\ndef run():\n    return main()\n",
}
TOOLS_UTIL = {"tools/util.py": "def helper():\n    return 1\n"}


def test_a_file_that_arrives_later_is_linked_from_files_indexed_before_it(alice, charlie, tmp_path):
    services.index_directory(alice.project, str(write_tree(tmp_path / "before", A_USES_TOOLS)))
    result = services.index_changes(alice.project, changed=encoded(TOOLS_UTIL))
    assert result.relinked == ["a.py"]
    graph = dependency_graph(alice.project)
    assert ("a.py", "tools/util.py", "imports") in graph["edges"]
    assert ("a.py:main", "tools/util.py:helper", "calls") in graph["edges"]
    assert_same_as_full_index(
        alice.project, charlie.project, {**A_USES_TOOLS, **TOOLS_UTIL}, tmp_path / "full"
    )


PKG = {
    "pkg/__init__.py": "def run():\n    return 0\n",
    "c.py": "from pkg import sub\n\n\ndef go():\n    return sub.run()\n",
    "d.py": "import c\n",
}
SUB = {"pkg/sub.py": "def run():\n    return 1\n"}


def test_a_submodule_added_then_deleted_moves_an_import_off_its_package_and_back(alice, charlie, tmp_path):
    """`from pkg import sub` lands in pkg/__init__.py until pkg/sub.py exists, and back there when it goes."""
    services.index_changes(alice.project, changed=encoded(PKG))
    assert ("c.py", "pkg/__init__.py", "imports") in dependency_graph(alice.project)["edges"]
    services.index_changes(alice.project, changed=encoded(SUB))
    assert ("c.py:go", "pkg/sub.py:run", "calls") in dependency_graph(alice.project)["edges"]
    assert_same_as_full_index(alice.project, charlie.project, {**PKG, **SUB}, tmp_path / "added")
    result = services.index_changes(alice.project, changed={}, deleted=list(SUB))
    assert result.relinked == ["c.py"]
    assert_same_as_full_index(alice.project, charlie.project, PKG, tmp_path / "deleted")


SWAPPED = {
    "x.py": "def fx():\n    return 1\n",
    "y.py": "def fy():\n    return 2\n",
    "a.py": "from x import fx\nfrom y import fy\n\n\ndef main():\n    return fx() + fy()\n",
}


def test_a_rename_swap_links_the_importers_to_what_now_lives_at_each_path(alice, charlie, tmp_path):
    services.index_changes(alice.project, changed=encoded(SWAPPED))
    swap = {"x.py": SWAPPED["y.py"], "y.py": SWAPPED["x.py"]}
    result = services.index_changes(
        alice.project, changed=encoded(swap), renamed={"x.py": "y.py", "y.py": "x.py"}
    )
    assert result.relinked == ["a.py"]
    assert ("a.py:main", "y.py:fx", "calls") in dependency_graph(alice.project)["edges"]
    assert_same_as_full_index(alice.project, charlie.project, {**SWAPPED, **swap}, tmp_path / "full")


def test_a_rename_links_the_files_that_imported_the_new_name(alice, charlie, tmp_path):
    before = {**A_USES_TOOLS, "tools/old.py": TOOLS_UTIL["tools/util.py"]}
    services.index_changes(alice.project, changed=encoded(before))
    services.index_changes(
        alice.project, changed=encoded(TOOLS_UTIL), renamed={"tools/old.py": "tools/util.py"}
    )
    assert_same_as_full_index(
        alice.project, charlie.project, {**A_USES_TOOLS, **TOOLS_UTIL}, tmp_path / "full"
    )


def stored_links(project) -> list[tuple]:
    rows = GraphFileLinks.objects.filter(project=project).order_by("path")
    return list(rows.values_list("path", "language", "imports", "calls", "bases"))


def test_another_projects_link_facts_are_neither_read_nor_changed(alice, charlie):
    """Charlie's a.py imports tools.util too; alice's tools/util.py links alice's files only."""
    services.index_changes(charlie.project, changed=encoded({**A_USES_TOOLS, "e.py": "import tools.util\n"}))
    services.index_changes(alice.project, changed=encoded(A_USES_TOOLS))
    charlie_before = (stored_links(charlie.project), dependency_graph(charlie.project))
    with CaptureQueriesContext(connection) as queries:
        result = services.index_changes(alice.project, changed=encoded(TOOLS_UTIL))
    assert result.relinked == ["a.py"]  # (not charlie's e.py)
    touching = [q["sql"] for q in queries if "graph_graphfilelinks" in q["sql"]]
    assert touching and all(
        str(alice.project.id).replace("-", "") in sql.replace("-", "") for sql in touching
    )
    assert (stored_links(charlie.project), dependency_graph(charlie.project)) == charlie_before
    services.index_changes(alice.project, changed={}, deleted=["a.py", "b.py"])
    assert stored_links(alice.project) == [("tools/util.py", "python", [], [], [])]
    assert stored_links(charlie.project) == charlie_before[0]


def test_a_content_edit_links_no_other_file_again(alice):
    services.index_changes(alice.project, changed=encoded({**A_USES_TOOLS, **TOOLS_UTIL}))
    edited = {"tools/util.py": "def helper():\n    return 2\n\n\ndef other():\n    return 3\n"}
    with CaptureQueriesContext(connection) as queries:
        result = services.index_changes(alice.project, changed=encoded(edited))
    assert result.relinked == []
    reads = [
        q["sql"] for q in queries if q["sql"].startswith("SELECT") and "graph_graphfilelinks" in q["sql"]
    ]
    assert reads == []


def test_a_full_index_stores_link_facts_and_replaces_them(alice, tmp_path):
    root = write_tree(tmp_path / "repo", {**A_USES_TOOLS, **TOOLS_UTIL})
    services.index_directory(alice.project, str(root))
    links = GraphFileLinks.objects.get(project=alice.project, path="a.py")
    assert links.language == "python"
    assert links.imports == [["tools.util", ["helper"], False, "import"]]
    assert links.calls == [["main", "helper"]]
    (root / "b.py").unlink()
    services.index_directory(alice.project, str(root))
    assert [row[0] for row in stored_links(alice.project)] == ["a.py", "tools/util.py"]
