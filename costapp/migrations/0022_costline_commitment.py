from typing import Any

from django.db import migrations, models

# SQLite adds this column by rebuilding the bill lines' table, and the rebuilt
# table has lost the row triggers of 0012 that mark its days' stored
# allocation stale: they are created again after it (PostgreSQL alters the
# table in place and keeps its statement triggers).
SQLITE_TRIGGERS = [
    """CREATE TRIGGER IF NOT EXISTS costapp_costline_shares_stale_ins
        AFTER INSERT ON costapp_costline BEGIN
        DELETE FROM costapp_costshareday WHERE day = date(NEW.period_start); END""",
    """CREATE TRIGGER IF NOT EXISTS costapp_costline_shares_stale_upd
        AFTER UPDATE ON costapp_costline BEGIN
        DELETE FROM costapp_costshareday
        WHERE day IN (date(NEW.period_start), date(OLD.period_start)); END""",
    """CREATE TRIGGER IF NOT EXISTS costapp_costline_shares_stale_del
        AFTER DELETE ON costapp_costline BEGIN
        DELETE FROM costapp_costshareday WHERE day = date(OLD.period_start); END""",
]


def sqlite_triggers_create(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "sqlite":
        for sql in SQLITE_TRIGGERS:
            schema_editor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [
        ("costapp", "0021_budget_forecast_metric"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="costline",
            name="costline_natural_key",
        ),
        migrations.AddField(
            model_name="costline",
            name="commitment",
            field=models.CharField(
                blank=True,
                choices=[
                    ("", "none"),
                    ("savings_plan", "savings plan"),
                    ("reserved", "reserved instance"),
                ],
                db_default="",
                default="",
                max_length=16,
            ),
        ),
        migrations.AddConstraint(
            model_name="costline",
            constraint=models.UniqueConstraint(
                fields=(
                    "source",
                    "account_id",
                    "granularity",
                    "period_start",
                    "service",
                    "usage_type",
                    "record_type",
                    "commitment",
                    "resource_id",
                    "tag_key",
                    "tag_value",
                    "currency",
                ),
                name="costline_natural_key",
            ),
        ),
        migrations.RunPython(sqlite_triggers_create, migrations.RunPython.noop),
    ]
