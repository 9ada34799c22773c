"""Memories tests embed with the hashing provider unless a test asks for the real model
(`real_embeddings`), so the suite stays fast; the MiniLM model loads once per process."""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from apps.memories.embedding import precision


@pytest.fixture(autouse=True)
def precision_model_retried():
    """A test that makes the precision model fail to load leaves no memo of it to later tests."""
    yield
    precision._failed_at = None


@pytest.fixture(autouse=True)
def hashing_embeddings(settings, request):
    if "real_embeddings" in request.fixturenames:
        return
    settings.EMBEDDING_PROVIDER = "hashing"
    settings.EMBEDDING_DIMENSIONS = 384


@pytest.fixture
def real_embeddings(settings):
    settings.EMBEDDING_PROVIDER = "local"


class _FakeOpenAI(BaseHTTPRequestHandler):
    """Chat completions and embeddings in the OpenAI wire format, for the real `openai` SDK.

    `mode`: "ok" answers chat with `answer`; "error" returns 500; "hang" holds the chat request
    until the fixture ends (the client's timeout fires first). Embeddings are the hashing
    provider's vectors of the inputs, float lists or base64 as the request asks."""

    requests: list[dict] = []
    mode = "ok"
    answer = ""
    release = threading.Event()

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _FakeOpenAI.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
        if self.path.endswith("/embeddings"):
            return self._embeddings(body)
        if _FakeOpenAI.mode == "error":
            return self._send(500, {"error": {"message": "upstream exploded", "type": "server_error"}})
        if _FakeOpenAI.mode == "hang":
            _FakeOpenAI.release.wait(30)
        self._send(
            200,
            {
                "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": _FakeOpenAI.answer}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30},
            },
        )  # fmt: skip

    def _embeddings(self, body):
        from apps.memories.embedding.providers import HashingEmbeddings

        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        vectors = HashingEmbeddings(body.get("dimensions") or 384).embed(texts)
        data = []
        for i, vector in enumerate(vectors):
            if body.get("encoding_format") == "base64":
                encoded = base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()
            else:
                encoded = [float(x) for x in vector]
            data.append({"object": "embedding", "index": i, "embedding": encoded})
        self._send(
            200,
            {
                "object": "list",
                "data": data,
                "model": body["model"],
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            },
        )

    def _send(self, status, payload):
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_openai(settings):
    """A fake OpenAI server on 127.0.0.1 with OPENAI_API_KEY and OPENAI_BASE_URL pointed at it."""
    from apps.memories.search import hyde

    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeOpenAI)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    settings.OPENAI_API_KEY = "test-openai-key"
    settings.OPENAI_BASE_URL = f"http://127.0.0.1:{server.server_port}/v1"
    _FakeOpenAI.requests, _FakeOpenAI.mode, _FakeOpenAI.answer = [], "ok", ""
    _FakeOpenAI.release = threading.Event()
    hyde.reset()
    yield _FakeOpenAI
    _FakeOpenAI.release.set()
    server.shutdown()
    server.server_close()
    hyde.reset()


class _FakeCohere(BaseHTTPRequestHandler):
    requests: list[dict] = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _FakeCohere.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
        # Relevance: documents mentioning "paginator" first, in reverse order of arrival.
        order = sorted(
            range(len(body["documents"])), key=lambda i: ("paginator" not in body["documents"][i], -i)
        )
        results = [
            {"index": i, "relevance_score": 1.0 - n / 10} for n, i in enumerate(order[: body["top_n"]])
        ]
        payload = json.dumps(
            {"id": "rr-1", "results": results, "meta": {"billed_units": {"search_units": 1}}}
        )
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload.encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_cohere(settings):
    """A fake Cohere Rerank server on 127.0.0.1 with COHERE_API_KEY and COHERE_BASE_URL set."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeCohere)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    settings.COHERE_API_KEY = "test-cohere-key"
    settings.COHERE_BASE_URL = f"http://127.0.0.1:{server.server_port}"
    _FakeCohere.requests = []
    yield _FakeCohere
    server.shutdown()
    server.server_close()
