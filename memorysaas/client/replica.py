"""A device's offline replica of one project's memories, in libSQL.

Reads never touch the network: `search_text` uses FTS5 over the same code-aware terms as the
server's keyword search (apps/memories/codetokens.py: `verifyJwt`, `verify_jwt` and
`auth/tokens.ts` match whole and by their parts), `search_vector` libSQL's native vector index
(`F32_BLOB` + `vector_top_k`). Writes made offline (`remember`, `edit`, `forget`) change
the replica at once and queue a change in the outbox; `sync` pushes the outbox, then pulls the
change feed from the saved cursor. An edit the server refuses as a conflict is kept in
`conflicts` with both versions, for the person to decide (seeds/003 §14); the replica shows the
server's copy meanwhile.

    replica = Replica("memory.db", project_id=..., dims=384)
    replica.sync(SyncClient("https://memorysaas.example", api_key))
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

from apps.memories.codetokens import analyze

LOCAL_PREFIX = "local:"
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
"""
# The text columns hold code-aware terms (`_terms`), not the text itself. Whole identifiers keep
# their inner separators, so those are token characters; the terms hold no other punctuation.
# Bump FTS_TERMS when what the columns hold changes: an older replica's index is rebuilt on open.
FTS_TERMS = "codetokens-1"
_FTS = """
CREATE VIRTUAL TABLE memories_fts USING fts5(
    id UNINDEXED, content, tags, files, tokenize = "porter unicode61 tokenchars '_./:-'"
);
"""
_WORD = re.compile(r"[^\W_]+")


def _terms(text: str) -> list[str]:
    """What the keyword index holds for `text`, as the server's (apps/memories/keyword.py): each
    identifier whole and joined (`verify_jwt`, `verifyjwt`), and the prose with identifiers
    replaced by their parts (`verify`, `jwt`); stemmed by the FTS tokenizer."""
    found = analyze(text)
    return [*found.whole, *_WORD.findall(found.words.lower())]


class SyncClient:
    """The two sync calls, over HTTP with an API key (scopes `sync`, `memories:read`/`write`)."""

    def __init__(self, base_url: str, api_key: str, *, transport: httpx.BaseTransport | None = None) -> None:
        self.http = httpx.Client(
            base_url=base_url.rstrip("/") + "/api/v1/",
            headers={"Authorization": f"Bearer {api_key}"},
            transport=transport,
            timeout=30,
        )

    def pull(self, project_id: str, cursor: str | None) -> dict[str, Any]:
        params = {"project_id": project_id, **({"cursor": cursor} if cursor else {})}
        response = self.http.get("sync/pull", params=params)
        response.raise_for_status()
        return response.json()

    def push(self, project_id: str, changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        response = self.http.post("sync/push", json={"project_id": project_id, "changes": changes})
        response.raise_for_status()
        return response.json()["results"]


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

    def search_text(self, query: str, limit: int = 10) -> list[str]:
        """Ids by FTS5 rank, any term of the query matching: identifiers match whole and by their
        parts, and camelCase and snake_case spellings of one name find each other."""
        terms = " OR ".join(f'"{t}"' for t in dict.fromkeys(_terms(query)))
        if not terms:
            return []
        rows = self.db.execute(
            "SELECT id FROM memories_fts WHERE memories_fts MATCH ? ORDER BY rank LIMIT ?", (terms, limit)
        ).fetchall()
        return [r[0] for r in rows]

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

    # ------------------------------------------------------------------ offline writes

    def remember(
        self, *, type: str, content: str, tags: Sequence[str] = (), related_files: Sequence[str] = ()
    ) -> str:
        local_id = f"{LOCAL_PREFIX}{uuid.uuid4()}"
        self._store({"id": local_id, "type": type, "content": content, "tags": list(tags),
                     "related_files": list(related_files), "version": 0})  # fmt: skip
        draft = {"type": type, "content": content, "tags": list(tags), "related_files": list(related_files)}
        self._queue({"op": "create", "ref": local_id, "memory": draft})
        self.db.commit()
        return local_id

    def edit(self, memory_id: str, **fields: Any) -> None:
        current = self.get(memory_id)
        if current is None:
            raise KeyError(memory_id)
        self._store({**current, **fields})
        if memory_id.startswith(LOCAL_PREFIX):  # not on the server yet: fold into its create
            self._rewrite_create(memory_id, fields)
        else:
            self._queue(
                {"op": "update", "id": memory_id, "base_version": current["version"], "fields": fields}
            )
        self.db.commit()

    def forget(self, memory_id: str) -> None:
        current = self.get(memory_id)
        if current is None:
            return
        self._remove(memory_id)
        if not memory_id.startswith(LOCAL_PREFIX):
            self._queue({"op": "delete", "id": memory_id, "base_version": current["version"]})
        self.db.commit()

    # ------------------------------------------------------------------ sync

    def sync(self, client: SyncClient) -> SyncReport:
        report = SyncReport()
        self._push(client, report)
        cursor = self._meta("cursor")
        while True:
            page = client.pull(self.project_id, cursor)
            for change in page["changes"]:
                if change["op"] == "upsert":
                    self._store(change["memory"])
                    report.pulled += 1
                else:
                    self._remove(change["id"])
                    report.deleted += 1
            cursor = page["cursor"]
            self._set_meta("cursor", cursor)
            self.db.commit()  # each page is applied with its cursor, or not at all
            if not page["has_more"]:
                return report

    def _push(self, client: SyncClient, report: SyncReport) -> None:
        queued = self.db.execute("SELECT n, change FROM outbox ORDER BY n").fetchall()
        if not queued:
            return
        changes = [json.loads(change) for _, change in queued]
        results = client.push(self.project_id, changes)
        for change, result in zip(changes, results, strict=True):
            # A change the server refused, whole or in part (pinning and deprecating are a
            # steward's), comes with the server's copy.
            refused = result["status"] == "forbidden" or bool(result.get("refused"))
            report.forbidden += refused
            if change["op"] == "create" and result["status"] == "applied":
                self._remove(change["ref"])  # the pull brings it back under its server id
            if refused:
                self._store(result["server"])
            elif result["status"] == "conflict":
                local = self.get(change["id"]) or {}
                self.db.execute(
                    "INSERT OR REPLACE INTO conflicts (id, fields, local, server) VALUES (?, ?, ?, ?)",
                    (change["id"], json.dumps(result["conflicts"]), json.dumps({**local, **change.get("fields", {})}),
                     json.dumps(result["server"])),
                )  # fmt: skip
                self._store(result["server"])
                report.conflicts += 1
        self.db.execute("DELETE FROM outbox WHERE n <= ?", (queued[-1][0],))
        report.pushed = len(changes)
        self.db.commit()

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

    def _rewrite_create(self, ref: str, fields: dict[str, Any]) -> None:
        for n, raw in self.db.execute("SELECT n, change FROM outbox").fetchall():
            change = json.loads(raw)
            if change.get("ref") == ref:
                change["memory"].update(fields)
                self.db.execute("UPDATE outbox SET change = ? WHERE n = ?", (json.dumps(change), n))

    def _meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def _set_meta(self, key: str, value: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))
