from django.db import migrations, models

FEED = """
CREATE SEQUENCE sync_change_seq;
CREATE TABLE sync_memorychange (
    memory_id uuid PRIMARY KEY,
    organization_id uuid NOT NULL,
    project_id uuid NOT NULL,
    seq bigint NOT NULL,
    xid xid8 NOT NULL,
    scope varchar(12) NOT NULL,
    owner_id bigint,
    ever_shared boolean NOT NULL,
    version integer NOT NULL,
    deleted boolean NOT NULL DEFAULT false
);
CREATE INDEX sync_memorychange_feed ON sync_memorychange (organization_id, xid, seq);

CREATE FUNCTION sync_record_memory_change() RETURNS trigger AS $$
DECLARE
    row_ memories_memory%ROWTYPE;
BEGIN
    IF TG_OP = 'DELETE' THEN row_ := OLD; ELSE row_ := NEW; END IF;
    INSERT INTO sync_memorychange
        (memory_id, organization_id, project_id, seq, xid, scope, owner_id, ever_shared, version, deleted)
    VALUES (row_.id, row_.organization_id, row_.project_id, nextval('sync_change_seq'),
            pg_current_xact_id(), row_.scope, row_.owner_id, row_.scope <> 'personal', row_.version,
            TG_OP = 'DELETE')
    ON CONFLICT (memory_id) DO UPDATE SET
        seq = EXCLUDED.seq, xid = EXCLUDED.xid, scope = EXCLUDED.scope, owner_id = EXCLUDED.owner_id,
        ever_shared = sync_memorychange.ever_shared OR EXCLUDED.ever_shared,
        version = EXCLUDED.version, deleted = EXCLUDED.deleted, project_id = EXCLUDED.project_id;
    RETURN NULL;
END
$$ LANGUAGE plpgsql;

-- Bookkeeping that devices need not hear about (access counts, search index) fires nothing.
CREATE TRIGGER sync_memory_insert AFTER INSERT ON memories_memory
    FOR EACH ROW EXECUTE FUNCTION sync_record_memory_change();
CREATE TRIGGER sync_memory_delete AFTER DELETE ON memories_memory
    FOR EACH ROW EXECUTE FUNCTION sync_record_memory_change();
CREATE TRIGGER sync_memory_update AFTER UPDATE ON memories_memory
    FOR EACH ROW WHEN (
        OLD.version IS DISTINCT FROM NEW.version
        OR OLD.embedding_status IS DISTINCT FROM NEW.embedding_status
        OR OLD.embedding_model IS DISTINCT FROM NEW.embedding_model
        OR OLD.confidence IS DISTINCT FROM NEW.confidence
        OR OLD.needs_review IS DISTINCT FROM NEW.needs_review
        OR OLD.user_verified IS DISTINCT FROM NEW.user_verified
        OR OLD.pinned IS DISTINCT FROM NEW.pinned
        OR OLD.deprecated IS DISTINCT FROM NEW.deprecated
        OR OLD.disputed IS DISTINCT FROM NEW.disputed
        OR OLD.stale_at IS DISTINCT FROM NEW.stale_at
        OR OLD.project_id IS DISTINCT FROM NEW.project_id
        OR OLD.scope IS DISTINCT FROM NEW.scope
        OR OLD.owner_id IS DISTINCT FROM NEW.owner_id
    ) EXECUTE FUNCTION sync_record_memory_change();

-- Memories stored before the feed existed start in it as of now.
INSERT INTO sync_memorychange
    (memory_id, organization_id, project_id, seq, xid, scope, owner_id, ever_shared, version)
SELECT id, organization_id, project_id, nextval('sync_change_seq'), pg_current_xact_id(), scope, owner_id,
       scope <> 'personal', version
FROM memories_memory;
"""

DROP = """
DROP TRIGGER IF EXISTS sync_memory_insert ON memories_memory;
DROP TRIGGER IF EXISTS sync_memory_delete ON memories_memory;
DROP TRIGGER IF EXISTS sync_memory_update ON memories_memory;
DROP FUNCTION IF EXISTS sync_record_memory_change();
DROP TABLE IF EXISTS sync_memorychange;
DROP SEQUENCE IF EXISTS sync_change_seq;
"""


class Migration(migrations.Migration):
    initial = True
    dependencies = [("memories", "0002_hnsw_index")]

    operations = [
        migrations.RunSQL(FEED, DROP),
        migrations.CreateModel(
            name="MemoryChange",
            fields=[
                ("memory_id", models.UUIDField(primary_key=True, serialize=False)),
                ("organization_id", models.UUIDField()),
                ("project_id", models.UUIDField()),
                ("seq", models.BigIntegerField()),
                ("xid", models.CharField(editable=False, max_length=20)),
                ("scope", models.CharField(max_length=12)),
                ("owner_id", models.BigIntegerField(null=True)),
                ("ever_shared", models.BooleanField()),
                ("version", models.PositiveIntegerField()),
                ("deleted", models.BooleanField(default=False)),
            ],
            options={"managed": False, "db_table": "sync_memorychange"},
        ),
    ]
