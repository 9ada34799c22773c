"""What one source file says about the code, read with tree-sitter. Pure: no Django.

`extract(path, source)` parses once and runs one compiled query per language, so the C side
does the tree walking; Python only sorts the captures into a `FileFacts`: the imports (raw
specifiers, resolved to files later by `resolve`), the definitions (classes, functions,
methods, interfaces) with their lines, the calls made from inside each definition, the bases
each class extends or implements, what the file exports, and the AST chunks to index.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass, field
from functools import cache

from tree_sitter import Node, Query, QueryCursor
from tree_sitter_language_pack import get_language, get_parser

LANGUAGES: dict[str, str] = {
    ".py": "python",
    ".pyi": "python",
    ".ts": "typescript",
    ".mts": "typescript",
    ".cts": "typescript",
    ".tsx": "tsx",
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".jsx": "javascript",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
}

_TS_QUERY = """
(import_statement source: (string (string_fragment) @import.source)) @import
(export_statement source: (string (string_fragment) @reexport.source)) @reexport
(export_statement declaration: [
  (function_declaration name: (identifier) @export.name)
  (class_declaration name: (_) @export.name)
  (lexical_declaration (variable_declarator name: (identifier) @export.name))])
(export_statement (export_clause (export_specifier name: (identifier) @export.name)))
(call_expression function: (identifier) @require.fn arguments: (arguments (string (string_fragment) @require.source)))
(class_declaration name: (_) @def.class.name) @def.class
(function_declaration name: (identifier) @def.function.name) @def.function
(method_definition name: (property_identifier) @def.method.name) @def.method
(variable_declarator name: (identifier) @def.function.name value: [(arrow_function) (function_expression)]) @def.function
(call_expression function: [(identifier) @call (member_expression property: (property_identifier) @call)])
"""

_TS_EXTRA = """
(class_heritage (extends_clause value: [(identifier) @extends (member_expression property: (property_identifier) @extends)]))
(export_statement declaration: [
  (interface_declaration name: (_) @export.name)
  (type_alias_declaration name: (_) @export.name)])
(interface_declaration name: (type_identifier) @def.interface.name) @def.interface
(implements_clause (type_identifier) @implements)
(extends_type_clause (type_identifier) @extends)
"""

QUERIES: dict[str, str] = {
    "python": """
(import_statement name: [(dotted_name) @import.module (aliased_import name: (dotted_name) @import.module)])
(import_from_statement module_name: [(dotted_name) (relative_import)] @from.module) @from
(class_definition name: (identifier) @def.class.name) @def.class
(function_definition name: (identifier) @def.function.name) @def.function
(call function: [(identifier) @call (attribute attribute: (identifier) @call)])
(class_definition superclasses: (argument_list [(identifier) @extends (attribute attribute: (identifier) @extends)]))
(expression_statement (assignment left: (identifier) @all.name right: (list) @all.value))
""",
    "typescript": _TS_QUERY + _TS_EXTRA,
    "tsx": _TS_QUERY + _TS_EXTRA,
    "javascript": _TS_QUERY
    + "(class_heritage [(identifier) @extends (member_expression property: (property_identifier) @extends)])",
    "go": """
(import_spec path: (interpreted_string_literal) @import.source)
(type_spec name: (type_identifier) @def.class.name type: (struct_type)) @def.class
(type_spec name: (type_identifier) @def.interface.name type: (interface_type)) @def.interface
(function_declaration name: (identifier) @def.function.name) @def.function
(method_declaration name: (field_identifier) @def.method.name) @def.method
(call_expression function: [(identifier) @call (selector_expression field: (field_identifier) @call)])
""",
    "rust": """
(mod_item name: (identifier) @mod.name !body) @mod
(use_declaration argument: (_) @use.path)
(struct_item name: (type_identifier) @def.class.name) @def.class
(enum_item name: (type_identifier) @def.class.name) @def.class
(trait_item name: (type_identifier) @def.interface.name) @def.interface
(function_item name: (identifier) @def.function.name) @def.function
(impl_item trait: (type_identifier) @impl.trait type: (type_identifier) @impl.type)
(call_expression function: [(identifier) @call (field_expression field: (field_identifier) @call) (scoped_identifier name: (identifier) @call)])
""",
    "java": """
