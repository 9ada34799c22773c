"""`memorysaas conflicts` and `memorysaas resolve`, run as a person runs them (the installed
command, a HOME of its own) against a live daphne on the test database."""

from __future__ import annotations

from memorysaas_client.replica import Replica

from apps.memories.models import Memory
from apps.memories.services import memory_update
from apps.sync.models import SyncConflict
from tests.clients.cli import run
from tests.memories.factories import make_memory


def _server_edit(memory, person, **changes):
    return memory_update(memory=Memory.objects.get(id=memory.id), actor=person.principal, changes=changes)


def test_the_command_line_lists_and_resolves_conflicts(server, home, alice, bob, tmp_path):
    memory = make_memory(alice, content="Cache TTL is 60 s.")
    db = str(tmp_path / "cli.db")
    settings = ["--url", server["url"], "--key", bob.key, "--project", str(alice.project.id), "--db", db]
    assert run(home, *settings, "sync").returncode == 0
    laptop = Replica(db, project_id=str(alice.project.id))
    laptop.edit(str(memory.id), content="Cache TTL is 300 s.")
    _server_edit(memory, alice, content="Cache TTL is 120 s.")
    synced = run(home, *settings, "sync")
    assert "conflicts=1" in synced.stdout, synced.stdout + synced.stderr
    conflict = SyncConflict.objects.get(memory_id=memory.id)

    listed = run(home, *settings, "conflicts")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith(f"{str(conflict.id)[:8]}  memory {str(memory.id)[:8]}  content")
    assert "base:   Cache TTL is 60 s." in listed.stdout
    assert "mine:   Cache TTL is 300 s." in listed.stdout and "theirs: Cache TTL is 120 s." in listed.stdout

    stale = run(home, *settings, "resolve", str(conflict.id)[:8], "--keep", "mine", "--base-version", "1")
    assert stale.returncode == 1 and "changed since you looked" in stale.stderr
    done = run(
        home,
        *settings,
        "resolve",
        str(conflict.id)[:8],
        "--content",
        "Cache TTL is 120 s (300 s in staging).",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"resolved {str(conflict.id)[:8]}: kept merge (version")
    assert Memory.objects.get(id=memory.id).content == "Cache TTL is 120 s (300 s in staging)."
    again = run(home, *settings, "resolve", str(conflict.id)[:8], "--keep", "theirs")
    assert again.returncode == 1 and "already resolved" in again.stderr
    laptop = Replica(db, project_id=str(alice.project.id))
    assert laptop.conflicts() == [] and laptop.get(str(memory.id))["content"].endswith("in staging).")
