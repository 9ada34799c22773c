"""Where the `memorysaas` command keeps its login and its state, and how a setting is chosen.

The login (service URL, the device's API key, its organization and project) is one JSON file in
the user's config directory (platformdirs: `~/.config/memorysaas/credentials.json` on Linux),
readable by its owner only (0600, in a 0700 directory): it holds a key. Replicas and the index
state live in the user's data directory. A setting comes from the command line, else the
environment (`MEMORYSAAS_URL`, `MEMORYSAAS_KEY`, `MEMORYSAAS_PROJECT`), else the login.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import platformdirs

APP = "memorysaas"
DEFAULT_URL = "http://127.0.0.1:8000"
CREDENTIALS = "credentials.json"


def config_dir() -> Path:
    return Path(platformdirs.user_config_dir(APP, appauthor=False))


def data_dir() -> Path:
    return Path(platformdirs.user_data_dir(APP, appauthor=False))


@dataclass(frozen=True)
class Profile:
    url: str = DEFAULT_URL
    key: str = ""
    project_id: str = ""
    project_slug: str = ""
    organization_slug: str = ""
    device_id: str = ""

    def with_overrides(self, *, url: str | None, key: str | None, project: str | None) -> Profile:
        """The command line's values over the environment's over the login's."""
        env = os.environ
        return replace(
            self,
            url=(url or env.get("MEMORYSAAS_URL") or self.url).rstrip("/"),
            key=key or env.get("MEMORYSAAS_KEY") or self.key,
            project_id=project or env.get("MEMORYSAAS_PROJECT") or self.project_id,
        )

    def replica_path(self) -> Path:
        """The project's offline replica: one libSQL file per service and project."""
        host = self.url.split("://", 1)[-1].replace("/", "_").replace(":", "_")
        return data_dir() / "replicas" / host / f"{self.project_id}.db"


def load() -> Profile:
    """The saved login, or an empty profile when there is none."""
    path = config_dir() / CREDENTIALS
    try:
        saved: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        return Profile()
    known = {name: str(value) for name, value in saved.items() if name in Profile.__dataclass_fields__}
    return Profile(**known)


def save(profile: Profile) -> Path:
    """Write the login for the owner's eyes only, replacing the file in one step (a reader never
    sees half of it)."""
    directory = config_dir()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(directory, 0o700)
    path = directory / CREDENTIALS
    partial = directory / f".{CREDENTIALS}.{os.getpid()}"
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        json.dump(asdict(profile), handle, indent=2)
    os.replace(partial, path)
    return path


def forget() -> bool:
    path = config_dir() / CREDENTIALS
    if not path.exists():
        return False
    path.unlink()
    return True


def read_state(name: str) -> dict[str, Any]:
    """A small JSON document of the command's own (what was indexed when), or {}."""
    try:
        return json.loads((data_dir() / f"{name}.json").read_text())
    except FileNotFoundError:
        return {}


def write_state(name: str, state: dict[str, Any]) -> None:
    directory = data_dir()
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / f".{name}.json.{os.getpid()}"
    partial.write_text(json.dumps(state, indent=2))
    os.replace(partial, directory / f"{name}.json")