(import_declaration (scoped_identifier) @import.name) @import
(package_declaration (scoped_identifier) @package.name)
(class_declaration name: (identifier) @def.class.name) @def.class
(interface_declaration name: (identifier) @def.interface.name) @def.interface
(method_declaration name: (identifier) @def.method.name) @def.method
(method_invocation name: (identifier) @call)
(superclass (type_identifier) @extends)
(super_interfaces (type_list (type_identifier) @implements))
""",
}

TEST_MARKERS = ("/tests/", "/test/", "/__tests__/", "/spec/")
MAX_CHUNK_LINES = 150


def language_of(path: str) -> str | None:
    return LANGUAGES.get(os.path.splitext(path)[1].lower())


def is_test_file(path: str) -> bool:
    name = os.path.basename(path)
    return (
        any(marker in f"/{path}" for marker in TEST_MARKERS)
        or name.startswith("test_")
        or name.endswith(("_test.py", "_test.go", "Test.java", "Tests.java"))
        or ".test." in name
        or ".spec." in name
    )


@dataclass
class Definition:
    kind: str  # class | function | method | interface
    name: str
    qualname: str
    start_line: int
    end_line: int
    start_byte: int
    end_byte: int
    parent: str | None = None  # qualname of the enclosing class
    docstring: str = ""


@dataclass
class Import:
    specifier: str  # python: dotted (relative with leading dots); others: the source string
    names: tuple[str, ...] = ()  # what `from x import a, b` takes
    reexport: bool = False
    kind: str = "import"  # import | mod (rust `mod x;`) | use (rust)


@dataclass
class FileFacts:
    path: str
    language: str
    lines: int
    imports: list[Import] = field(default_factory=list)
    definitions: list[Definition] = field(default_factory=list)
    calls: list[tuple[str | None, str]] = field(default_factory=list)  # (caller qualname, callee name)
    bases: list[tuple[str, str, str]] = field(default_factory=list)  # (class qualname, base name, kind)
    exports: list[str] = field(default_factory=list)
    package: str = ""  # java package
    docstring: str = ""


@dataclass
class Chunk:
    path: str
    language: str
    chunk_type: str  # function | class | module
    name: str
    start_line: int
    end_line: int
    content: str

    @property
    def context_prefix(self) -> str:
        """The chunk's context line, `File: … | function: name | Lines: a-b`, prepended at embed time."""
        parts = [f"File: {self.path}"]
        if self.chunk_type != "module":
            parts.append(f"{self.chunk_type}: {self.name or 'unknown'}")
        parts.append(f"Lines: {self.start_line}-{self.end_line}")
        return " | ".join(parts)


@cache
def _parser(language: str):
    return get_parser(language)


@cache
def _query(language: str) -> Query:
    return Query(get_language(language), QUERIES[language])


def parse_only(source: bytes, language: str) -> None:
    """The baseline the benchmark compares indexing with: tree-sitter parsing and nothing else."""
    _parser(language).parse(source)


def _text(node: Node) -> str:
    text = node.text
    return text.decode("utf-8", "replace") if text is not None else ""


def _python_docstring(node: Node) -> str:
    """The first statement's string, if it is one (the grammar may or may not wrap it in an
    expression_statement); string_content children hold the text without quotes."""
    body = node.child_by_field_name("body") if node.type != "module" else node
    # `named_child(0)`, not `named_children[0]`, which builds a list of every statement.
    first = body.named_child(0) if body is not None and body.named_child_count else None
    if first is not None and first.type == "expression_statement" and first.named_child_count:
        first = first.named_child(0)
    if first is None or first.type != "string":
        return ""
    raw = "".join(_text(c) for c in first.named_children if c.type == "string_content")
    return " ".join(raw.split())[:300]


def _strip_quotes(value: str) -> str:
    return value.strip("\"'`")


