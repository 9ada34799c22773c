"""What tests/test_api_contract.py tells schemathesis beyond the schema: the two rules of the API
that JSON Schema has no words for. Loaded by the schemathesis CLI (SCHEMATHESIS_HOOKS).

- `format: binary` is a repository archive: graph/index reads the upload as a .tar.gz or .zip
  (its `encoding` says so). Schemathesis would send a PNG or random bytes.
- An API key's `expires_at` lies in the future ("now" is no value a schema can name).
"""

from __future__ import annotations

import io
import tarfile
import zipfile
from datetime import UTC, datetime, timedelta

import schemathesis
from hypothesis import strategies as st

_NAMES = st.sampled_from(["app.py", "src/util.js", "lib/models.go", "README.md", "docs/notes.txt"])
_FILES = st.dictionaries(_NAMES, st.text(max_size=200), min_size=1, max_size=3)


def _tar_gz(files: dict[str, str]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _zip(files: dict[str, str]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return out.getvalue()


schemathesis.openapi.format(
    "binary", st.tuples(st.sampled_from([_tar_gz, _zip]), _FILES).map(lambda p: p[0](p[1]))
)


@schemathesis.hook
def before_call(context, case, kwargs):
    """A key that would expire before it is made expires in a year instead (every phase sends
    its cases through here)."""
    body = case.body
    if case.method != "POST" or not case.path.endswith("/api-keys") or not isinstance(body, dict):
        return
    if isinstance(body.get("expires_at"), str):
        try:
            moment = datetime.fromisoformat(body["expires_at"].replace("Z", "+00:00"))
        except ValueError:
            return  # (not a time: a negative case, left as drawn)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        if moment <= datetime.now(UTC) + timedelta(minutes=1):
            case.body = {**body, "expires_at": (datetime.now(UTC) + timedelta(days=365)).isoformat()}
