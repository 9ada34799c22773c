"""Import specifiers → files of the repository, per language. Pure: no Django.

Python: absolute and relative imports, packages and `__init__`, `from pkg import submodule`,
modules under the repository root or `src/`. TypeScript/JavaScript: relative paths with or
without extension, index files, tsconfig `baseUrl` and `paths`. Go: packages of the module in
go.mod (every non-test file of the package directory). Rust: `mod x;` and `use crate::/super::/
self::` paths. Java: fully qualified classes and package wildcards. What resolves outside the
repository (the standard library, installed packages) yields nothing.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections import defaultdict
from collections.abc import Iterable

from apps.graph.extract import FileFacts, Import

PY_ROOTS = ("", "src/", "lib/")
SCRIPT_EXTENSIONS = (".ts", ".tsx", ".d.ts", ".js", ".jsx", ".mjs", ".cjs")
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")


def parse_tsconfig(text: str) -> dict:
    """tsconfig.json is JSON with comments and trailing commas."""
    cleaned = _TRAILING_COMMA.sub(r"\1", _COMMENTS.sub("", text))
    try:
        return json.loads(cleaned)
    except ValueError:
        return {}


def python_module(path: str) -> str | None:
    """`src/pkg/mod.py` → `pkg.mod`, `pkg/__init__.py` → `pkg` (the first root that fits)."""
    if not path.endswith((".py", ".pyi")):
        return None
    for root in reversed(PY_ROOTS):
        if root and path.startswith(root):
            path = path[len(root) :]
            break
    stem = path.rsplit(".", 1)[0]
    parts = stem.split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) if parts and all(p.isidentifier() for p in parts) else None


class Resolver:
    def __init__(
        self, files: Iterable[str], *, tsconfigs: dict[str, str] | None = None, go_mod: str | None = None
    ) -> None:
        self.files = set(files)
        self.modules: dict[str, str] = {}
        self.dir_files: dict[str, list[str]] = defaultdict(list)
        self.java_classes: dict[str, list[str]] = defaultdict(list)
        for path in sorted(self.files):
            self.dir_files[posixpath.dirname(path)].append(path)
            module = python_module(path)
            if module is not None and (module not in self.modules or path.endswith(".py")):
                self.modules[module] = path
            if path.endswith(".java"):
                self.java_classes[posixpath.basename(path)[:-5]].append(path)
        self.ts_paths: list[tuple[str, list[str], str]] = []  # (pattern prefix, targets, base dir)
        self.ts_base_urls: list[str] = []
        for config_path, text in (tsconfigs or {}).items():
            options = parse_tsconfig(text).get("compilerOptions", {})
            base = posixpath.normpath(
                posixpath.join(posixpath.dirname(config_path), options.get("baseUrl", "."))
            )
            base = "" if base == "." else base
            if "baseUrl" in options:
                self.ts_base_urls.append(base)
            for pattern, targets in (options.get("paths") or {}).items():
                self.ts_paths.append((pattern, list(targets), base))
        self.go_module = _go_module_path(go_mod) if go_mod else None

    def resolve(self, facts: FileFacts) -> list[tuple[str, Import]]:
        """(target file, the import) for each import that lands in the repository."""
        family = "typescript" if facts.language in ("tsx", "javascript") else facts.language
        method = getattr(self, f"_{family}")
        found: list[tuple[str, Import]] = []
        for item in facts.imports:
            for target in method(facts, item):
                if target != facts.path:
                    found.append((target, item))
        return found

    # -------------------------------------------------------------------- python

    def _python(self, facts: FileFacts, item: Import) -> list[str]:
        spec = item.specifier
        if spec.startswith("."):
            base = self._python_relative_base(facts.path, spec)
            if base is None:
                return []
        else:
            base = spec
        if not item.names:  # `import a.b.c` binds a, loads a.b.c: the deepest module that exists
            return [self.modules[m]] if (m := self._deepest(base)) else []
        targets = []
        for name in item.names:
            sub = f"{base}.{name}" if base else name
            if name != "*" and sub in self.modules:
                targets.append(self.modules[sub])
            elif base in self.modules:
                targets.append(self.modules[base])
        return list(dict.fromkeys(targets))

    def _deepest(self, dotted: str) -> str | None:
        parts = dotted.split(".")
        for end in range(len(parts), 0, -1):
            candidate = ".".join(parts[:end])
            if candidate in self.modules:
                return candidate
        return None

    def _python_relative_base(self, path: str, spec: str) -> str | None:
        level = len(spec) - len(spec.lstrip("."))
        rest = spec[level:]
        module = python_module(path)
        if module is None:
            return None
        package = (
            module.split(".") if path.endswith(("__init__.py", "__init__.pyi")) else module.split(".")[:-1]
        )
        if level - 1 > len(package):
            return None
        package = package[: len(package) - (level - 1)]
        return ".".join([*package, rest] if rest else package)

    # -------------------------------------------------------------------- typescript / javascript

    def _typescript(self, facts: FileFacts, item: Import) -> list[str]:
        spec = item.specifier
        if spec.startswith("."):
            return self._script_file(posixpath.join(posixpath.dirname(facts.path), spec))
        for pattern, targets, base in self.ts_paths:
            prefix, star, suffix = pattern.partition("*")
            if star and spec.startswith(prefix) and spec.endswith(suffix):
                middle = spec[len(prefix) : len(spec) - len(suffix)] if suffix else spec[len(prefix) :]
                for target in targets:
                    found = self._script_file(posixpath.join(base, target.replace("*", middle)))
                    if found:
                        return found
            elif not star and spec == pattern:
                for target in targets:
                    found = self._script_file(posixpath.join(base, target))
                    if found:
                        return found
        for base in self.ts_base_urls:
            found = self._script_file(posixpath.join(base, spec))
            if found:
                return found
        return []

    def _script_file(self, joined: str) -> list[str]:
        path = posixpath.normpath(joined)
        stem, ext = posixpath.splitext(path)
        candidates = [path]
        if ext in (".js", ".jsx", ".mjs", ".cjs"):  # TS sources imported by their emitted name
            candidates += [stem + ".ts", stem + ".tsx"]
        candidates += [path + e for e in SCRIPT_EXTENSIONS]
        candidates += [f"{path}/index{e}" for e in SCRIPT_EXTENSIONS]
        for candidate in candidates:
            if candidate in self.files:
                return [candidate]
        return []

    # -------------------------------------------------------------------- go

    def _go(self, facts: FileFacts, item: Import) -> list[str]:
        if not self.go_module or not (
            item.specifier == self.go_module or item.specifier.startswith(self.go_module + "/")
        ):
            return []
        directory = item.specifier[len(self.go_module) :].lstrip("/")
        return [
            f for f in self.dir_files.get(directory, []) if f.endswith(".go") and not f.endswith("_test.go")
        ]

    # -------------------------------------------------------------------- rust

    def _rust(self, facts: FileFacts, item: Import) -> list[str]:
        here = posixpath.dirname(facts.path)
        name = posixpath.basename(facts.path)
        module_dir = here if name in ("lib.rs", "main.rs", "mod.rs") else posixpath.join(here, name[:-3])
        if item.kind == "mod":
            return self._rust_file(module_dir, [item.specifier])
        spec = item.specifier.split("{", 1)[0].rstrip(":")
        parts = [p for p in spec.split("::") if p]
        if not parts:
            return []
        if parts[0] == "crate":
            base, parts = self._crate_root(facts.path), parts[1:]
        elif parts[0] == "super":
            base, parts = posixpath.dirname(module_dir), parts[1:]
        elif parts[0] == "self":
            base, parts = module_dir, parts[1:]
        else:
            return []
        return self._rust_file(base, parts) if base is not None else []

    def _crate_root(self, path: str) -> str | None:
        directory = posixpath.dirname(path)
        while True:
            if any(posixpath.join(directory, n) in self.files for n in ("lib.rs", "main.rs")):
                return directory
            if not directory:
                return None
            directory = posixpath.dirname(directory)

    def _rust_file(self, base: str, parts: list[str]) -> list[str]:
        for end in range(len(parts), 0, -1):
            stem = posixpath.join(base, *parts[:end])
            for candidate in (stem + ".rs", stem + "/mod.rs"):
                if candidate in self.files:
                    return [candidate]
        return []

    # -------------------------------------------------------------------- java

    def _java(self, facts: FileFacts, item: Import) -> list[str]:
        parts = item.specifier.split(".")
        if parts[-1] == "*":
            suffix = "/".join(parts[:-1])
            return [
                f
                for d, files in self.dir_files.items()
                if d.endswith(suffix)
                for f in files
                if f.endswith(".java")
            ]
        for end in (len(parts), len(parts) - 1):  # a class, or a static member of one
            if end < 1:
                continue
            suffix = "/".join(parts[:end]) + ".java"
            for path in self.java_classes.get(parts[end - 1], []):
                if path == suffix or path.endswith("/" + suffix):
                    return [path]
        return []


def _go_module_path(go_mod: str) -> str | None:
    for line in go_mod.splitlines():
        if line.startswith("module "):
            return line.split()[1].strip()
    return None
