"""`memorysaas stale-check` end to end: the installed command in a git checkout, against a live
daphne on the test database, reports the files changed since the commit memories carry."""

from __future__ import annotations

from apps.memories.models import Memory
from apps.memories.services import memory_create
from apps.memories.validation import MemoryDraft
from tests.clients.cli import git, key_env, run


def test_stale_check_marks_the_memories_about_files_changed_since_their_commit(server, home, tmp_path, alice):
    env = key_env(server["url"], alice, ["observer:write", "memories:read"])
    repo = tmp_path / "repo"
    (repo / "shop").mkdir(parents=True)
    (repo / "shop" / "models.py").write_text("class Order:\n    pass\n")
    (repo / "shop" / "views.py").write_text("def show():\n    return None\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "first")
    first = git(repo, "rev-parse", "HEAD")

    def learned(content: str, path: str, commit: str) -> Memory:
        draft = MemoryDraft(type="gotcha", content=content, related_files=[path], commit_sha=commit)
        return memory_create(project=alice.project, actor=alice.principal, draft=draft)

    models = learned("Order totals are cached per request.", "shop/models.py", first)
    views = learned("show() returns nothing on purpose.", "shop/views.py", first)
    elsewhere = learned("Other history.", "shop/models.py", "0123456789abcdef0123456789abcdef01234567")

    (repo / "shop" / "models.py").write_text("class Order:\n    total = 0\n")
    git(repo, "commit", "-qam", "second")
    checked = run(home, "stale-check", cwd=repo, env=env)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.strip() == f"{str(models.id)[:8]}  stale: files changed since {first[:12]}"
    assert "0123456789ab: not in this clone" in checked.stderr and "1 memories marked stale" in checked.stderr
    stale = {m.id for m in Memory.objects.filter(stale_at__isnull=False)}
    assert stale == {models.id} and views.id not in stale and elsewhere.id not in stale
    again = run(home, "stale-check", cwd=repo, env=env)
    assert again.returncode == 0 and again.stdout == "" and "0 memories marked stale" in again.stderr
