"""Staleness by git history: the commits memories carry, and the files a client reports changed
since one of them (`git diff --name-only <commit>..HEAD`, run where the repository is)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from ninja import Field, Path, Router
from pydantic import field_validator

from apps.memories import selectors, services
from apps.memories.validation import clean_paths
from apps.tenants.roles import Perm
from apps.tenants.selectors import project_get
from memorysaas.kernel.errors import NotFound
from memorysaas.kernel.openapi import SPACE_CHARS
from memorysaas.kernel.schemas import InputSchema, OutputSchema

router = Router(tags=["memories"])

# As git prints one: 7 to 40 hex digits, 64 in a SHA-256 repository.
COMMIT_SHA = r"^[0-9a-fA-F]{7,64}$"
MAX_CHANGED_FILES = 5000


class CommitOut(OutputSchema):
    commit: str
    memories: int
    latest: datetime


class CommitPage(OutputSchema):
    items: list[CommitOut]


_SPACE = f"[{SPACE_CHARS}]"
# A path inside the repository, as the schema states it too: not blank, not absolute (`/`, `~`,
# a backslash), no `..` part (either slash separates). Whitespace around it is stripped first.
REPOSITORY_PATH = (
    rf"^{_SPACE}*(?![/~\\])(?!(?:[^\u0000]*[/\\])?\.\.(?:[/\\]|{_SPACE}*$))"
    rf"[^\u0000]*[^\u0000{SPACE_CHARS}][^\u0000]*$"
)
_REPOSITORY_PATH = re.compile(REPOSITORY_PATH)


MAX_PATH = 500
_PATH_SCHEMA = {"pattern": REPOSITORY_PATH, "maxLength": MAX_PATH}


class ChangedFilesIn(InputSchema):
    files: list[Annotated[str, Field(json_schema_extra=_PATH_SCHEMA)]] = Field(
        max_length=MAX_CHANGED_FILES,
        description="Repository-relative paths, as `git diff --name-only <commit>..HEAD` prints them.",
    )

    @field_validator("files", mode="before")
    @classmethod
    def bounded(cls, files: Any) -> Any:
        """Each path's length as sent, whitespace included (as the schema counts it)."""
        if isinstance(files, list) and any(isinstance(f, str) and len(f) > MAX_PATH for f in files):
            raise ValueError(f"each path is at most {MAX_PATH} characters")
        return files

    @field_validator("files")
    @classmethod
    def repository_paths(cls, files: list[str]) -> list[str]:
        outside = [f for f in files if not _REPOSITORY_PATH.match(f)]
        if outside:
            raise ValueError(f"not repository-relative paths: {', '.join(repr(f) for f in outside[:5])}")
        return clean_paths(files)


class ChangedFilesOut(OutputSchema):
    commit: str
    files: int
    stale: list[UUID] = Field(
        description="Memories newly marked stale: they carry the commit and name a changed file."
    )


@router.get("/projects/{project_id}/commits", response=CommitPage)
def commits_list(request, project_id: UUID):
    """The commits the project's live memories were learned at (newest first, at most 100): diff
    each against HEAD and report the changed files."""
    project = project_get(principal=request.auth, project_id=project_id, permission=Perm.MEMORIES_READ)
    return {"items": selectors.commits_carried(project=project)}


@router.post("/projects/{project_id}/commits/{commit}/changed-files", response=ChangedFilesOut)
def commits_changed_files(
    request,
    project_id: UUID,
    payload: ChangedFilesIn,
    commit: str = Path(
        ..., pattern=COMMIT_SHA, description="The commit, as git prints it (7 to 64 hex digits)."
    ),
):
    """Files changed since `commit`: the memories that carry it and name one of them become stale
    (never injected; flagged in search) and lose confidence in proportion to how many of their
    files changed. Reporting the same diff again changes nothing. 404 when no memory of the
    project carries the commit."""
    project = project_get(principal=request.auth, project_id=project_id, permission=Perm.OBSERVER_WRITE)
    commit = commit.lower()
    if not selectors.memories_of_project(project=project).filter(commit_sha__startswith=commit[:7]).exists():
        raise NotFound("No memory of this project carries that commit.", code="unknown_commit")
    marked = services.memories_changed_since_commit(project=project, commit=commit, files=payload.files)
    return {"commit": commit, "files": len(payload.files), "stale": [m.id for m in marked]}
