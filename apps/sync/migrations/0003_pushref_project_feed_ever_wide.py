"""A push ref belongs to a project (one ref in two projects named one memory); the feed keeps
whether a memory was ever team or org scope (narrowed to project scope, other projects'
replicas never heard of it again). The feed starts `ever_wide` from each memory's scope now: one
narrowed before this migration is not known to have been wider (no history of scopes says so).
Going back, a ref used in several projects keeps only its oldest memory's mapping."""

import django.db.models.deletion
from django.db import migrations, models

FEED = """
ALTER TABLE sync_memorychange ADD COLUMN ever_wide boolean NOT NULL DEFAULT false;
UPDATE sync_memorychange SET ever_wide = scope IN ('team', 'org');

CREATE OR REPLACE FUNCTION sync_record_memory_change() RETURNS trigger AS $$
DECLARE
    row_ memories_memory%ROWTYPE;
BEGIN
    IF TG_OP = 'DELETE' THEN row_ := OLD; ELSE row_ := NEW; END IF;
    INSERT INTO sync_memorychange
        (memory_id, organization_id, project_id, seq, xid, scope, owner_id, ever_shared, ever_wide,
         version, deleted)
    VALUES (row_.id, row_.organization_id, row_.project_id, nextval('sync_change_seq'),
            pg_current_xact_id(), row_.scope, row_.owner_id, row_.scope <> 'personal',
            row_.scope IN ('team', 'org'), row_.version, TG_OP = 'DELETE')
    ON CONFLICT (memory_id) DO UPDATE SET
        seq = EXCLUDED.seq, xid = EXCLUDED.xid, scope = EXCLUDED.scope, owner_id = EXCLUDED.owner_id,
        ever_shared = sync_memorychange.ever_shared OR EXCLUDED.ever_shared,
        ever_wide = sync_memorychange.ever_wide OR EXCLUDED.ever_wide,
        version = EXCLUDED.version, deleted = EXCLUDED.deleted, project_id = EXCLUDED.project_id;
    RETURN NULL;
END
$$ LANGUAGE plpgsql;
"""

FEED_BACK = """
CREATE OR REPLACE FUNCTION sync_record_memory_change() RETURNS trigger AS $$
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
ALTER TABLE sync_memorychange DROP COLUMN ever_wide;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("sync", "0002_push_refs"),
        ("tenants", "0002_data_exports"),
    ]

    operations = [
        migrations.RunSQL(
            FEED,
            FEED_BACK,
            state_operations=[
                migrations.AddField("memorychange", "ever_wide", models.BooleanField(default=False)),
            ],
        ),
        migrations.AddField(
            model_name="pushref",
            name="project",
            field=models.ForeignKey(
                null=True, on_delete=django.db.models.deletion.CASCADE, related_name="+", to="tenants.project"
            ),
        ),
        migrations.RunSQL(
            "UPDATE sync_pushref SET project_id = m.project_id FROM memories_memory m WHERE m.id = memory_id",
            migrations.RunSQL.noop,
        ),
        migrations.AlterField(
            model_name="pushref",
            name="project",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE, related_name="+", to="tenants.project"
            ),
        ),
        migrations.RemoveConstraint(model_name="pushref", name="pushref_unique"),
        migrations.RunSQL(
            migrations.RunSQL.noop,
            # (back to one ref per key and user: the refs' later uses go)
            """
            DELETE FROM sync_pushref later USING sync_pushref earlier
            WHERE later.ref = earlier.ref AND later.id > earlier.id
              AND later.api_key_id IS NOT DISTINCT FROM earlier.api_key_id
              AND later.user_id IS NOT DISTINCT FROM earlier.user_id
            """,
        ),
        migrations.AddConstraint(
            model_name="pushref",
            constraint=models.UniqueConstraint(
                fields=("api_key", "user", "project", "ref"), name="pushref_unique", nulls_distinct=False
            ),
        ),
    ]
