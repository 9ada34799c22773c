"""Parsing in forked processes gives what parsing in one process gives (no database here)."""

from __future__ import annotations

import os

import pytest

from apps.graph import fanout
from apps.graph.extract import chunks, extract


def sources(count: int) -> dict[str, bytes]:
    return {
        f"pkg/m{i}.py": (
            f'"""Module {i}."""\nfrom pkg import m{(i + 1) % count}\n\n\nclass C{i}(m{(i + 1) % count}.C):\n'
            f"    def run(self):\n        return helper{i}()\n\n\ndef helper{i}():\n    return {i}\n"
        ).encode()
        for i in range(count)
    }


@pytest.fixture
def children(monkeypatch):
    """The ids of the processes forked, to check that every one of them was waited for."""
    forked: list[int] = []
    real_fork = os.fork

    def fork() -> int:
        pid = real_fork()
        if pid:
            forked.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", fork)
    return forked


def assert_reaped(pids: list[int]) -> None:
    for pid in pids:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def test_forked_extraction_matches_inline_and_keeps_the_order_of_the_sources(children):
    files = sources(3 * fanout.MIN_FILES_PER_PROCESS)
    consumed: list[str] = []

    def consume(path, facts, prepared):
        assert prepared == [c.name for c in chunks(facts, files[path])]
        consumed.append(path)

    forked = fanout.extract_all(
        files,
        prepare=lambda facts, source: [c.name for c in chunks(facts, source)],
        consume=consume,
        processes=3,
    )
    assert len(children) == 3
    assert_reaped(children)
    assert forked == fanout.extract_all(files) == {path: extract(path, data) for path, data in files.items()}
    assert list(forked) == list(files) and sorted(consumed) == sorted(files)


def test_a_few_files_are_parsed_inline(children):
    files = sources(fanout.MIN_FILES_PER_PROCESS)
    assert list(fanout.extract_all(files, processes=4)) == list(files)
    assert children == []


def test_a_file_that_cannot_be_parsed_in_a_child_is_logged_and_left_out(children, monkeypatch, caplog):
    files = sources(2 * fanout.MIN_FILES_PER_PROCESS)
    real_extract = fanout.extract

    def extract_or_fail(path, source):
        if path == "pkg/m5.py":
            raise ValueError("unreadable")
        return real_extract(path, source)

    monkeypatch.setattr(fanout, "extract", extract_or_fail)
    facts = fanout.extract_all(files, processes=2)
    assert "pkg/m5.py" not in facts and len(facts) == len(files) - 1
    assert "could not parse pkg/m5.py" in caplog.text and "unreadable" in caplog.text
    assert_reaped(children)


def test_a_failure_after_parsing_in_a_child_fails_the_whole_extraction(children):
    files = sources(2 * fanout.MIN_FILES_PER_PROCESS)

    def prepare(facts, source):
        if facts.path == "pkg/m7.py":
            raise RuntimeError("a bug in the per-file work")

    with pytest.raises(RuntimeError, match="a parsing process failed"):
        fanout.extract_all(files, prepare=prepare, processes=2)
    assert_reaped(children)


def test_children_are_stopped_when_the_caller_gives_up(children):
    files = sources(4 * fanout.MIN_FILES_PER_PROCESS)

    def consume(path, facts, prepared):
        raise OSError("the database went away")

    with pytest.raises(OSError, match="went away"):
        fanout.extract_all(files, consume=consume, processes=2)
    assert len(children) == 2
    assert_reaped(children)
