"""A device's offline replica of one project's memories, in libSQL.

Reads never touch the network: `search_text` uses FTS5 over the same code-aware terms as the
server's keyword search (`memorysaas_client.codetokens`, which the server imports too: `verifyJwt`,
`verify_jwt` and `auth/tokens.ts` match whole and by their parts), `search_vector` libSQL's native
vector index (`F32_BLOB` + `vector_top_k`). Writes made offline (`remember`, `edit`, `forget`) change
the replica at once and queue a change in the outbox; `sync` pushes the outbox, then pulls the
change feed from the saved cursor. An edit the server refuses as a conflict is kept in
`conflicts` with both versions, for the person to decide; the replica shows the
server's copy meanwhile. A change the server finds invalid is moved to `rejected` with the reason
(the replica takes the server's copy back, or drops a memory it never had), and the rest syncs.

The outbox holds at most one change per memory (a second edit folds into the queued one, forgetting
drops what was queued for the memory), so it can be pushed in batches in any split.

    replica = Replica("memory.db", project_id=..., dims=384)
    replica.sync(SyncClient("https://memorysaas.example", api_key))   # or a Client's `.sync`
    replica.search_text("verify_jwt")
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import libsql

from memorysaas_client.codetokens import analyze
from memorysaas_client.errors import ApiError
from memorysaas_client.kinds import normalize_type
from memorysaas_client.sdk import Sync
from memorysaas_client.transport import Http

LOCAL_PREFIX = "local:"
# Changes per push request: the server's limit (its sync API's MAX_PUSH), and a size well under
# its request body limit (MAX_REQUEST_BYTES, 5 MiB by default).
PUSH_BATCH = 500
PUSH_BYTES = 1_000_000
# What a pushed edit may change (the sync API's UpdatableFields), and the limits the server
# checks that a device can check too (its MemoryDraft).
EDITABLE = frozenset({
    "content", "type", "tags", "related_files", "related_modules", "payload", "citation_text",
    "confidence", "pinned", "deprecated",
})  # fmt: skip
MAX_CONTENT_CHARS = 4000
MAX_ITEMS = {"tags": 30, "related_files": 100, "related_modules": 50}
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS memories (
    id TEXT PRIMARY KEY,
    type TEXT NOT NULL,
    content TEXT NOT NULL,
    scope TEXT,
    source TEXT,
    confidence REAL,
    tags TEXT NOT NULL DEFAULT '[]',
    related_files TEXT NOT NULL DEFAULT '[]',
    pinned INTEGER DEFAULT 0,
    deprecated INTEGER DEFAULT 0,
    disputed INTEGER DEFAULT 0,
    stale INTEGER DEFAULT 0,
    needs_review INTEGER DEFAULT 0,
    version INTEGER NOT NULL DEFAULT 0,
    updated_at TEXT,
    embedding_model TEXT,
    embedding F32_BLOB({dims})
);
CREATE INDEX IF NOT EXISTS memories_embedding ON memories (libsql_vector_idx(embedding));
CREATE TABLE IF NOT EXISTS outbox (n INTEGER PRIMARY KEY AUTOINCREMENT, change TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS conflicts (
    id TEXT PRIMARY KEY, fields TEXT NOT NULL, local TEXT NOT NULL, server TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS rejected (n INTEGER PRIMARY KEY, change TEXT NOT NULL, reason TEXT NOT NULL);
"""
# The text columns hold code-aware terms (`_terms`), not the text itself. Whole identifiers keep
# their inner separators, so those are token characters; the terms hold no other punctuation.
# Bump FTS_TERMS when what the columns hold changes: an older replica's index is rebuilt on open.
FTS_TERMS = "codetokens-2"  # 2: CJK runs also by their character pairs
_FTS = """
CREATE VIRTUAL TABLE memories_fts USING fts5(
    id UNINDEXED, content, tags, files, tokenize = "porter unicode61 tokenchars '_./:-'"
);
"""
_WORD = re.compile(r"[^\W_]+")


class InvalidChange(ValueError):
    """An offline write the server would refuse: made on the device, it is refused there."""


