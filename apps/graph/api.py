"""Knowledge-graph endpoints: index a repository, read its status, impact, dependencies, nodes
and code chunks."""

from __future__ import annotations

import os
import uuid
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import transaction
from django.http.multipartparser import MultiPartParserError
from ninja import Field, Query, Router, Status
from pydantic import ConfigDict, ValidationError, field_validator, model_validator

from apps.graph import selectors, services
from apps.graph.archive import extract_archive
from apps.graph.extract import language_of
from apps.graph.models import IndexJob, IndexStatus
from apps.graph.tasks import index_job_task
from apps.tenants.roles import Perm
from apps.tenants.selectors import project_get
from memorysaas.kernel.errors import ApiError, Invalid, NotFound, field_errors
from memorysaas.kernel.openapi import SPACE_CHARS, inline_refs, link, links, openapi_extra, with_schema
from memorysaas.kernel.queue import enqueue
from memorysaas.kernel.schemas import InputSchema, OutputSchema, QuerySchema, parse_json

router = Router(tags=["graph"])
MAX_BATCH_FILES = 500


def _path_pattern() -> str:
    """`_clean_path`'s rule as a pattern: once stripped, not empty and not absolute, no part
    (between / or \\) that is `..` once stripped, no NUL."""
    ws, sep = SPACE_CHARS, r"/\\\u0000"
    # A part holding more than dots and whitespace, or only those and not `..` once stripped.
    part = rf"(?:[^{sep}]*[^{sep}{ws}.][^{sep}]*|[{ws}]*(?:\.(?:[.{ws}]+\.)?)?[{ws}]*)"
    # The first part, from the first character that is not whitespace (not a separator).
    first = rf"(?:[^{sep}{ws}.][^{sep}]*|\.[^{sep}]*[^{sep}{ws}.][^{sep}]*|\.(?:[.{ws}]+\.)?[{ws}]*)"
    return rf"^[{ws}]*{first}(?:[/\\]{part})*$"


PATH_PATTERN = _path_pattern()


def _clean_path(value: str) -> str:
    path = value.replace("\\", "/").strip()
    if not path or path.startswith("/") or any(p.strip() == ".." for p in path.split("/")) or len(path) > 500:
        raise ValueError("paths are relative to the repository root, without '..'")
    while path.startswith("./"):  # (not lstrip: `.github/` keeps its dot)
        path = path[2:]
    return path


class FileIn(InputSchema):
    path: str = Field(max_length=500, json_schema_extra={"pattern": PATH_PATTERN})
    content: str = Field(max_length=services.MAX_FILE_BYTES)

    _path = field_validator("path")(classmethod(lambda cls, v: _clean_path(v)))


_A_PATH = {"type": "string", "maxLength": 500, "pattern": PATH_PATTERN}


class BatchIn(InputSchema):
    # (Something to do: files, deleted or renamed.)
    model_config = ConfigDict(
        json_schema_extra=with_schema(
            {
                "anyOf": [
                    {"required": ["files"], "properties": {"files": {"minItems": 1}}},
                    {"required": ["deleted"], "properties": {"deleted": {"minItems": 1}}},
                    {"required": ["renamed"], "properties": {"renamed": {"minProperties": 1}}},
                ]
            }
        )
    )

    files: list[FileIn] = Field(default_factory=list, max_length=MAX_BATCH_FILES)
    deleted: list[str] = Field(
        default_factory=list, max_length=MAX_BATCH_FILES, json_schema_extra={"items": _A_PATH}
    )
    renamed: dict[str, str] = Field(
        default_factory=dict,
        description="old path → new path; a renamed code file's content is in `files` under its new path",
        json_schema_extra={"propertyNames": _A_PATH, "additionalProperties": _A_PATH},
    )

    @field_validator("deleted")
    @classmethod
    def _deleted(cls, values: list[str]) -> list[str]:
        return [_clean_path(v) for v in values]

    @field_validator("renamed")
    @classmethod
    def _renamed(cls, values: dict[str, str]) -> dict[str, str]:
        return {_clean_path(k): _clean_path(v) for k, v in values.items()}

    @model_validator(mode="after")
    def _renamed_with_content(self) -> BatchIn:
        """A renamed code file is indexed from the content sent for its new path: without it the
        old path's nodes would go and nothing would take their place."""
        sent = {f.path for f in self.files}
        missing = sorted(new for new in self.renamed.values() if new not in sent and language_of(new))
        if missing:
            raise ValueError(
                f"renamed files need their content in `files` under the new path: {', '.join(missing)}"
            )
        return self


