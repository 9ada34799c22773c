"""The keyword path finds candidates through each organization's own lexemes.

One GIN index over every tenant's `search_vector` hands the keyword statement the posting lists
of its terms across the whole table; the tenant filter comes after. A search in one project of
100K memories spread over 20 projects (5 organizations) walked ~26K postings to keep ~1.6K, and
the walk grows with every tenant added, not with the searching tenant's own memories.

`tenant_terms` is a generated column: the memory's lexemes, each prefixed by its
organization's tag (the first 12 hex digits of its id and a colon), without positions or
weights; the GIN index over it replaces the one over `search_vector`. A query's lexemes take the
same tag (`memories_tenant_any`), so a search reads its own organization's postings only (a tag
shared by two organizations would cost time, never correctness: the tenant filter still
applies). BM25 and `ts_rank` go on reading `search_vector`. The model does not map the column
(nothing in Python reads or writes it); PostgreSQL keeps it in step with `search_vector`.
"""

from django.db import migrations

FUNCTIONS = r"""
CREATE FUNCTION memories_tenant_tag(org uuid) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT left(replace(org::text, '-', ''), 12) || ':'
$$;

CREATE FUNCTION memories_tenant_lexemes(org uuid, tsv tsvector) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT array_to_tsvector(ARRAY(
        SELECT memories_tenant_tag(org) || lexeme FROM unnest(tsvector_to_array(tsv)) AS lexeme
    ))
$$;

CREATE FUNCTION memories_tenant_any(org uuid, lexemes text[]) RETURNS tsquery
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(string_agg(
        '''' || replace(replace(memories_tenant_tag(org) || lexeme, '\', '\\'), '''', '''''') || '''',
        ' | '
    ), '')::tsquery
    FROM unnest(lexemes) AS lexeme WHERE lexeme <> ''
$$;

ALTER TABLE memories_memory ADD COLUMN tenant_terms tsvector
    GENERATED ALWAYS AS (memories_tenant_lexemes(organization_id, search_vector)) STORED;

CREATE INDEX memory_tenant_terms ON memories_memory USING gin (tenant_terms) WITH (fastupdate = false);

ANALYZE memories_memory;
"""

REVERSE = """
DROP INDEX IF EXISTS memory_tenant_terms;
ALTER TABLE memories_memory DROP COLUMN IF EXISTS tenant_terms;
DROP FUNCTION IF EXISTS memories_tenant_any(uuid, text[]);
DROP FUNCTION IF EXISTS memories_tenant_lexemes(uuid, tsvector);
DROP FUNCTION IF EXISTS memories_tenant_tag(uuid);
"""


class Migration(migrations.Migration):
    dependencies = [("memories", "0006_memory_tokens")]

    operations = [
        migrations.RunSQL(FUNCTIONS, REVERSE),
        migrations.RemoveIndex(model_name="memory", name="memory_search_vector"),
    ]
