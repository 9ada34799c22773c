"""The `memorysaas` command end to end, as a person runs it: the installed console script in a
temporary HOME, against a live daphne on the test database (what a test creates is committed, so
the server sees it: `transactional_db`).

Logging in goes through the real device flow — the command polls while a test user approves the
code on the /device page over HTTP — and then the device's own key remembers, searches, syncs
and, with the server stopped, searches the offline replica.
"""

from __future__ import annotations

import stat

from apps.graph.models import IndexJob
from apps.memories.models import Memory
from apps.tenants.models import Device
from tests.clients.cli import git, key_env, login, run
from tests.e2e.conftest import stop


def test_login_remember_search_sync_and_search_offline(server, home, bob):
    url = server["url"]
    logged_in = login(url, home, bob)
    assert f"Logged in to {bob.org.slug}/{bob.project.slug}" in logged_in.stdout
    device = Device.objects.get(user=bob.user)
    assert device.name == "test-laptop" and "sync" in device.api_key.scopes
    credentials = home / ".config" / "memorysaas" / "credentials.json"
    assert stat.S_IMODE(credentials.stat().st_mode) == 0o600
    assert device.api_key.prefix in credentials.read_text()

    stored = run(home, "remember", "verify_jwt rejects tokens skewed over 30 s.", "--type", "gotcha",
                 "--file", "auth/tokens.py")  # fmt: skip
    assert stored.returncode == 0, stored.stderr
    memory = Memory.objects.get(content="verify_jwt rejects tokens skewed over 30 s.")
    assert memory.project_id == bob.project.id and memory.related_files == ["auth/tokens.py"]
    assert stored.stdout.startswith(f"Stored {memory.id}")

    online = run(home, "search", "verifyJwt")
    assert online.returncode == 0, online.stderr
    assert online.stdout.startswith(f"{str(memory.id)[:8]}  gotcha")

    context = run(home, "context", "check the jwt clock skew", "--file", "auth/tokens.py")
    assert context.returncode == 0, context.stderr
    assert f"Memory #{str(memory.id)[:8]}" in context.stdout

    synced = run(home, "sync")
    assert synced.returncode == 0, synced.stderr
    assert "pulled=1" in synced.stdout and "(replica: 1 memories)" in synced.stdout
    Device.objects.filter(id=device.id, last_sync_at__isnull=False).get()
    watched = run(home, "sync", "--watch", "--interval", "1", "--times", "2")
    assert watched.stdout.count("pushed=0 pulled=0") == 2, watched.stderr

    exported = run(home, "export", "--format", "markdown")
    assert (
        "## gotcha" in exported.stdout
        and "- verify_jwt rejects tokens skewed over 30 s. (`auth/tokens.py`)" in exported.stdout
    )
    assert f"export MEMORYSAAS_KEY=msk_{device.api_key.prefix}_" in run(home, "env").stdout

    stop(server["process"])
    offline = run(home, "search", "verify_jwt")
    assert offline.returncode == 0, offline.stderr
    assert "searching the offline replica" in offline.stderr
    assert offline.stdout.startswith(f"{str(memory.id)[:8]}  gotcha")
    offline_export = run(home, "export", "--format", "json")
    assert offline_export.returncode == 0 and str(memory.id) in offline_export.stdout
    queued = run(home, "remember", "Offline note about the zqxj cache.")
    assert queued.returncode == 0 and queued.stdout.startswith("Queued local:")
    assert run(home, "search", "--offline", "zqxj").stdout.startswith("local:")


def test_commands_without_a_login_say_how_to_log_in(home):
    refused = run(home, "--project", "00000000-0000-0000-0000-000000000000", "search", "--offline", "x")
    assert refused.returncode == 0  # an offline search needs no key
    missing = run(home, "--project", "00000000-0000-0000-0000-000000000000", "remember", "x")
    assert missing.returncode == 1 and "memorysaas login" in missing.stderr


def test_index_sends_the_whole_tree_then_only_what_changed(server, home, tmp_path, alice):
    env = key_env(server["url"], alice, ["graph:write", "memories:read"])
    repo = tmp_path / "repo"
    (repo / "shop").mkdir(parents=True)
    (repo / "shop" / "models.py").write_text("class Order:\n    pass\n")
    (repo / "shop" / "views.py").write_text(
        "from shop.models import Order\n\ndef show():\n    return Order()\n"
    )
    (repo / "logo.png").write_bytes(b"\x89PNG\0\0binary")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "first")

    full = run(home, "index", cwd=repo, env=env)
    assert full.returncode == 0, full.stderr
    assert full.stdout.startswith("Uploaded 2 files")  # (the image is not text: not sent)
    assert set(IndexJob.objects.values_list("kind", flat=True)) == {"full"}

    (repo / "shop" / "views.py").write_text("from shop.models import Order\n\ndef show():\n    return None\n")
    (repo / "shop" / "cart.py").write_text("from shop.models import Order\n")
    (repo / "shop" / "models.py").rename(repo / "shop" / "orders.py")
    incremental = run(home, "index", cwd=repo, env=env)
    assert incremental.returncode == 0, incremental.stderr
    assert "Sent 3 files, 1 deleted" in incremental.stdout
    job = IndexJob.objects.filter(kind="incremental").get()
    assert sorted(f["path"] for f in job.batch["files"]) == [
        "shop/cart.py",
        "shop/orders.py",
        "shop/views.py",
    ]
    assert job.batch["deleted"] == ["shop/models.py"]

    assert run(home, "index", cwd=repo, env=env).stdout.startswith("Nothing changed since")
    # an edit undone is sent too: the server holds the edit, not the commit's version
    git(repo, "checkout", "--", "shop/views.py")
    assert "Sent 1 files, 0 deleted" in run(home, "index", cwd=repo, env=env).stdout
    views = IndexJob.objects.filter(kind="incremental").order_by("-id").first().batch["files"]
    assert [f["path"] for f in views] == ["shop/views.py"] and "return Order()" in views[0]["content"]
