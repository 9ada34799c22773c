"""The memories' GIN indexes without a pending list.

With `fastupdate` (PostgreSQL's default) new entries wait in an unsorted pending list that
every search scans linearly until a vacuum merges it: right after 100K inserts the co-mention
lookup over `related_files` took 9.6 ms for 173 rows instead of well under one. Searches read
these indexes on every query; inserts pay a little more instead. The existing pending list is
merged here.
"""

from django.contrib.postgres.indexes import GinIndex
from django.db import migrations

INDEXES = {"memory_related_files": "related_files", "memory_search_vector": "search_vector"}


def _alter(fastupdate: str) -> str:
    return "; ".join(
        f"ALTER INDEX {name} SET (fastupdate = {fastupdate}); SELECT gin_clean_pending_list('{name}'::regclass)"
        for name in INDEXES
    )


class Migration(migrations.Migration):
    dependencies = [("memories", "0002_hnsw_index")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(_alter("false"), _alter("true"))],
            state_operations=[
                op
                for name, column in INDEXES.items()
                for op in (
                    migrations.RemoveIndex(model_name="memory", name=name),
                    migrations.AddIndex(
                        model_name="memory", index=GinIndex(fields=[column], name=name, fastupdate=False)
                    ),
                )
            ],
        )
    ]