def extract(path: str, source: bytes, language: str | None = None) -> FileFacts:
    language = language or language_of(path)
    if language is None:
        raise ValueError(f"no grammar for {path}")
    tree = _parser(language).parse(source)
    facts = FileFacts(path=path, language=language, lines=source.count(b"\n") + 1)
    captures = _in_document_order(QueryCursor(_query(language)).captures(tree.root_node))
    _definitions(facts, captures, language)
    enclosing = _Enclosing(facts.definitions)
    facts.calls = [(enclosing(node.start_byte), _text(node)) for node in captures.get("call", ())]
    for kind in ("extends", "implements"):
        for node in captures.get(kind, ()):
            owner = enclosing(node.start_byte)
            if owner is not None:
                facts.bases.append((owner, _text(node), kind))
    for trait, owner in zip(captures.get("impl.trait", ()), captures.get("impl.type", ()), strict=False):
        facts.bases.append((_text(owner), _text(trait), "implements"))
    IMPORTERS[language](facts, captures)
    if language == "python":
        facts.docstring = _python_docstring(tree.root_node)
    return facts


def _in_document_order(captures: dict[str, list[Node]]) -> dict[str, list[Node]]:
    """Each capture's nodes in the order they appear in the file. tree-sitter does not promise
    that order (the same file can come back in another order from one call to the next), and
    what is read from them depends on it: which name goes with which `__all__` value, or which
    `impl` trait with which type, and the order of the imports, which decides how calls resolve."""
    return {name: sorted(nodes, key=lambda n: (n.start_byte, n.end_byte)) for name, nodes in captures.items()}


class _Enclosing:
    """The innermost definition around a byte offset: bisect to the last definition starting
    before it, then climb to the first ancestor whose span still covers it."""

    def __init__(self, definitions: list[Definition]) -> None:
        self.defs = sorted(definitions, key=lambda d: d.start_byte)
        self.starts = [d.start_byte for d in self.defs]
        by_name = {d.qualname: d for d in self.defs}
        self.parent = {d.qualname: by_name.get(d.parent) if d.parent else None for d in self.defs}

    def __call__(self, offset: int) -> str | None:
        index = bisect.bisect_right(self.starts, offset) - 1
        current = self.defs[index] if index >= 0 else None
        while current is not None and offset >= current.end_byte:
            current = self.parent[current.qualname]
        return current.qualname if current is not None else None


def _definitions(facts: FileFacts, captures: dict[str, list[Node]], language: str) -> None:
    nodes: list[tuple[Node, str]] = []
    for kind in ("class", "interface", "function", "method"):
        nodes += [(n, kind) for n in captures.get(f"def.{kind}", ())]
    nodes.sort(key=lambda item: (item[0].start_byte, -item[0].end_byte))
    stack: list[tuple[int, Definition]] = []  # enclosing definitions by end byte
    for node, kind in nodes:
        name_node = node.child_by_field_name("name")
        if name_node is None:
            for child in node.named_children:
                if child.type == "variable_declarator":
                    name_node = child.child_by_field_name("name")
        name = _text(name_node) if name_node is not None else "anonymous"
        while stack and stack[-1][0] <= node.start_byte:
            stack.pop()
        parent = stack[-1][1] if stack else None
        if parent is not None and parent.kind in ("class", "interface") and kind == "function":
            kind = "method"
        if language == "go" and kind == "method":
            receiver = node.child_by_field_name("receiver")
            owner = _text(receiver).split()[-1].strip("*()") if receiver is not None else ""
            qualname = f"{owner}.{name}" if owner else name
        else:
            qualname = f"{parent.qualname}.{name}" if parent is not None else name
        definition = Definition(
            kind=kind,
            name=name,
            qualname=qualname,
            start_line=node.start_point[0] + 1,
            end_line=node.end_point[0] + 1,
            start_byte=node.start_byte,
            end_byte=node.end_byte,
            parent=parent.qualname if parent is not None else None,
            docstring=_python_docstring(node) if language == "python" else "",
        )
        facts.definitions.append(definition)
        stack.append((node.end_byte, definition))


