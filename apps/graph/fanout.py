"""Extracting a repository's files on every core. Pure: no Django.

tree-sitter holds the GIL while it parses, so threads cannot share the work: `extract_all` forks
child processes that each extract a share of the files and send the results back through a pipe
in batches, while the calling process goes on with what only it can do (writing to its database
connection, which the children never touch). `prepare(facts, source)` runs where the file was
parsed — the per-file work that should be spread too; `consume(path, facts, prepared)` runs in
the caller, in the order results arrive. Forking (not spawning) keeps start-up to milliseconds:
the children inherit the loaded grammars and the sources. Where fork is unavailable, for a
handful of files, or with one process, everything runs inline in the same order as files.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import traceback
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection, Pipe, wait
from typing import Any

from apps.graph.extract import FileFacts, extract

logger = logging.getLogger(__name__)

BATCH_FILES = 16  # a batch's results go back in one message: few messages, early arrivals
MIN_FILES_PER_PROCESS = 32  # below this a fork costs more than it saves

Prepare = Callable[[FileFacts, bytes], Any]
Consume = Callable[[str, FileFacts, Any], None]
Result = tuple[str, FileFacts | None, Any]  # (path, facts or None if it failed, prepared or traceback)


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def extract_all(
    sources: dict[str, bytes],
    *,
    prepare: Prepare = lambda facts, source: None,
    consume: Consume = lambda path, facts, prepared: None,
    processes: int = 1,
) -> dict[str, FileFacts]:
    """Extract every file (a file tree-sitter cannot read is logged and left out) and return the
    facts in the order of `sources`, whatever order the processes finished them in."""
    processes = min(processes, len(sources) // MIN_FILES_PER_PROCESS)
    results = _forked(sources, prepare, processes) if processes > 1 and hasattr(os, "fork") else None
    facts: dict[str, FileFacts] = {}
    for path, found, extra in results or _inline(list(sources), sources, prepare):
        if found is None:
            logger.error("could not parse %s\n%s", path, extra)
            continue
        consume(path, found, extra)
        facts[path] = found
    return {path: facts[path] for path in sources if path in facts}


def _inline(paths: list[str], sources: dict[str, bytes], prepare: Prepare) -> Iterator[Result]:
    for path in paths:
        source = sources[path]
        try:
            facts = extract(path, source)
        except Exception:  # a file tree-sitter cannot read is skipped, not fatal
            yield path, None, traceback.format_exc()
            continue
        yield path, facts, prepare(facts, source)


def _forked(sources: dict[str, bytes], prepare: Prepare, processes: int) -> Iterator[Result]:
    """Results from `processes` children, each given every n-th file (neighbouring files are
    alike in size, so the shares come out even), as their batches arrive."""
    paths = list(sources)
    children: dict[Connection, int] = {}
    try:
        for share in range(processes):
            reader, writer = Pipe(duplex=False)
            pid = os.fork()
            if pid == 0:  # the child: extract its share, send it, and leave without cleanup
                reader.close()
                _child(paths[share::processes], sources, prepare, writer)
            writer.close()
            children[reader] = pid
        yield from _gather(children)
    finally:
        for reader, pid in children.items():
            reader.close()
            _reap(pid, stop=True)


def _child(paths: list[str], sources: dict[str, bytes], prepare: Prepare, out: Connection) -> None:
    """Never returns: `os._exit` skips the parent's atexit handlers and finalizers (its database
    connection, its open files), which belong to the parent. The cyclic garbage collector is
    off: the child inherits the parent's heap copy-on-write, a collection would walk (and so
    copy) every inherited object, and what the child makes dies with it."""
    gc.disable()
    status = 1
    try:
        batch: list[Result] = []
        for result in _inline(paths, sources, prepare):
            batch.append(result)
            if len(batch) >= BATCH_FILES:
                out.send(batch)
                batch = []
        out.send(batch)
        out.close()
        status = 0
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(status)


def _gather(children: dict[Connection, int]) -> Iterator[Result]:
    open_readers = list(children)
    while open_readers:
        for reader in wait(open_readers):
            try:
                batch = reader.recv()
            except EOFError:
                open_readers.remove(reader)
                if _reap(children[reader]) != 0:
                    raise RuntimeError("a parsing process failed") from None
                continue
            yield from batch


def _reap(pid: int, *, stop: bool = False) -> int | None:
    """Wait for a child and return its exit status; with `stop`, a child still running (the
    caller gave up early) is killed first. None for a child already reaped."""
    try:
        if stop and os.waitpid(pid, os.WNOHANG) == (0, 0):
            os.kill(pid, signal.SIGKILL)
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    except ChildProcessError:
        return None
