"""Usage bookkeeping (access counts, the decay clock) moves off the memory row to a narrow table.

Every /context call bumped these columns on each memory it injected. A memory row is ~2.8 KB with
its vector inline, so such an update was rarely HOT and re-inserted the row into the HNSW, GIN
and B-tree indexes; a MemoryUsage row has only its primary key, and fillfactor 70 leaves room
on each page for HOT updates. Existing counts and decay clocks are copied over first.
"""

import django.db.models.deletion
from django.db import migrations, models

COPY = """
INSERT INTO memories_memoryusage (memory_id, access_count, uncorrected_access_count, last_accessed_at)
SELECT id, access_count, uncorrected_access_count, last_accessed_at FROM memories_memory
WHERE access_count > 0 OR uncorrected_access_count > 0 OR last_accessed_at > created_at
"""

COPY_BACK = """
UPDATE memories_memory m SET access_count = u.access_count,
    uncorrected_access_count = u.uncorrected_access_count, last_accessed_at = u.last_accessed_at
FROM memories_memoryusage u WHERE u.memory_id = m.id
"""


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0004_embedding_stored_inline"),
    ]

    operations = [
        migrations.CreateModel(
            name="MemoryUsage",
            fields=[
                (
                    "memory",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="usage_row",
                        serialize=False,
                        to="memories.memory",
                    ),
                ),
                ("access_count", models.PositiveIntegerField(default=0)),
                ("uncorrected_access_count", models.PositiveIntegerField(default=0)),
                ("last_accessed_at", models.DateTimeField(blank=True, null=True)),
            ],
        ),
        migrations.RunSQL(
            "ALTER TABLE memories_memoryusage SET (fillfactor = 70)",
            "ALTER TABLE memories_memoryusage RESET (fillfactor)",
        ),
        migrations.RunSQL(COPY, COPY_BACK),
        migrations.RemoveField(model_name="memory", name="access_count"),
        migrations.RemoveField(model_name="memory", name="last_accessed_at"),
        migrations.RemoveField(model_name="memory", name="uncorrected_access_count"),
    ]