def _python_imports(facts: FileFacts, captures: dict[str, list[Node]]) -> None:
    for node in captures.get("import.module", ()):
        facts.imports.append(Import(specifier=_text(node)))
    for statement in captures.get("from", ()):
        module = statement.child_by_field_name("module_name")
        names = tuple(
            _text(child.child_by_field_name("name") if child.type == "aliased_import" else child)
            for child in statement.children_by_field_name("name")
        )
        if any(child.type == "wildcard_import" for child in statement.named_children):
            names = ("*",)
        facts.imports.append(Import(specifier=_text(module).replace(" ", ""), names=names))
    values = captures.get("all.value", ())
    for target, value in zip(captures.get("all.name", ()), values, strict=False):
        if _text(target) == "__all__":
            facts.exports += [
                _strip_quotes(_text(item)) for item in value.named_children if item.type == "string"
            ]
    if not facts.exports:
        facts.exports = [d.name for d in facts.definitions if d.parent is None and not d.name.startswith("_")]


def _script_imports(facts: FileFacts, captures: dict[str, list[Node]]) -> None:
    for node in captures.get("import.source", ()):
        facts.imports.append(Import(specifier=_text(node)))
    for node in captures.get("reexport.source", ()):
        facts.imports.append(Import(specifier=_text(node), reexport=True))
    functions = captures.get("require.fn", ())
    for fn, source in zip(functions, captures.get("require.source", ()), strict=False):
        if _text(fn) == "require":
            facts.imports.append(Import(specifier=_text(source)))
    facts.exports = list(dict.fromkeys(_text(n) for n in captures.get("export.name", ())))


def _go_imports(facts: FileFacts, captures: dict[str, list[Node]]) -> None:
    for node in captures.get("import.source", ()):
        facts.imports.append(Import(specifier=_strip_quotes(_text(node))))
    facts.exports = [d.name for d in facts.definitions if d.name[:1].isupper()]


def _rust_imports(facts: FileFacts, captures: dict[str, list[Node]]) -> None:
    for node in captures.get("mod.name", ()):
        facts.imports.append(Import(specifier=_text(node), kind="mod"))
    for node in captures.get("use.path", ()):
        facts.imports.append(Import(specifier=_text(node).replace(" ", ""), kind="use"))
    facts.exports = [d.name for d in facts.definitions if d.parent is None]


def _java_imports(facts: FileFacts, captures: dict[str, list[Node]]) -> None:
    for statement in captures.get("import", ()):
        text = _text(statement)
        name = text.removeprefix("import").strip().rstrip(";").strip()
        facts.imports.append(Import(specifier=name.removeprefix("static ").strip()))
    for node in captures.get("package.name", ()):
        facts.package = _text(node)
    facts.exports = [d.name for d in facts.definitions if d.parent is None]


IMPORTERS = {
    "python": _python_imports,
    "typescript": _script_imports,
    "tsx": _script_imports,
    "javascript": _script_imports,
    "go": _go_imports,
    "rust": _rust_imports,
    "java": _java_imports,
}


def chunks(facts: FileFacts, source: bytes) -> list[Chunk]:
    """Split at function and class boundaries (never inside a body): top-level definitions,
    and the methods of classes too long for one chunk; a file without any is one module chunk."""
    out: list[Chunk] = []
    long_classes = {
        d.qualname
        for d in facts.definitions
        if d.kind in ("class", "interface") and d.end_line - d.start_line + 1 > MAX_CHUNK_LINES
    }
    for d in facts.definitions:
        top = d.parent is None and d.qualname not in long_classes
        method_of_long = d.parent in long_classes
        if not (top or method_of_long):
            continue
        chunk_type = "class" if d.kind in ("class", "interface") else "function"
        text = source[d.start_byte : d.end_byte].decode("utf-8", "replace")
        out.append(Chunk(facts.path, facts.language, chunk_type, d.qualname, d.start_line, d.end_line, text))
    if not out:
        text = source.decode("utf-8", "replace")
        out.append(Chunk(facts.path, facts.language, "module", facts.path, 1, facts.lines, text[:20000]))
    return out
