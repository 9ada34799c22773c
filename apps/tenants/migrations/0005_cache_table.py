"""The table of Django's database cache (settings.CACHE_TABLE), used when REDIS_URL is unset.

The same columns `manage.py createcachetable` makes; created here whatever the cache in use, so
a deployment that drops Redis later finds it in place."""

from django.db import migrations

CREATE = """
CREATE TABLE IF NOT EXISTS memorysaas_cache (
    cache_key varchar(255) NOT NULL PRIMARY KEY,
    value text NOT NULL,
    expires timestamp with time zone NOT NULL
);
CREATE INDEX IF NOT EXISTS memorysaas_cache_expires ON memorysaas_cache (expires);
"""


class Migration(migrations.Migration):
    dependencies = [("tenants", "0004_device_authorization")]

    operations = [migrations.RunSQL(CREATE, reverse_sql="DROP TABLE IF EXISTS memorysaas_cache")]
