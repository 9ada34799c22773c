from django.db import migrations

BULK_TABLES = ("graph_graphnode", "graph_graphedge", "graph_graphclosure", "graph_codechunk")


class Migration(migrations.Migration):
    """Storage settings for the tables a full index fills by COPY.

    Chunk content is stored out of line but not compressed: compressing it (pglz, the only
    method this server has) was 4% of PostgreSQL's work in a full index, for 2 MB saved on
    Django's 5 MB of chunks. Vacuum does not truncate the tables: a re-index deletes a project's
    rows and writes them again, and autovacuum truncating the emptied tail holds the table's
    strongest lock, which made the next index wait a second per table before autovacuum was
    cancelled; the freed pages are reused by the next rows instead of returned to the disk."""

    dependencies = [("graph", "0004_node_project_unconstrained")]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE graph_codechunk ALTER COLUMN content SET STORAGE EXTERNAL",
            "ALTER TABLE graph_codechunk ALTER COLUMN content SET STORAGE EXTENDED",
        ),
        *(
            migrations.RunSQL(
                f"ALTER TABLE {table} SET (vacuum_truncate = false)", f"ALTER TABLE {table} RESET (vacuum_truncate)"
            )
            for table in BULK_TABLES
        ),
    ]
