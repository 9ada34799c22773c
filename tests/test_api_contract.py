"""The API keeps its OpenAPI contract: schemathesis's own CLI, every check (`--checks all`), over
the whole schema a real daphne serves on the test database.

What that asks of the API: a request the schema admits is accepted (or refused for a reason the
schema gives: 401/403, a 404 for an object it names, a 409 for a state it conflicts with); a
request the schema refuses is refused; every status, content type, header and body is the one
the schema documents. The seed makes a failure reproducible; the examples are bounded so the
run takes a minute or two.

Decided and why:
- Path parameters come from this test's own objects (a schemathesis dictionary), so generated
  bodies reach the handlers rather than stopping at a 404 (the 404s have tests of their own:
  tests/test_isolation.py). The API key's id is a spare key's: revoking the caller's own key
  would leave the rest of the run at 401.
- The stateful phase runs on the links the schema declares, not on links schemathesis infers from
  field names: inference wires any `project_id` or `session_id` it finds in a response (an API
  key's null project, a memory's free-text session reference) into a path, sends the request the
  schema refuses (`/projects/None/...`) and reports it as a valid request refused.
- A 413 is how this API refuses a body over a size or batch limit, so it counts as a rejection
  of invalid data (schemathesis's default list lacks it).
- The coverage phase sends its positive cases only: its negative ones are a case per keyword per
  field, some 3,500 requests (six minutes here); the fuzzing phase sends negative cases of every
  operation within the example bound, and they must be refused as the schema says.
- tests/contract_hooks.py tells schemathesis the two rules JSON Schema cannot state: an upload
  to graph/index is a real archive, and an API key expires in the future.
- The device flow's token endpoint answers a well-formed poll with 400 while the code waits for
  approval: the OAuth RFCs it follows say so (RFC 8628 §3.5), so there a 400 is an acceptance.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from apps.tenants import services
from memorysaas.api import api
from tests import isolation
from tests.isolation import World
from tests.processes import database_url, free_port

ROOT = Path(__file__).resolve().parents[1]
SEED = 20261128
MAX_EXAMPLES = 10
# A 413 refuses a body over a limit; schemathesis's other rejections as it lists them.
REJECTIONS = [400, 401, 403, 404, 405, 406, 409, 413, 415, 422, 428, 429]

isolation.load_registrations()


def _world(alice, bob, charlie) -> dict[str, str]:
    """Objects of every kind in org A (the isolation test's builders), and the value each path
    parameter takes."""
    world = World(alice=alice, bob=bob, charlie=charlie)
    for build in isolation.WORLD_BUILDERS:
        build(world)
    params = {name: str(value(world)) for name, value in isolation.API_PARAMS.items()}
    spare, _ = services.api_key_create(
        organization=alice.org, actor=alice.principal, name="spare", scopes=["sync"], check_permission=False
    )
    params["key_id"] = str(spare.id)
    return params


def _config(params: dict[str, str]) -> str:
    """schemathesis.toml: parameters bound to our objects, 413 among the rejections, the coverage
    phase's positive cases, the stateful phase on declared links only."""
    lines = [f"[checks.negative_data_rejection]\nexpected-statuses = {json.dumps(REJECTIONS)}"]
    lines.append('[phases.coverage.generation]\nmode = "positive"')
    lines.append("[phases.stateful.inference]\nalgorithms = []")
    # The device flow's token endpoint answers a well-formed poll with 400 until someone approves
    # the code (`authorization_pending`): RFC 8628 §3.5 and RFC 6749 §5.2 say so, not our schema.
    lines.append(
        '[[operations]]\ninclude-name = "POST /api/v1/device/token"\n'
        "[operations.checks.positive_data_acceptance]\n"
        f"expected-statuses = {json.dumps(['2xx', '3xx', 400, 401, 403, 404, 409, 429, '5xx'])}"
    )
    # Whether a webhook URL is accepted depends on what its host resolves to (the SSRF check:
    # apps/webhooks/ssrf.py), which no schema can state: a well-formed URL may get 422 unsafe_url.
    for name in ("POST /api/v1/orgs/{org}/webhooks", "PATCH /api/v1/orgs/{org}/webhooks/{webhook_id}"):
        lines.append(
            f'[[operations]]\ninclude-name = "{name}"\n'
            "[operations.checks.positive_data_acceptance]\n"
            f"expected-statuses = {json.dumps(['2xx', 401, 403, 404, 422, 429])}"
        )
    # A period's start after its end is a 422, and schemathesis draws the two ends apart: the
    # order of two parameters is not something a schema states.
    lines.append(
        '[[operations]]\ninclude-name = "GET /api/v1/projects/{project_id}/memories"\n'
        "[operations.checks.positive_data_acceptance]\n"
        f"expected-statuses = {json.dumps(['2xx', 401, 403, 404, 422, 429])}"
    )
    lines.append("[parameters]")
    lines += [f'"path.{name}" = {{ dictionary = "{name}" }}' for name in params]
    # (Sync names its project in the query or body; so does a project-limited key.)
    lines += [f'"{where}.project_id" = {{ dictionary = "project_id" }}' for where in ("query", "body")]
    for name, value in params.items():
        lines.append(
            f"[dictionaries.{name}]\nvalues = [{json.dumps(int(value) if value.isdigit() else value)}]"
        )
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker, tmp_path_factory):
    """A daphne serving the test database (tests that use it take `transactional_db`, so what
    they make is committed and the server sees it)."""
    with django_db_blocker.unblock():
        url = database_url()
    with _daphne(url, tmp_path_factory.mktemp("daphne") / "daphne.log") as base:
        yield base


