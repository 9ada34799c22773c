from django.db import migrations, models


def mark_declared_groups(apps, schema_editor):
    """A stored group that is not the work unit's parent was named by the client."""
    Session = apps.get_model("observer", "Session")
    declared = []
    rows = Session.objects.exclude(parallel_group="").values_list("id", "parallel_group", "work_unit")
    for session_id, group, work_unit in rows.iterator():
        hierarchy = (work_unit or {}).get("hierarchy") or []
        if group != "/".join(hierarchy[:-1])[:300]:
            declared.append(session_id)
    Session.objects.filter(id__in=declared).update(parallel_declared=True)


class Migration(migrations.Migration):
    dependencies = [
        ("observer", "0007_session_external_id"),
    ]

    operations = [
        migrations.AddField(
            model_name="session",
            name="parallel_declared",
            field=models.BooleanField(default=False),
        ),
        migrations.RunPython(mark_declared_groups, migrations.RunPython.noop),
    ]