class JobOut(OutputSchema):
    id: int | None = None
    kind: str | None = None
    status: str
    progress: int
    files: int
    nodes: int
    edges: int
    skipped: int
    skipped_detail: dict = {}
    error: str | None = None


def _job_out(job: IndexJob | None) -> dict[str, Any]:
    if job is None:
        return {"status": IndexStatus.IDLE, "progress": 0, "files": 0, "nodes": 0, "edges": 0, "skipped": 0}
    return {
        "id": job.id, "kind": job.kind, "status": job.status, "progress": job.progress, "files": job.files,
        "nodes": job.nodes, "edges": job.edges, "skipped": job.skipped, "skipped_detail": job.skipped_detail,
        "error": job.error or None,
    }  # fmt: skip


_INDEX_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "archive": {
                            "type": "string",
                            "format": "binary",
                            "description": "The repository as a .tar.gz (or .tgz, .tar) or .zip archive.",
                        }
                    },
                    "required": ["archive"],
                },
                "encoding": {
                    "archive": {"contentType": "application/gzip, application/zip, application/x-tar"}
                },
            },
            "application/json": {"schema": inline_refs(BatchIn.model_json_schema())},
        },
    }
}


@router.post(
    "/projects/{project_id}/graph/index",
    response={202: JobOut},
    openapi_extra=openapi_extra(
        _INDEX_BODY,
        links(
            202,
            GetJob=link(
                "GET",
                "/projects/{project_id}/graph/index/{job_id}",
                project_id="$request.path.project_id",
                job_id="$response.body#/id",
            ),
        ),
    ),
)
def index(request, project_id: UUID):
    """Index the repository: a `.tar.gz`/`.zip` as multipart field `archive` (replaces the graph),
    or a JSON batch `{"files": [{"path", "content"}], "deleted": [...], "renamed": {old: new}}`
    (incremental; the files' edges are stale from now until the task rebuilds them)."""
    project = project_get(principal=request.auth, project_id=project_id, permission=Perm.GRAPH_WRITE)
    content_type = request.content_type or ""
    if content_type.startswith("multipart/form-data"):
        job = _archive_job(request, project)
    elif content_type == "application/json":
        job = _batch_job(request, project)
    else:
        raise ApiError(
            415,
            "Send a multipart archive or a JSON batch.",
            details={"expected": ["multipart/form-data", "application/json"]},
        )
    enqueue(index_job_task, job.id)
    return Status(202, _job_out(job))


def _archive_job(request, project) -> IndexJob:
    try:
        upload = request.FILES.get("archive")
    except MultiPartParserError as exc:
        raise ApiError(
            400, f"The multipart body could not be read: {exc}", code="malformed_multipart"
        ) from None
    if upload is None:
        raise Invalid("Attach the repository as the multipart field 'archive'.", details={"field": "archive"})
    dest = os.path.join(settings.GRAPH_UPLOAD_DIR, f"{project.id}-{uuid.uuid4().hex}")
    try:
        skipped = extract_archive(upload, upload.name or "", dest)
    except Exception:
        import shutil

        shutil.rmtree(dest, ignore_errors=True)
        raise
    return IndexJob.objects.create(
        project=project, kind="full", source_dir=dest, skipped=sum(skipped.values()), skipped_detail=skipped
    )


def _batch_job(request, project) -> IndexJob:
    try:
        body = BatchIn.model_validate(parse_json(request.body or b"null"))
    except ValidationError as exc:
        raise Invalid("The batch is not valid.", details=field_errors(exc.errors())) from None
    if not (body.files or body.deleted or body.renamed):
        raise Invalid("The batch is empty: send files, deleted or renamed.")
    with transaction.atomic():
        services.mark_stale(project, [f.path for f in body.files] + body.deleted + list(body.renamed))
        batch = {
            "files": [f.model_dump() for f in body.files],
            "deleted": body.deleted,
            "renamed": body.renamed,
        }
        return IndexJob.objects.create(project=project, kind="incremental", batch=batch)


