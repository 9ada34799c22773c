from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0011_confidence_propagation"),
    ]

    operations = [
        migrations.AddField(
            model_name="memory",
            name="stale_reason",
            field=models.CharField(
                blank=True,
                choices=[
                    ("", "Not stale"),
                    ("file_deleted", "A related file was deleted"),
                    ("changed_since_commit", "Related files changed since its commit"),
                ],
                default="",
                db_default="",
                max_length=24,
            ),
        ),
    ]
