"""The HNSW index for 384-dimension vectors (the local MiniLM model); other dimensions get
theirs from `manage.py reembed` (apps.memories.vectors.ensure_hnsw_index)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("memories", "0001_initial")]

    operations = [
        migrations.RunSQL(
            "CREATE INDEX IF NOT EXISTS memory_embedding_hnsw_384 ON memories_memory "
            "USING hnsw ((embedding::vector(384)) vector_cosine_ops) "
            "WITH (m = 16, ef_construction = 64) WHERE embedding_dims = 384",
            "DROP INDEX IF EXISTS memory_embedding_hnsw_384",
        ),
    ]
