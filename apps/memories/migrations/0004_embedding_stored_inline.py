"""Memories' vectors stored in the row, not in the TOAST table.

pgvector gives `vector` EXTERNAL storage, and a memory row (a 384-d vector is 1.5 KB, its
tsvector and content another ~1.3 KB) passes PostgreSQL's 2 KB toast threshold, so every
vector went out of line: each distance the search computes from a row (the dense path's own
rows, the cosine of every keyword and graph candidate) fetched it back through the TOAST index
(60 keyword candidates: +3–6 ms against +1–2 ms with the vectors in the row). MAIN storage keeps
the vector in the row unless nothing else can give way, and a 4 KB toast target keeps typical
rows whole and their tsvector uncompressed. Rows already stored move in when next written;
`VACUUM FULL memories_memory` moves them all at once.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("memories", "0003_gin_without_pending_list")]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE memories_memory ALTER COLUMN embedding SET STORAGE MAIN;"
            " ALTER TABLE memories_memory SET (toast_tuple_target = 4080)",
            "ALTER TABLE memories_memory ALTER COLUMN embedding SET STORAGE EXTERNAL;"
            " ALTER TABLE memories_memory RESET (toast_tuple_target)",
        )
    ]
