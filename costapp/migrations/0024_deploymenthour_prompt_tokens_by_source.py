# Nullable columns without a default: SQLite adds them in place
# (ALTER TABLE ADD COLUMN), so the deployment-hour triggers of 0012 and 0013
# stay.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("costapp", "0023_known_price_flag_and_rule"),
    ]

    operations = [
        migrations.AddField(
            model_name="deploymenthour",
            name=name,
            field=models.FloatField(blank=True, null=True),
        )
        for name in (
            "prompt_tokens_computed",
            "prompt_tokens_cache_hit",
            "prompt_tokens_transferred",
        )
    ]
