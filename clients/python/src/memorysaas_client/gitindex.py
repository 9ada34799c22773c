"""`memorysaas index`: what of a git working tree to send to the project's code graph.

What the server holds after an index is the working tree as it was: the commit then checked out,
with the edits not yet committed (and untracked files) on top — the "overlay", remembered as a
fingerprint per path. The next incremental index sends what differs from that: the files `git diff
--name-status -M <that commit>` finds against the working tree now, less those whose fingerprint
has not changed since, plus the overlay's files that went back to the commit's version; as the
graph API's JSON batches (`files` with their content, `deleted`, `renamed` old → new). A full index
sends the working tree's files as one .tar.gz. Only text files up to the server's size limit
travel: the graph parses source code, nothing else.
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

MAX_FILE_BYTES = 1_000_000  # the graph API's limit for one file's content
MAX_BATCH_FILES = 500  # and for the files of one batch
MAX_BATCH_BYTES = 3_000_000  # well under the API's request body limit (5 MiB by default)


class GitError(RuntimeError):
    pass


def _git(root: Path, *args: str) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
    except FileNotFoundError:
        raise GitError("git is not installed") from None
    except subprocess.CalledProcessError as error:
        raise GitError(error.stderr.strip() or f"git {' '.join(args)} failed") from None
    return done.stdout


def repository_root(path: Path) -> Path:
    return Path(_git(path, "rev-parse", "--show-toplevel").strip())


def head_commit(root: Path) -> str:
    return _git(root, "rev-parse", "HEAD").strip()


def knows_commit(root: Path, commit: str) -> bool:
    try:
        _git(root, "cat-file", "-e", f"{commit}^{{commit}}")
    except GitError:
        return False
    return True


def files_changed_since(root: Path, commit: str) -> list[str]:
    """What `git diff --name-only <commit>..HEAD` prints: the committed changes since `commit`."""
    return [f for f in _git(root, "diff", "--name-only", "-z", f"{commit}..HEAD").split("\0") if f]


@dataclass
class Changes:
    changed: list[str] = field(default_factory=list)  # added or modified: their content is sent
    deleted: list[str] = field(default_factory=list)
    renamed: dict[str, str] = field(default_factory=dict)  # old → new (the new one is in `changed`)

    def __bool__(self) -> bool:
        return bool(self.changed or self.deleted or self.renamed)


def changes_since(root: Path, commit: str) -> Changes:
    found = Changes()
    fields = _git(root, "diff", "--name-status", "-M", "-z", commit).split("\0")
    i = 0
    while i < len(fields) and fields[i]:
        status = fields[i]
        if status.startswith(("R", "C")):
            old, new = fields[i + 1], fields[i + 2]
            if status.startswith("R"):
                found.renamed[old] = new
            found.changed.append(new)
            i += 3
            continue
        path = fields[i + 1]
        (found.deleted if status == "D" else found.changed).append(path)
        i += 2
    found.changed += [
        p for p in _git(root, "ls-files", "--others", "--exclude-standard", "-z").split("\0") if p
    ]
    return found


GONE = "-"  # the fingerprint of a path with no file


def fingerprint(root: Path, path: str) -> str:
    try:
        return hashlib.sha1((root / path).read_bytes(), usedforsecurity=False).hexdigest()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return GONE


def overlay(root: Path) -> dict[str, str]:
    """The working tree's differences from HEAD: path → fingerprint (GONE for a deletion)."""
    changes = changes_since(root, "HEAD")
    paths = [*changes.changed, *changes.deleted, *changes.renamed]
    return {path: fingerprint(root, path) for path in paths}


def pending_changes(root: Path, commit: str, sent: dict[str, str]) -> Changes:
    """What differs between the working tree and what the server holds: `commit` with the
    overlay `sent` on top."""
    changes = changes_since(root, commit)
    seen = {*changes.changed, *changes.deleted, *changes.renamed}
    same = {path for path in seen if path in sent and sent[path] == fingerprint(root, path)}
    pending = Changes(
        changed=[p for p in changes.changed if p not in same],
        deleted=[p for p in changes.deleted if p not in same],
        renamed={old: new for old, new in changes.renamed.items() if new not in same and old not in same},
    )
    for path in sent:  # back to the commit's version (or gone, if the commit never had it)
        if path not in seen:
            (pending.changed if fingerprint(root, path) != GONE else pending.deleted).append(path)
    return pending


def working_tree_files(root: Path) -> list[str]:
    """The files git tracks or would track (ignored ones left out) that exist now."""
    listed = _git(root, "ls-files", "--cached", "--others", "--exclude-standard", "-z").split("\0")
    return sorted({p for p in listed if p and (root / p).is_file()})


def _text(root: Path, path: str) -> str | None:
    """The file's text, or None for a binary, unreadable, missing or oversized one."""
    try:
        data = (root / path).read_bytes()
    except OSError:
        return None
    if len(data) > MAX_FILE_BYTES or b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def batches(root: Path, changes: Changes) -> Iterator[dict]:
    """The graph API's batches for `changes`: each under its file count and byte size, a rename
    in the batch that carries its new content."""
    renamed_to = {new: old for old, new in changes.renamed.items()}
    batch: dict = {"files": [], "deleted": [], "renamed": {}}
    size = 0

    def full(extra: int) -> bool:
        count = len(batch["files"]) + len(batch["deleted"])
        return count >= MAX_BATCH_FILES or (count > 0 and size + extra > MAX_BATCH_BYTES)

    for path in dict.fromkeys(changes.changed):
        content = _text(root, path)
        if content is None:
            if path in renamed_to:  # a renamed binary: what was indexed under its old name goes
                changes.deleted.append(renamed_to[path])
            continue
        weight = len(content.encode("utf-8")) + len(path) + 32
        if full(weight):
            yield batch
            batch, size = {"files": [], "deleted": [], "renamed": {}}, 0
        batch["files"].append({"path": path, "content": content})
        if path in renamed_to:
            batch["renamed"][renamed_to[path]] = path
        size += weight
    for path in changes.deleted:
        if full(len(path) + 8):
            yield batch
            batch, size = {"files": [], "deleted": [], "renamed": {}}, 0
        batch["deleted"].append(path)
        size += len(path) + 8
    if batch["files"] or batch["deleted"] or batch["renamed"]:
        yield batch


def archive(root: Path) -> tuple[bytes, int]:
    """The working tree's text files as a .tar.gz, and how many it holds."""
    buffer = io.BytesIO()
    count = 0
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in working_tree_files(root):
            content = _text(root, path)
            if content is None:
                continue
            data = content.encode("utf-8")
            info = tarfile.TarInfo(path)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
            count += 1
    return buffer.getvalue(), count
