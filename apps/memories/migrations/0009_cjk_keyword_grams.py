"""The keyword index now holds the character pairs of Chinese, Japanese and Korean runs
(codetokens.cjk_grams): memories stored before hold a whole run as one word, so they are indexed
again. Only memories with such text are touched."""

from django.db import migrations

# Han (extension A, unified, compatibility), kana and hangul syllables, as codetokens reads them
# (the supplementary planes' Han too).
_CJK = "[\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003ffff]"


def reindex(apps, schema_editor):
    from apps.memories.services import memories_reindex_keywords

    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM memories_memory WHERE concat_ws(' ', content, citation_text,"
            " array_to_string(tags, ' '), array_to_string(related_files, ' '),"
            " array_to_string(related_modules, ' '), payload::text) ~ %s ORDER BY id",
            [_CJK],
        )
        ids = [row[0] for row in cursor.fetchall()]
    for start in range(0, len(ids), 500):
        memories_reindex_keywords(ids[start : start + 500])


class Migration(migrations.Migration):
    # Each batch commits on its own (memories_reindex_keywords is atomic): one transaction
    # over every batch would hold the rows and their projects' term counts to the end.
    # Running it again after a failure is safe.
    atomic = False
    dependencies = [("memories", "0008_usage_last_counted_at")]

    operations = [migrations.RunPython(reindex, migrations.RunPython.noop)]
