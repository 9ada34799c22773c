"""Failed checks read out of a validation report, for QA-failure memories.

A client may send its failures as structured `checks` (name, error, files, severity); a plain
report is read for the lines the common runners print for a failure: pytest's `FAILED`/`ERROR`
summary, jest's and go's `FAIL`, and the `path:line[:col]: message` of linters and type
checkers (ruff, flake8, mypy, eslint's unix format, tsc's `path(line,col): error`).

Pure code: no Django. A failure whose severity is given as medium or low is not mined: only
what broke the work is worth telling the next agent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_FAILURES = 20
MINED_SEVERITIES = frozenset({"critical", "high", ""})

_PYTEST = re.compile(r"^(?:FAILED|ERROR)\s+(?P<name>\S+?)(?:\s+-\s+(?P<error>.+))?$")
_FAIL_LINE = re.compile(r"^(?:FAIL|---\s*FAIL:)\s+(?P<name>\S+)(?:\s+\(.*\))?$")
_LINT = re.compile(r"^(?P<path>[\w./@+-]+\.\w+):(?P<line>\d+)(?::\d+)?:\s*(?P<error>\S.*)$")
_TSC = re.compile(r"^(?P<path>[\w./@+-]+\.\w+)\((?P<line>\d+),\d+\):\s*(?P<error>\S.*)$")
_NODE_FILE = re.compile(r"^([\w./@+-]+\.\w+)(?:::|$)")
_TRACEBACK_FILE = re.compile(r'File "([^"]+)", line \d+')


@dataclass
class Failure:
    """One failed check: what failed (a test id, `path:line`), its error, the files it names."""

    name: str
    error: str = ""
    files: list[str] = field(default_factory=list)
    severity: str = ""


def _relative(path: str) -> bool:
    return bool(path) and not path.startswith(("/", "~")) and ".." not in path.split("/")


def _files_in(name: str, error: str) -> list[str]:
    found = []
    match = _NODE_FILE.match(name)
    if match and _relative(match.group(1)):
        found.append(match.group(1))
    found += [p for p in _TRACEBACK_FILE.findall(error) if _relative(p)]
    return list(dict.fromkeys(found))[:20]


def _from_line(line: str) -> Failure | None:
    if match := _PYTEST.match(line):
        name, error = match.group("name"), (match.group("error") or "").strip()
        return Failure(name=name, error=error, files=_files_in(name, error))
    if match := _FAIL_LINE.match(line):
        name = match.group("name")
        return Failure(name=name, files=_files_in(name, ""))
    if match := _LINT.match(line) or _TSC.match(line):
        path = match.group("path")
        if not _relative(path):
            return None
        return Failure(name=f"{path}:{match.group('line')}", error=match.group("error").strip(), files=[path])
    return None


def failures_in_report(report: str) -> list[Failure]:
    """The failures a plain report's lines name, each once, in order (at most MAX_FAILURES)."""
    found: dict[tuple[str, str], Failure] = {}
    for raw in report.splitlines():
        failure = _from_line(raw.strip())
        if failure is not None:
            found.setdefault((failure.name, failure.error), failure)
        if len(found) >= MAX_FAILURES:
            break
    return list(found.values())


def mined(failures: list[Failure]) -> list[Failure]:
    """The failures worth a memory: severe enough, and named."""
    return [f for f in failures if f.severity in MINED_SEVERITIES and f.name.strip()][:MAX_FAILURES]