def _checked(fields: dict[str, Any]) -> dict[str, Any]:
    """`fields` of a memory as the server will take them (the type by its canonical name), or
    InvalidChange saying what is wrong."""
    checked = dict(fields)
    if "type" in fields:
        try:
            checked["type"] = normalize_type(str(fields["type"]))
        except ValueError:
            raise InvalidChange(
                f"unknown memory type {fields['type']!r}: one of the 16 memory types (gotcha, decision, "
                "workflow_recipe, …) or a Dex alias (pitfall, fix, convention, …)"
            ) from None
    if "content" in fields:
        content = fields["content"]
        if not isinstance(content, str) or not 1 <= len(content.strip()) <= MAX_CONTENT_CHARS:
            raise InvalidChange(f"content must be 1 to {MAX_CONTENT_CHARS} characters")
    for name, limit in MAX_ITEMS.items():
        values = fields.get(name)
        if values is None:
            continue
        if isinstance(values, str) or not all(isinstance(v, str) for v in values):
            raise InvalidChange(f"{name} must be a list of strings")
        if len(values) > limit:
            raise InvalidChange(f"{name} holds at most {limit} entries")
    confidence = fields.get("confidence")
    if confidence is not None and not (isinstance(confidence, (int, float)) and 0 <= confidence <= 1):
        raise InvalidChange("confidence must be between 0 and 1")
    if _has_nul(fields):
        raise InvalidChange("a NUL (\\u0000) character cannot be stored")
    return checked


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_has_nul(v) for v in value)
    return False


def _terms(text: str) -> list[str]:
    """What the keyword index holds for `text`, as the server's keyword index holds it: each
    identifier whole and joined (`verify_jwt`, `verifyjwt`), and the prose with identifiers
    replaced by their parts (`verify`, `jwt`); stemmed by the FTS tokenizer."""
    found = analyze(text)
    return [*found.whole, *_WORD.findall(found.words.lower())]


class SyncClient(Sync):
    """The two sync calls to one service with an API key (scopes `sync`, `memories:read`/`write`).
    A `Client`'s own `sync` does the same: `replica.sync(client.sync)`."""

    def __init__(self, base_url: str, api_key: str, *, transport: httpx.BaseTransport | None = None) -> None:
        super().__init__(Http(base_url, api_key, transport=transport))


# What `get` returns of a stored memory (all but its vector), and which of it are flags.
_FLAGS = ("pinned", "deprecated", "disputed", "stale", "needs_review")
_FIELDS = (
    "id", "type", "content", "scope", "source", "confidence", "tags", "related_files", *_FLAGS,
    "version", "updated_at", "embedding_model",
)  # fmt: skip


@dataclass
class SyncReport:
    pushed: int = 0
    pulled: int = 0
    deleted: int = 0
    conflicts: int = 0
    forbidden: int = 0  # changes the server refused, whole or in part (pinning, deprecating and
    # deleting another's memory need a steward)
    rejected: int = 0  # changes the server found invalid: moved to `Replica.rejected()`
    push_error: str | None = None  # why a push request failed (its changes stay queued); the
    # pull ran all the same


def _batches(queued: list[tuple[int, str]]) -> list[list[tuple[int, str]]]:
    """The queue in order, in requests of at most PUSH_BATCH changes and about PUSH_BYTES."""
    batches: list[list[tuple[int, str]]] = []
    size = 0
    for row in queued:
        if not batches or len(batches[-1]) == PUSH_BATCH or size + len(row[1]) > PUSH_BYTES:
            batches.append([])
            size = 0
        batches[-1].append(row)
        size += len(row[1])
    return batches