@router.get("/projects/{project_id}/graph/index", response=JobOut)
def index_status(request, project_id: UUID):
    """The latest index job: idle (never indexed), queued, running (with progress), done, failed."""
    project = project_get(principal=request.auth, project_id=project_id, permission=Perm.MEMORIES_READ)
    return _job_out(IndexJob.objects.filter(project=project).order_by("-created_at", "-id").first())


@router.get("/projects/{project_id}/graph/index/{job_id}", response=JobOut)
def index_job(request, project_id: UUID, job_id: int):
    """One index job, by the id its POST answered with: a client polls its own job, whatever was
    submitted after it."""
    project = project_get(principal=request.auth, project_id=project_id, permission=Perm.MEMORIES_READ)
    job = IndexJob.objects.filter(project=project, id=job_id).first()
    if job is None:
        raise NotFound("No such index job in this project.")
    return _job_out(job)


class ImpactQuery(QuerySchema):
    target: str = Field(min_length=1, max_length=800, description="`path` or `path:Symbol`")
    depth: int = Field(3, ge=1, le=selectors.MAX_DEPTH)


@router.get("/projects/{project_id}/graph/impact")
def impact(request, project_id: UUID, query: Query[ImpactQuery]):
    """What may break if the target changes: direct and transitive dependents (depth, weight,
    edge types), tests among them, and the memories linked to it."""
    project = project_get(principal=request.auth, project_id=project_id, permission=Perm.MEMORIES_READ)
    return selectors.impact(project=project, target=query.target, depth=query.depth)


class DependenciesQuery(QuerySchema):
    file: str = Field(min_length=1, max_length=500)
    depth: int = Field(1, ge=1, le=selectors.MAX_DEPTH)


@router.get("/projects/{project_id}/graph/dependencies")
def dependencies(request, project_id: UUID, query: Query[DependenciesQuery]):
    """`{"file": …, "dependencies": [{"file", "depth", "edge_types"}]}`."""
    project = project_get(principal=request.auth, project_id=project_id, permission=Perm.MEMORIES_READ)
    return selectors.dependencies(project=project, file=query.file, depth=query.depth)


class NodesQuery(QuerySchema):
    q: str = Field(min_length=1, max_length=300)
    kind: str | None = Field(None, pattern="^(file|directory|module|class|function|method|interface)$")
    limit: int = Field(20, ge=1, le=100)


class NodeOut(OutputSchema):
    key: str
    kind: str
    path: str
    name: str
    start_line: int | None
    end_line: int | None
    stale: bool


@router.get("/projects/{project_id}/graph/nodes", response=list[NodeOut])
def nodes(request, project_id: UUID, query: Query[NodesQuery]):
    """Find files and symbols by name (exact, then prefix, then substring)."""
    project = project_get(principal=request.auth, project_id=project_id, permission=Perm.MEMORIES_READ)
    found = selectors.search_nodes(project=project, name=query.q, kind=query.kind, limit=query.limit)
    return [
        {
            "key": n.key,
            "kind": n.kind,
            "path": n.path,
            "name": n.name,
            "start_line": n.start_line,
            "end_line": n.end_line,
            "stale": n.stale_at is not None,
        }  # fmt: skip
        for n in found
    ]


class ChunksQuery(QuerySchema):
    q: str = Field(min_length=1, max_length=500)
    limit: int = Field(5, ge=1, le=50)


@router.get("/projects/{project_id}/graph/chunks")
def chunks(request, project_id: UUID, query: Query[ChunksQuery]):
    """Functions and classes matching the query (code-aware), with their contextual prefix."""
    project = project_get(principal=request.auth, project_id=project_id, permission=Perm.MEMORIES_READ)
    return selectors.search_chunks(project, query.q, query.limit)
