"""A typed Python SDK over the memorysaas REST API (`/api/v1`).

    from memorysaas_client import Client

    with Client("http://127.0.0.1:8000", "msk_…") as api:
        api.memories.create(project_id, type="gotcha", content="verify_jwt rejects skewed clocks")
        for hit in api.search(project_id, "jwt clock skew").results:
            print(hit.memory.citation, hit.memory.content)

Every call raises `ApiError` for an error answer (its `status`, `code`, `message`, `details`)
and `Unreachable` when the service cannot be reached; retries and timeouts are the transport's
(`memorysaas_client.transport`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any
from uuid import UUID

import httpx

from memorysaas_client.models import (
    Context,
    DeviceCode,
    DeviceToken,
    EventsAccepted,
    IndexJob,
    Me,
    Memory,
    MemoryPage,
    Project,
    SearchResult,
    Session,
    StepInjection,
)
from memorysaas_client.transport import DEFAULT_RETRY, DEFAULT_TIMEOUTS, Http, RetryPolicy, Timeouts

Id = UUID | str
DEVICE_CODE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"


class Memories:
    def __init__(self, http: Http) -> None:
        self.http = http

    def create(
        self,
        project_id: Id,
        *,
        type: str,
        content: str,
        tags: Sequence[str] = (),
        related_files: Sequence[str] = (),
        payload: dict[str, Any] | None = None,
        **fields: Any,
    ) -> Memory:
        body = {"type": type, "content": content, "tags": list(tags), "related_files": list(related_files)}
        if payload:
            body["payload"] = payload
        # (not retried once sent: a second create would store it twice)
        answer = self.http.request(
            "POST", f"projects/{project_id}/memories", json={**body, **fields}, idempotent=False
        )
        return Memory.model_validate(answer)

    def list(
        self, project_id: Id, *, cursor: str | None = None, limit: int = 100, **filters: Any
    ) -> MemoryPage:
        params = {**filters, "cursor": cursor, "limit": limit}
        answer = self.http.request("GET", f"projects/{project_id}/memories", params=params, idempotent=True)
        return MemoryPage.model_validate(answer)

    def iterate(self, project_id: Id, **filters: Any) -> Iterator[Memory]:
        """Every memory the filters select, page after page."""
        cursor = None
        while True:
            page = self.list(project_id, cursor=cursor, **filters)
            yield from page.items
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def get(self, memory_id: Id) -> Memory:
        return Memory.model_validate(self.http.request("GET", f"memories/{memory_id}", idempotent=True))

    def update(self, memory_id: Id, **changes: Any) -> Memory:
        answer = self.http.request("PATCH", f"memories/{memory_id}", json=changes, idempotent=True)
        return Memory.model_validate(answer)

    def delete(self, memory_id: Id) -> None:
        self.http.request("DELETE", f"memories/{memory_id}", idempotent=True)

    def feedback(
        self, memory_id: Id, kind: str, *, content: str | None = None, note: str = "", session_id: str = ""
    ) -> Memory:
        body: dict[str, Any] = {"kind": kind, "note": note, "session_id": session_id}
        if content is not None:
            body["content"] = content
        answer = self.http.request("POST", f"memories/{memory_id}/feedback", json=body, idempotent=False)
        return Memory.model_validate(answer)


class Commits:
    """Staleness from git: the commits memories were learned at, and the files changed since."""

    def __init__(self, http: Http) -> None:
        self.http = http

    def list(self, project_id: Id) -> list[dict[str, Any]]:
        return self.http.request("GET", f"projects/{project_id}/commits", idempotent=True)["items"]

    def changed_files(self, project_id: Id, commit: str, files: Sequence[str]) -> dict[str, Any]:
        """Report `git diff --name-only <commit>..HEAD`: the memories it makes stale."""
        return self.http.request(
            "POST",
            f"projects/{project_id}/commits/{commit}/changed-files",
            json={"files": list(files)},
            idempotent=True,  # (a report sent twice changes nothing more)
        )


class Sessions:
    """Observer sessions: open one, send what the agent does in numbered batches, complete it."""

    def __init__(self, http: Http) -> None:
        self.http = http

    def open(
        self, project_id: Id, *, session_type: str = "build", task: str = "", client: str = "", **fields: Any
    ) -> Session:
        body = {"session_type": session_type, "task": task, "client": client, **fields}
        answer = self.http.request("POST", f"projects/{project_id}/sessions", json=body, idempotent=False)
        return Session.model_validate(answer)

    def get(self, session_id: Id) -> Session:
        return Session.model_validate(self.http.request("GET", f"sessions/{session_id}", idempotent=True))

    def events(self, session_id: Id, events: Sequence[dict[str, Any]]) -> EventsAccepted:
        """Each event carries its own `seq`: a batch sent twice is stored once."""
        answer = self.http.request(
            "POST", f"sessions/{session_id}/events", json={"events": list(events)}, idempotent=True
        )
        return EventsAccepted.model_validate(answer)

    def validation(
        self,
        session_id: Id,
        *,
        passed: bool,
        report: str = "",
        work_unit: str = "",
        checks: Sequence[dict[str, Any]] = (),
    ) -> Any:
        """`report`: the runner's output (its failure lines are mined); `checks`: failures as
        `{"name", "passed", "error", "files", "severity"}`. Each failure becomes an error pattern."""
        body = {"passed": passed, "report": report, "work_unit": work_unit, "checks": list(checks)}
        return self.http.request("POST", f"sessions/{session_id}/validation", json=body, idempotent=False)

    def complete(self, session_id: Id, *, outcome: str, steps: int | None = None) -> Session:
        body = {"outcome": outcome, "steps": steps}
        answer = self.http.request("POST", f"sessions/{session_id}/complete", json=body, idempotent=False)
        return Session.model_validate(answer)

    def step_injection(
        self, session_id: Id, *, step: int, files: Sequence[str] = (), searches: Sequence[str] = ()
    ) -> StepInjection:
        body = {"step": step, "files": list(files), "searches": list(searches)}
        answer = self.http.request(
            "POST", f"sessions/{session_id}/step-injection", json=body, idempotent=True
        )
        return StepInjection.model_validate(answer)


class Graph:
    """The project's code graph: send the repository (whole or the files that changed), ask what
    depends on what."""

    def __init__(self, http: Http) -> None:
        self.http = http

    def index_batch(
        self,
        project_id: Id,
        *,
        files: Sequence[dict[str, str]] = (),
        deleted: Sequence[str] = (),
        renamed: dict[str, str] | None = None,
    ) -> IndexJob:
        """An incremental batch: `files` as `{"path", "content"}`, paths `deleted`, `renamed`
        old → new (a renamed code file's content is in `files` under the new path)."""
        body = {"files": list(files), "deleted": list(deleted), "renamed": renamed or {}}
        answer = self.http.request("POST", f"projects/{project_id}/graph/index", json=body, idempotent=True)
        return IndexJob.model_validate(answer)

    def index_archive(
        self, project_id: Id, archive: bytes, *, filename: str = "repository.tar.gz"
    ) -> IndexJob:
        """The whole repository as a .tar.gz (or .zip): replaces the graph."""
        files = {"archive": (filename, archive, "application/gzip")}
        answer = self.http.request("POST", f"projects/{project_id}/graph/index", files=files, idempotent=True)
        return IndexJob.model_validate(answer)

    def job(self, project_id: Id, job_id: int) -> IndexJob:
        answer = self.http.request("GET", f"projects/{project_id}/graph/index/{job_id}", idempotent=True)
        return IndexJob.model_validate(answer)

    def impact(self, project_id: Id, target: str, *, depth: int = 3) -> dict[str, Any]:
        params = {"target": target, "depth": depth}
        return self.http.request("GET", f"projects/{project_id}/graph/impact", params=params, idempotent=True)

    def dependencies(self, project_id: Id, file: str, *, depth: int = 1) -> dict[str, Any]:
        params = {"file": file, "depth": depth}
        return self.http.request(
            "GET", f"projects/{project_id}/graph/dependencies", params=params, idempotent=True
        )


class Sync:
    """The change feed a device replica pulls, and the offline work it pushes."""

    def __init__(self, http: Http) -> None:
        self.http = http

    def pull(self, project_id: Id, cursor: str | None = None, *, limit: int | None = None) -> dict[str, Any]:
        params = {"project_id": str(project_id), "cursor": cursor, "limit": limit}
        return self.http.request("GET", "sync/pull", params=params, idempotent=True)

    def push(self, project_id: Id, changes: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Creates carry the device's `ref` and edits their base version: a push sent twice
        applies once."""
        body = {"project_id": str(project_id), "changes": list(changes)}
        return self.http.request("POST", "sync/push", json=body, idempotent=True)["results"]

    def conflicts(self, project_id: Id, *, status: str = "open") -> list[dict[str, Any]]:
        """Offline edits the server could not merge: both versions, their base, the memory now."""
        params = {"status": status}
        return self.http.request(
            "GET", f"projects/{project_id}/sync/conflicts", params=params, idempotent=True
        )

    def conflict(self, conflict_id: Id) -> dict[str, Any]:
        return self.http.request("GET", f"sync/conflicts/{conflict_id}", idempotent=True)

    def resolve(
        self, conflict_id: Id, *, keep: str, base_version: int, fields: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Keep `mine`, `theirs`, or a `merge` of `fields`, decided against the memory at
        `base_version` (a conflict's `current_version`): 409 if it moved on or was decided."""
        body: dict[str, Any] = {"keep": keep, "base_version": base_version}
        if fields is not None:
            body["fields"] = fields
        # (not retried once sent: a retry would find it decided and answer 409)
        return self.http.request("POST", f"sync/conflicts/{conflict_id}/resolve", json=body, idempotent=False)


class DeviceLogin:
    """The RFC 8628 device authorization grant, as the service speaks it (no key needed)."""

    def __init__(self, http: Http) -> None:
        self.http = http

    def start(self, *, client_id: str, device_name: str, platform: str = "") -> DeviceCode:
        body = {"client_id": client_id, "device_name": device_name, "platform": platform}
        return DeviceCode.model_validate(
            self.http.request("POST", "device/code", json=body, idempotent=False)
        )

    def token(self, device_code: str, *, client_id: str) -> DeviceToken:
        """The device's key once approved; `ApiError` with the RFC's code otherwise
        (`authorization_pending`, `slow_down`, `expired_token`, `access_denied`)."""
        body = {"grant_type": DEVICE_CODE_GRANT, "device_code": device_code, "client_id": client_id}
        answer = self.http.request("POST", "device/token", json=body, idempotent=False)
        return DeviceToken.model_validate(answer)


class Client:
    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        *,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        retry: RetryPolicy = DEFAULT_RETRY,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.http = Http(url, api_key, timeouts=timeouts, retry=retry, transport=transport)
        self.memories = Memories(self.http)
        self.sessions = Sessions(self.http)
        self.commits = Commits(self.http)
        self.graph = Graph(self.http)
        self.sync = Sync(self.http)
        self.device = DeviceLogin(self.http)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def me(self) -> Me:
        return Me.model_validate(self.http.request("GET", "me", idempotent=True))

    def projects(self) -> list[Project]:
        return [Project.model_validate(p) for p in self.http.request("GET", "projects", idempotent=True)]

    def project(self, project_id: Id) -> Project:
        return Project.model_validate(self.http.request("GET", f"projects/{project_id}", idempotent=True))

    def search(
        self,
        project_id: Id,
        query: str,
        *,
        files: Sequence[str] = (),
        types: Sequence[str] | None = None,
        phase: str | None = None,
        limit: int = 8,
    ) -> SearchResult:
        body: dict[str, Any] = {"query": query, "files": list(files), "phase": phase, "limit": limit}
        if types:
            body["types"] = list(types)
        answer = self.http.request("POST", f"projects/{project_id}/search", json=body, idempotent=True)
        return SearchResult.model_validate(answer)

    def context(
        self,
        project_id: Id,
        *,
        task: str = "",
        files: Sequence[str] = (),
        phase: str | None = None,
        token_budget: int | None = None,
        session_id: str = "",
    ) -> Context:
        body = {
            "task": task,
            "files": list(files),
            "phase": phase,
            "token_budget": token_budget,
            "session_id": session_id,
        }
        answer = self.http.request("POST", f"projects/{project_id}/context", json=body, idempotent=True)
        return Context.model_validate(answer)