class Replica:
    def __init__(self, path: str, *, project_id: str, dims: int = 384) -> None:
        self.project_id = str(project_id)
        self.dims = dims
        self.db = libsql.connect(path)
        self.db.executescript(_SCHEMA.format(dims=int(dims)))
        if self._meta("fts_terms") != FTS_TERMS:
            self._rebuild_fts()
        self.db.commit()

    # ------------------------------------------------------------------ reading

    def get(self, memory_id: str) -> dict[str, Any] | None:
        row = self.db.execute(
            f"SELECT {', '.join(_FIELDS)} FROM memories WHERE id = ?", (memory_id,)
        ).fetchone()
        if row is None:
            return None
        memory = dict(zip(_FIELDS, row, strict=True))
        for name in ("tags", "related_files"):
            memory[name] = json.loads(memory[name])
        for name in _FLAGS:
            memory[name] = bool(memory[name])
        return memory

    def count(self) -> int:
        return self.db.execute("SELECT count(*) FROM memories").fetchone()[0]

    def search_text(self, query: str, limit: int = 10, *, types: Sequence[str] = ()) -> list[str]:
        """Ids by FTS5 rank, any term of the query matching: identifiers match whole and by their
        parts, and camelCase and snake_case spellings of one name find each other. With `types`,
        only memories of those types."""
        terms = " OR ".join(f'"{t}"' for t in dict.fromkeys(_terms(query)))
        if not terms:
            return []
        of_types = f" AND m.type IN ({', '.join('?' * len(types))})" if types else ""
        rows = self.db.execute(
            "SELECT f.id FROM memories_fts f JOIN memories m ON m.id = f.id"
            f" WHERE memories_fts MATCH ?{of_types} ORDER BY f.rank LIMIT ?",
            (terms, *types, limit),
        ).fetchall()
        return [r[0] for r in rows]

    def find(self, query: str, limit: int = 10, *, types: Sequence[str] = ()) -> list[dict[str, Any]]:
        """The memories themselves, as `search_text` ranks them."""
        return [m for m in map(self.get, self.search_text(query, limit, types=types)) if m is not None]

    def all(self) -> list[dict[str, Any]]:
        ids = [row[0] for row in self.db.execute("SELECT id FROM memories ORDER BY id").fetchall()]
        return [m for m in map(self.get, ids) if m is not None]

    def search_vector(self, vector: Sequence[float], limit: int = 10) -> list[tuple[str, float]]:
        """(id, cosine distance) of the nearest memories, through the vector index."""
        literal = json.dumps([float(x) for x in vector])
        rows = self.db.execute(
            """
            SELECT m.id, vector_distance_cos(m.embedding, vector32(?))
            FROM vector_top_k('memories_embedding', vector32(?), ?) AS top
            JOIN memories m ON m.rowid = top.id
            ORDER BY 2
            """,
            (literal, literal, limit),
        ).fetchall()
        return [(r[0], float(r[1])) for r in rows]

    def conflicts(self) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT id, fields, local, server FROM conflicts ORDER BY id").fetchall()
        return [
            {"id": r[0], "fields": json.loads(r[1]), "local": json.loads(r[2]), "server": json.loads(r[3])}
            for r in rows
        ]

    def rejected(self) -> list[dict[str, Any]]:
        """Changes the server found invalid, oldest first, each with the server's `reason`
        (`message`, `details`): set aside so the rest could sync."""
        rows = self.db.execute("SELECT n, change, reason FROM rejected ORDER BY n").fetchall()
        return [{"n": r[0], "change": json.loads(r[1]), "reason": json.loads(r[2])} for r in rows]

    def pending(self) -> int:
        """Changes queued for the next sync."""
        return self.db.execute("SELECT count(*) FROM outbox").fetchone()[0]

    # ------------------------------------------------------------------ offline writes

    def remember(
        self, *, type: str, content: str, tags: Sequence[str] = (), related_files: Sequence[str] = ()
    ) -> str:
        draft = _checked(
            {"type": type, "content": content, "tags": list(tags), "related_files": list(related_files)}
        )
        local_id = f"{LOCAL_PREFIX}{uuid.uuid4()}"
        self._store({**draft, "id": local_id, "version": 0})
        self._queue({"op": "create", "ref": local_id, "memory": draft})
        self.db.commit()
        return local_id

    def edit(self, memory_id: str, **fields: Any) -> None:
        current = self.get(memory_id)
        if current is None:
            raise KeyError(memory_id)
        unknown = sorted(set(fields) - EDITABLE)
        if unknown:
            raise InvalidChange(f"cannot edit {', '.join(unknown)}: one of {', '.join(sorted(EDITABLE))}")
        fields = _checked(fields)
        if memory_id.startswith(LOCAL_PREFIX) and "deprecated" in fields:
            # (a create cannot carry it: the server would refuse the whole memory)
            raise InvalidChange("a memory not synced yet cannot be deprecated: forget it, or sync first")
        self._store({**current, **fields})
        if memory_id.startswith(LOCAL_PREFIX):  # not on the server yet: fold into its create
            self._rewrite_queued(memory_id, fields)
        elif not self._rewrite_queued(memory_id, fields):  # (a second edit folds into the first)
            self._queue(
                {"op": "update", "id": memory_id, "base_version": current["version"], "fields": fields}
            )
        self.db.commit()

    def forget(self, memory_id: str) -> None:
        current = self.get(memory_id)
        if current is None:
            return
        self._remove(memory_id)
        # Edits queued for it go: the delete is based on the version the device saw before them,
        # as they were. A memory the server never had leaves nothing to send.
        self._unqueue(memory_id)
        if not memory_id.startswith(LOCAL_PREFIX):
            self._queue({"op": "delete", "id": memory_id, "base_version": current["version"]})
        self.db.commit()

    # ------------------------------------------------------------------ sync

    def sync(self, client: Sync) -> SyncReport:
        """Push the outbox, then pull. A push the server refuses as a whole (a key without
        `memories:write`, a server error) leaves its changes queued and says why in
        `push_error`: the pull runs all the same."""
        report = SyncReport()
        self._push(client, report)
        waiting = self._waiting()  # what a refused push left queued, by memory
        cursor = self._meta("cursor")
        while True:
            page = client.pull(self.project_id, cursor)
            for change in page["changes"]:
                if change["op"] == "upsert":
                    memory_id = change["memory"]["id"]
                    if memory_id not in waiting:
                        self._store(change["memory"])
                    elif waiting[memory_id] is not None:  # the device's own edits stay on top
                        self._store({**change["memory"], **waiting[memory_id]})
                    report.pulled += 1
                else:
                    self._remove(change["id"])
                    report.deleted += 1
            cursor = page["cursor"]
            self._set_meta("cursor", cursor)
            self.db.commit()  # each page is applied with its cursor, or not at all
            if not page["has_more"]:
                return report

    def _waiting(self) -> dict[str, dict[str, Any] | None]:
        """Memories with changes still queued: the fields their edits set, or None for one the
        device deleted. A pull must not put back what the device changed and has yet to send."""
        waiting: dict[str, dict[str, Any] | None] = {}
        for (raw,) in self.db.execute("SELECT change FROM outbox ORDER BY n").fetchall():
            change = json.loads(raw)
            if change["op"] == "update" and waiting.get(change["id"], {}) is not None:
                waiting.setdefault(change["id"], {}).update(change["fields"])
            elif change["op"] == "delete":
                waiting[change["id"]] = None
        return waiting

    def _fold_outbox(self) -> None:
        """One queued change per memory, as `edit` and `forget` keep it now: an outbox an older
        client wrote may hold two edits of a memory, or an edit then its delete, which a batch
        boundary between them would turn into a conflict of the device with itself."""
        first: dict[str, tuple[int, dict[str, Any]]] = {}
        for n, raw in self.db.execute("SELECT n, change FROM outbox ORDER BY n").fetchall():
            change = json.loads(raw)
            if change["op"] not in ("update", "delete"):
                continue
            earlier = first.get(change["id"])
            if earlier is None or earlier[1]["op"] == "delete":
                first[change["id"]] = (n, change)
                continue
            kept_n, kept = earlier
            if change["op"] == "update":
                kept["fields"].update(change["fields"])
            else:  # the delete, based on the version seen before the edits, as `forget` sends it
                kept = {**change, "base_version": kept["base_version"]}
            self.db.execute("UPDATE outbox SET change = ? WHERE n = ?", (json.dumps(kept), kept_n))
            self.db.execute("DELETE FROM outbox WHERE n = ?", (n,))
            first[change["id"]] = (kept_n, kept)

    def _push(self, client: Sync, report: SyncReport) -> None:
        # A create whose memory is gone was forgotten before it ever synced (a client before
        # `forget` dropped its queued changes left it behind): it must not bring the memory back.
        self.db.execute(
            "DELETE FROM outbox WHERE json_extract(change, '$.op') = 'create'"
            " AND json_extract(change, '$.ref') NOT IN (SELECT id FROM memories)"
        )
        self._fold_outbox()
        self.db.commit()
        queued = self.db.execute("SELECT n, change FROM outbox ORDER BY n").fetchall()
        for batch in _batches(queued):
            changes = [json.loads(change) for _, change in batch]
            try:
                results = client.push(self.project_id, changes)
            except ApiError as exc:
                report.push_error = f"{exc.status}: {exc.message}"
                return  # later changes may build on these: they wait too
            for (n, _), change, result in zip(batch, changes, results, strict=True):
                self._took(n, change, result, report)
            self.db.execute("DELETE FROM outbox WHERE n <= ?", (batch[-1][0],))
            report.pushed += len(changes)
            self.db.commit()  # each batch is settled with its results, or not at all

    def _took(self, n: int, change: dict[str, Any], result: dict[str, Any], report: SyncReport) -> None:
        """What the server answered for one pushed change, applied to the replica."""
        status = result["status"]
        # A change the server refused, whole or in part (pinning and deprecating are a
        # steward's), comes with the server's copy.
        refused = status == "forbidden" or bool(result.get("refused"))
        report.forbidden += refused
        if change["op"] == "create" and status in ("applied", "invalid"):
            self._remove(change["ref"])  # the pull brings it back under its server id (if it has one)
        if status == "invalid":
            reason = {"message": result.get("message", ""), "details": result.get("details")}
            self.db.execute(
                "INSERT OR REPLACE INTO rejected (n, change, reason) VALUES (?, ?, ?)",
                (n, json.dumps(change), json.dumps(reason)),
            )
            if result.get("server"):
                self._store(result["server"])  # the edit that could not apply is undone
            report.rejected += 1
        elif refused:
            self._store(result["server"])
        elif status == "conflict":
            local = self.get(change["id"]) or {}
            self.db.execute(
                "INSERT OR REPLACE INTO conflicts (id, fields, local, server) VALUES (?, ?, ?, ?)",
                (change["id"], json.dumps(result["conflicts"]), json.dumps({**local, **change.get("fields", {})}),
                 json.dumps(result["server"])),
            )  # fmt: skip
            self._store(result["server"])
            report.conflicts += 1

    # ------------------------------------------------------------------ storage

    def _store(self, memory: dict[str, Any]) -> None:
        vector = memory.get("embedding")
        usable = vector is not None and len(vector) == self.dims
        self._remove(memory["id"])
        self.db.execute(
            """
            INSERT INTO memories (id, type, content, scope, source, confidence, tags, related_files, pinned,
                deprecated, disputed, stale, needs_review, version, updated_at, embedding_model, embedding)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, CASE WHEN ? IS NULL THEN NULL ELSE vector32(?) END)
            """,
            (
                memory["id"], memory["type"], memory["content"], memory.get("scope"), memory.get("source"),
                memory.get("confidence"), json.dumps(memory.get("tags", [])), json.dumps(memory.get("related_files", [])),
                int(memory.get("pinned", False)), int(memory.get("deprecated", False)), int(memory.get("disputed", False)),
                int(memory.get("stale", False)), int(memory.get("needs_review", False)), memory.get("version", 0),
                memory.get("updated_at"), memory.get("embedding_model") if usable else None,
                *[json.dumps(vector) if usable else None] * 2,
            ),
        )  # fmt: skip
        self._index(memory["id"], memory["content"], memory.get("tags", []), memory.get("related_files", []))

    def _index(self, memory_id: str, content: str, tags: Sequence[str], files: Sequence[str]) -> None:
        self.db.execute(
            "INSERT INTO memories_fts (id, content, tags, files) VALUES (?, ?, ?, ?)",
            (
                memory_id,
                " ".join(_terms(content)),
                " ".join(t for tag in tags for t in _terms(tag)),
                " ".join(t for path in files for t in _terms(path)),
            ),
        )

    def _rebuild_fts(self) -> None:
        self.db.execute("DROP TABLE IF EXISTS memories_fts")
        self.db.executescript(_FTS)
        rows = self.db.execute("SELECT id, content, tags, related_files FROM memories").fetchall()
        for memory_id, content, tags, files in rows:
            self._index(memory_id, content, json.loads(tags), json.loads(files))
        self._set_meta("fts_terms", FTS_TERMS)

    def _remove(self, memory_id: str) -> None:
        self.db.execute("DELETE FROM memories WHERE id = ?", (memory_id,))
        self.db.execute("DELETE FROM memories_fts WHERE id = ?", (memory_id,))

    def _queue(self, change: dict[str, Any]) -> None:
        self.db.execute("INSERT INTO outbox (change) VALUES (?)", (json.dumps(change),))

    def _queued_for(self, memory_id: str) -> list[tuple[int, dict[str, Any]]]:
        """The queued changes of one memory: its create (by the local id, its `ref`) or its edits.
        (Every offline edit asks: the outbox is searched, not read whole.)"""
        rows = self.db.execute(
            "SELECT n, change FROM outbox WHERE json_extract(change, '$.ref') = ?"
            " OR json_extract(change, '$.id') = ? ORDER BY n",
            (memory_id, memory_id),
        ).fetchall()
        return [(n, json.loads(raw)) for n, raw in rows]

    def _rewrite_queued(self, memory_id: str, fields: dict[str, Any]) -> bool:
        """Fold `fields` into the memory's queued create or edit; False when none is queued."""
        folded = False
        for n, change in self._queued_for(memory_id):
            if change["op"] == "delete":
                continue
            change["memory" if change["op"] == "create" else "fields"].update(fields)
            self.db.execute("UPDATE outbox SET change = ? WHERE n = ?", (json.dumps(change), n))
            folded = True
        return folded

    def _unqueue(self, memory_id: str) -> None:
        for n, _ in self._queued_for(memory_id):
            self.db.execute("DELETE FROM outbox WHERE n = ?", (n,))

    def _meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def _set_meta(self, key: str, value: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))
