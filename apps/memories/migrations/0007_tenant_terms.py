"""The search paths find candidates through each organization's own lexemes and file paths.

One GIN index over every tenant's `search_vector` hands the keyword statement the posting lists
of its terms across the whole table; the tenant filter comes after. A search in one project of
100K memories spread over 20 projects (5 organizations) walked ~26K postings to keep ~1.6K, and
the walk grows with every tenant added, not with the searching tenant's own memories. File
paths are worse: tenants working on the same kind of codebase share `src/index.ts`.

Two generated columns, each the memory's own values tagged with its organization (the first
12 hex digits of its id and a colon): `tenant_terms` (the lexemes of `search_vector`, without
positions or weights) and `tenant_files` (`related_files`). GIN indexes over them serve the
keyword path, step injection's search short-circuit, the graph path and the co-mention
neighbours; the one over `search_vector` goes (`memory_related_files` stays, for the ORM's
per-project file filters). A query's values take the same tag (`memories_tenant_any`,
`memories_tenant_paths`), so a search walks its own organization's postings only; a tag
shared by two organizations would cost time, never correctness (the tenant filter still
applies). BM25 and `ts_rank` read `search_vector`. The model maps neither column: nothing in
Python writes them, PostgreSQL keeps them in step.

The functions name no function of their own schema (the tag is written out in each): a restore
runs them with an empty `search_path`. A word over 2034 bytes is left out of `tenant_terms`
(with the tag it would pass the 2047 a tsvector word holds). Adding the columns rewrites the
table under an exclusive lock, with every index rebuilt: on a large table, a maintenance window.
"""

from django.db import migrations

_TAG = "left(replace(org::text, '-', ''), 12) || ':'"

FUNCTIONS = rf"""
CREATE FUNCTION memories_tenant_lexemes(org uuid, tsv tsvector) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT array_to_tsvector(ARRAY(
        SELECT {_TAG} || lexeme FROM unnest(tsvector_to_array(tsv)) AS lexeme
        WHERE octet_length(lexeme) <= 2034
    ))
$$;

CREATE FUNCTION memories_tenant_any(org uuid, lexemes text[]) RETURNS tsquery
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(string_agg(
        '''' || replace(replace({_TAG} || lexeme, '\', '\\'), '''', '''''') || '''',
        ' | '
    ), '')::tsquery
    FROM unnest(lexemes) AS lexeme WHERE lexeme <> ''
$$;

CREATE FUNCTION memories_tenant_paths(org uuid, paths varchar[]) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ARRAY(SELECT {_TAG} || path FROM unnest(paths) AS path)
$$;

ALTER TABLE memories_memory
    ADD COLUMN tenant_terms tsvector
        GENERATED ALWAYS AS (memories_tenant_lexemes(organization_id, search_vector)) STORED,
    ADD COLUMN tenant_files text[]
        GENERATED ALWAYS AS (memories_tenant_paths(organization_id, related_files)) STORED;

CREATE INDEX memory_tenant_terms ON memories_memory USING gin (tenant_terms) WITH (fastupdate = false);
CREATE INDEX memory_tenant_files ON memories_memory USING gin (tenant_files) WITH (fastupdate = false);

ANALYZE memories_memory;
"""

REVERSE = """
DROP INDEX IF EXISTS memory_tenant_files;
DROP INDEX IF EXISTS memory_tenant_terms;
ALTER TABLE memories_memory DROP COLUMN IF EXISTS tenant_files, DROP COLUMN IF EXISTS tenant_terms;
DROP FUNCTION IF EXISTS memories_tenant_paths(uuid, varchar[]);
DROP FUNCTION IF EXISTS memories_tenant_any(uuid, text[]);
DROP FUNCTION IF EXISTS memories_tenant_lexemes(uuid, tsvector);
"""


class Migration(migrations.Migration):
    dependencies = [("memories", "0006_memory_tokens")]

    operations = [
        migrations.RunSQL(FUNCTIONS, REVERSE),
        migrations.RemoveIndex(model_name="memory", name="memory_search_vector"),
    ]