@contextlib.contextmanager
def _daphne(database: str, log: Path):
    """A daphne process, its log in `log` (a pipe nobody reads would fill and stop the server)."""
    port = free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "memorysaas.settings.test",
        "DATABASE_URL": database,
        "SECRET_KEY": settings.SECRET_KEY,
        "DB_CONN_MAX_AGE": "0",
        "EMBEDDING_PROVIDER": "hashing",
        "RATE_LIMIT_ENABLED": "0",
    }
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(port),
                "memorysaas.asgi:application",
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            _wait_until_serving(port, process, log)
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_until_serving(port: int, process: subprocess.Popen, log: Path) -> None:
    for _ in range(1200):
        if process.poll() is not None:
            raise AssertionError(f"daphne exited:\n{log.read_text(errors='replace')[-3000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=1).status_code == 200:
                return
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=0.1)
    raise AssertionError("daphne never served")


def _with_root() -> str:
    """PYTHONPATH with the repository on it (the hooks module is tests.contract_hooks)."""
    return os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))


def test_every_operation_documents_the_errors_its_shape_can_give():
    """Statuses the error handlers give any operation of a shape: load and the database (429,
    503), auth (401, 403), what the path, query or body names (404), validation (422), a body
    (400, 413, 415)."""
    for path, item in api.get_openapi_schema()["paths"].items():
        for method, operation in item.items():
            documented = set(operation["responses"])
            expected = {429, 503} | ({401, 403} if operation.get("security") else set())
            if operation.get("parameters") or "requestBody" in operation:
                expected |= {404, 422}
            if "requestBody" in operation:
                expected |= {400, 413, 415}
            assert expected <= documented, f"{method.upper()} {path}: {sorted(expected - documented)}"


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b"--b--\r\n", "multipart/form-data; boundary=b"),  # no part at all
        (b"", "multipart/form-data; boundary=b"),
        (b"archive", "multipart/form-data"),  # no boundary
        (
            b'--b\r\nContent-Disposition: form-data; name="archive"; filename="a.tgz"\r\n\r\nab',
            "multipart/form-data; boundary=b",
        ),
    ],
    ids=["closing-boundary-only", "empty", "no-boundary", "cut-off"],
)
def test_an_empty_or_broken_upload_is_answered_in_the_envelope(
    server, transactional_db, alice, body, content_type
):
    """Through the real web server: Twisted answered these with a bare 400 and no body before
    the application saw them."""
    response = httpx.post(
        f"{server}/api/v1/projects/{alice.project.id}/graph/index",
        content=body,
        headers={"Content-Type": content_type, "Authorization": f"Bearer {alice.key}"},
        timeout=30,
    )
    assert response.status_code in (400, 422), response.text
    assert response.headers["content-type"] == "application/json"
    assert set(response.json()["error"]) == {"code", "message", "details"}


def test_schemathesis_finds_every_answer_as_the_schema_documents_it(
    server, transactional_db, settings, alice, bob, charlie, tmp_path
):
    settings.EMBEDDING_PROVIDER = "hashing"  # (the world's memories, as the server's)
    params = _world(alice, bob, charlie)
    config = tmp_path / "schemathesis.toml"
    config.write_text(_config(params))
    options = {
        "--header": f"Authorization: Bearer {alice.key}",
        "--checks": "all",
        "--max-examples": str(MAX_EXAMPLES),
        "--seed": str(SEED),
        "--workers": "1",  # (Python 3.11's parser is not safe in two threads at once: hypothesis hit it)
        "--request-timeout": "60",
        "--generation-database": "none",
    }
    run = subprocess.run(
        [
            *(sys.executable, "-m", "schemathesis.cli", "--no-color", "--config-file", str(config)),
            *(
                "run",
                f"{server}/api/v1/openapi.json",
                *(part for option in options.items() for part in option),
            ),
        ],
        cwd=tmp_path,
        env={**os.environ, "SCHEMATHESIS_HOOKS": "tests.contract_hooks", "PYTHONPATH": _with_root()},
        capture_output=True,
        text=True,
        timeout=900,
    )
    summary = run.stdout[run.stdout.rfind("Test cases:") :].strip()
    print(summary)
    assert run.returncode == 0, f"{run.stdout[-20000:]}\n{run.stderr[-5000:]}"
