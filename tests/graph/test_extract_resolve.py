"""Extraction and resolution without the database: what tree-sitter sees in each language."""

from __future__ import annotations

from apps.graph.closure import closure, strongest
from apps.graph.extract import chunks, extract, is_test_file
from apps.graph.resolve import Resolver, python_module


def test_python_definitions_calls_bases_docstrings_and_exports():
    source = b'"""Mod."""\nimport os\nfrom .x import a as b, c\n__all__ = ["Foo"]\n\nclass Foo(Base, m.Mixin):\n    """Foo doc."""\n    def bar(self):\n        helper(1)\n        self.baz()\n\n    def baz(self):\n        pass\n\ndef helper(x):\n    return os.path.join(x)\n'
    facts = extract("pkg/mod.py", source)
    assert [(i.specifier, i.names) for i in facts.imports] == [("os", ()), (".x", ("a", "c"))]
    assert [(d.kind, d.qualname) for d in facts.definitions] == [
        ("class", "Foo"), ("method", "Foo.bar"), ("method", "Foo.baz"), ("function", "helper")
    ]  # fmt: skip
    assert ("Foo.bar", "helper") in facts.calls and ("Foo.bar", "baz") in facts.calls
    assert facts.bases == [("Foo", "Base", "extends"), ("Foo", "Mixin", "extends")]
    assert facts.exports == ["Foo"] and facts.docstring == "Mod."
    assert facts.definitions[0].docstring == "Foo doc."
    assert [c.name for c in chunks(facts, source)] == ["Foo", "helper"]
    assert chunks(facts, source)[0].context_prefix == "File: pkg/mod.py | class: Foo | Lines: 6-13"


def test_other_languages():
    go = extract(
        "svc/main.go",
        b'package main\nimport (\n "fmt"\n "example.com/m/pkg/util"\n)\ntype S struct{}\ntype I interface{}\nfunc (s *S) M() { util.Do() }\n',
    )
    assert [i.specifier for i in go.imports] == ["fmt", "example.com/m/pkg/util"]
    assert [(d.kind, d.qualname) for d in go.definitions] == [
        ("class", "S"),
        ("interface", "I"),
        ("method", "S.M"),
    ]
    rust = extract(
        "src/lib.rs",
        b"mod foo;\nmod inline { }\nuse crate::foo::Thing;\nstruct A;\ntrait T {}\nimpl T for A { fn f(&self) {} }\n",
    )
    assert [(i.kind, i.specifier) for i in rust.imports] == [("mod", "foo"), ("use", "crate::foo::Thing")]
    assert rust.bases == [("A", "T", "implements")]
    java = extract(
        "src/com/x/App.java",
        b"package com.x;\nimport com.x.util.Helper;\npublic class App extends Base implements Runnable { void run() { Helper.go(); } }\n",
    )
    assert java.package == "com.x" and [i.specifier for i in java.imports] == ["com.x.util.Helper"]
    assert java.bases == [("App", "Base", "extends"), ("App", "Runnable", "implements")]


def test_python_resolution_absolute_relative_packages():
    files = [
        "app/__init__.py",
        "app/auth/__init__.py",
        "app/auth/tokens.py",
        "app/api/views.py",
        "src/lib/core.py",
    ]
    resolver = Resolver(files)
    assert (
        python_module("src/lib/core.py") == "lib.core" and python_module("app/auth/__init__.py") == "app.auth"
    )
    facts = extract(
        "app/api/views.py",
        b"import app.auth.tokens\nfrom ..auth import tokens\nfrom .. import auth\nfrom lib.core import x\nimport os\n",
    )
    assert sorted(t for t, _ in resolver.resolve(facts)) == [
        "app/auth/__init__.py", "app/auth/tokens.py", "app/auth/tokens.py", "src/lib/core.py"
    ]  # fmt: skip


def test_go_rust_java_resolution():
    files = ["go.mod", "pkg/util/a.go", "pkg/util/a_test.go", "cmd/main.go", "src/lib.rs", "src/foo.rs",
             "src/foo/bar.rs", "src/main/java/com/x/util/Helper.java", "src/main/java/com/x/App.java"]  # fmt: skip
    resolver = Resolver(files, go_mod="module example.com/m\n\ngo 1.22\n")
    go = extract("cmd/main.go", b'package main\nimport "example.com/m/pkg/util"\n')
    assert [t for t, _ in resolver.resolve(go)] == ["pkg/util/a.go"]
    rust = extract("src/lib.rs", b"mod foo;\nuse crate::foo::bar::Baz;\n")
    assert [t for t, _ in resolver.resolve(rust)] == ["src/foo.rs", "src/foo/bar.rs"]
    java = extract(
        "src/main/java/com/x/App.java", b"package com.x;\nimport com.x.util.Helper;\nimport com.x.util.*;\n"
    )
    assert [t for t, _ in resolver.resolve(java)] == ["src/main/java/com/x/util/Helper.java"] * 2


def test_test_files_are_recognised():
    assert all(
        map(
            is_test_file,
            ["tests/test_a.py", "a_test.go", "src/x.test.ts", "src/__tests__/x.js", "FooTest.java"],
        )
    )
    assert not any(map(is_test_file, ["src/testing.py", "contest.py"]))


def test_closure_keeps_shortest_paths_with_weights_up_to_the_cap():
    forward = strongest(
        [
            (1, 2, "imports", 0.9),
            (2, 3, "calls", 0.8),
            (1, 3, "exports", 0.6),
            (3, 4, "imports", 0.9),
            (1, 2, "calls", 0.8),
        ]
    )
    rows = {(r.ancestor, r.descendant): r for r in closure([1], forward, max_depth=2)}
    assert set(rows) == {(2, 1), (3, 1), (4, 1)}
    assert rows[(3, 1)].depth == 1 and rows[(3, 1)].kinds == ("exports",)
    assert rows[(4, 1)].path == (1, 3, 4) and abs(rows[(4, 1)].weight - 0.54) < 1e-9
    assert closure([1], forward, max_depth=1) and all(
        r.depth == 1 for r in closure([1], forward, max_depth=1)
    )


def test_what_is_read_from_captures_follows_the_file_not_the_order_tree_sitter_returns():
    # tree-sitter returns a capture's nodes in no promised order (it varied from one call to the
    # next on this very shape), and `__all__` is read by pairing names with list values.
    source = (
        b'__lazy__ = ["a"]\n_MARKER = ["b"]\n\n\ndef one():\n    pass\n\n\ndef two():\n    pass\n\n\n'
        b'__all__ = ["two"]\nmore = ["c", "d"]\n'
    )
    ts = b'import { a } from "./a";\nimport { b } from "./b";\nexport { c } from "./c";\nimport d from "./d";\n'
    for _ in range(30):
        assert extract("pkg/mod.py", source).exports == ["two"]
        assert [i.specifier for i in extract("src/x.ts", ts).imports] == ["./a", "./b", "./d", "./c"]
