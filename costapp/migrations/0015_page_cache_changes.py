"""The record of writes the page cache reads (costapp/pagecache.py).

The trigger function and the triggers themselves are installed after every
``migrate`` (``costapp.apps``), on every costapp table then present, so a
table a later migration adds is covered too. Here: the two tables, the
statement sequence and the total row.
"""

from typing import Any

from django.db import migrations, models

FORWARD = [
    "CREATE SEQUENCE IF NOT EXISTS costapp_datachange_statement",
    "INSERT INTO costapp_datachangetotal (id, transactions, last_statement) "
    "VALUES (1, 0, 0) ON CONFLICT (id) DO NOTHING",
]
BACKWARD = [
    "DROP FUNCTION IF EXISTS costapp_data_changed() CASCADE",
    "DROP SEQUENCE IF EXISTS costapp_datachange_statement",
]


def _run(schema_editor: Any, statements: list[str]) -> None:
    if schema_editor.connection.vendor == "postgresql":
        for sql in statements:
            schema_editor.execute(sql)


def changes_create(apps: Any, schema_editor: Any) -> None:
    _run(schema_editor, FORWARD)


def changes_drop(apps: Any, schema_editor: Any) -> None:
    _run(schema_editor, BACKWARD)


class Migration(migrations.Migration):
    dependencies = [
        ("costapp", "0014_econ_month_forecasts"),
    ]

    operations = [
        migrations.CreateModel(
            name="DataChange",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True,
                        primary_key=True,
                        serialize=False,
                        verbose_name="ID",
                    ),
                ),
                ("txid", models.BigIntegerField(unique=True)),
                ("last_statement", models.BigIntegerField()),
            ],
        ),
        migrations.CreateModel(
            name="DataChangeTotal",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True,
                        primary_key=True,
                        serialize=False,
                        verbose_name="ID",
                    ),
                ),
                ("transactions", models.BigIntegerField(default=0)),
                ("last_statement", models.BigIntegerField(default=0)),
            ],
        ),
        migrations.RunPython(changes_create, changes_drop),
    ]
