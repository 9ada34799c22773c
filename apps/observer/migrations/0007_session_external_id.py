from django.db import migrations, models
from django.db.models import Q


class Migration(migrations.Migration):
    dependencies = [
        ("observer", "0006_session_scratchpad_stamp"),
    ]

    operations = [
        migrations.AddField(
            model_name="session",
            name="external_id",
            field=models.CharField(blank=True, max_length=200),
        ),
        migrations.AddConstraint(
            model_name="session",
            constraint=models.UniqueConstraint(
                condition=~Q(external_id=""),
                fields=("project", "external_id"),
                name="obs_session_external_unique",
            ),
        ),
    ]
