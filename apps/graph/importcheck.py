"""An independent check of Python import edges: the standard library's `ast` reads the imports
and `importlib` finds the modules they load (the interpreter's own resolution), compared with
the graph's tree-sitter edges as precision and recall."""

from __future__ import annotations

import ast
import importlib.util
import os
from dataclasses import dataclass


@dataclass
class ImportCheck:
    precision: float
    recall: float
    graph_edges: int
    reference_edges: int
    files: int
    files_excluded: int


def reference_edges(
    root: str, package: str, *, under: tuple[str, ...] = ()
) -> tuple[set[tuple[str, str]], set[str], int]:
    """(file, imported file) pairs inside `package` under `root`, per ast + importlib.util.find_spec;
    files with an import the interpreter cannot resolve (missing optional C libraries) are
    excluded and counted."""
    base_dir = os.path.join(root, package)
    edges: set[tuple[str, str]] = set()
    excluded: set[str] = set()
    files = 0
    for directory, _subdirs, names in os.walk(base_dir):
        for name in names:
            if not name.endswith(".py"):
                continue
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            if under and not rel.startswith(tuple(u.rstrip("/") + "/" for u in under)):
                continue
            files += 1
            module = rel[:-3].replace("/", ".").removesuffix(".__init__")
            package_name = module if name == "__init__.py" else module.rsplit(".", 1)[0]
            try:
                with open(path, "rb") as handle:
                    tree = ast.parse(handle.read())
                targets = _targets(tree, package_name)
            except Exception:
                excluded.add(rel)
                continue
            for target in targets:
                origin = target and os.path.relpath(target, root).replace(os.sep, "/")
                if origin and origin.startswith(package + "/") and origin != rel:
                    edges.add((rel, origin))
    return edges, excluded, files


def _origin(name: str) -> str | None:
    spec = importlib.util.find_spec(name)
    return spec.origin if spec is not None and spec.origin not in (None, "built-in", "frozen") else None


def _exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def _targets(tree: ast.AST, package: str) -> list[str | None]:
    found: list[str | None] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                deepest = next(
                    (".".join(parts[:i]) for i in range(len(parts), 0, -1) if _exists(".".join(parts[:i]))),
                    None,
                )
                found.append(_origin(deepest) if deepest else None)
        elif isinstance(node, ast.ImportFrom):
            base = (
                importlib.util.resolve_name("." * node.level + (node.module or ""), package)
                if node.level
                else node.module
            )
            if not base:
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if alias.name != "*" and _exists(sub):
                    found.append(_origin(sub))
                elif _exists(base):
                    found.append(_origin(base))
    return found


def compare(
    graph_edges: set[tuple[str, str]], reference: set[tuple[str, str]], excluded: set[str], files: int
) -> ImportCheck:
    mine = {(s, t) for s, t in graph_edges if s not in excluded}
    hits = len(mine & reference)
    return ImportCheck(
        precision=round(hits / len(mine), 4) if mine else 0.0,
        recall=round(hits / len(reference), 4) if reference else 0.0,
        graph_edges=len(mine),
        reference_edges=len(reference),
        files=files,
        files_excluded=len(excluded),
    )
