"""The keyword index now holds the character pairs of Chinese, Japanese and Korean runs
(codetokens.cjk_grams): memories stored before hold a whole run as one word, so they are indexed
again. Only memories with such text are touched (`manage.py reindex_keywords` does the same)."""

from django.db import migrations


def reindex(apps, schema_editor):
    from apps.memories.services import keyword_reindex_ids, memories_reindex_keywords

    ids = keyword_reindex_ids()
    for start in range(0, len(ids), 500):
        memories_reindex_keywords(ids[start : start + 500])


class Migration(migrations.Migration):
    # Each batch commits on its own (memories_reindex_keywords is atomic): one transaction
    # over every batch would hold the rows and their projects' term counts to the end.
    # Running it again after a failure is safe.
    atomic = False
    dependencies = [("memories", "0008_usage_last_counted_at")]

    operations = [migrations.RunPython(reindex, migrations.RunPython.noop)]
