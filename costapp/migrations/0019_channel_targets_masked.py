"""A webhook channel's target_masked held its URL in clear (tokens in its
query included) beside the encrypted settings that also hold it. Masked here
like every new row: scheme://host/…/ and the last 4 characters of a long
enough last path segment or query value.

One-way: the clear copy is gone, and the URL stays in the encrypted settings
(config_encrypted), where delivery reads it; the reverse leaves the masks.
The mask is copied, not imported, so later changes to the app's code do not
change what this migration did."""

import re

from django.db import migrations

_URL = re.compile(r"^(https?)://(?:[^/?#]*@)?([^/?#@]*)(.*)$", re.IGNORECASE | re.DOTALL)
KEEP = 4


def _masked(url):
    match = _URL.match(url)
    if not match:
        return "*" * min(len(url), 20)
    scheme, host, rest = match.groups()
    last = re.split(r"[/?&=#]", rest.rstrip("/"))[-1]
    if len(last) >= KEEP * 4:
        return f"{scheme}://{host}/…/{last[-KEEP:]}"
    return f"{scheme}://{host}" + ("/…" if rest.strip("/") else "")


def targets_mask(apps, schema_editor):
    Channel = apps.get_model("costapp", "Channel")
    # Email addresses are shown (they send nothing by themselves); a Slack
    # target was already masked ("…" in it).
    for channel in Channel.objects.exclude(kind="email").exclude(target_masked=""):
        if "…" in channel.target_masked:
            continue
        channel.target_masked = _masked(channel.target_masked)
        channel.save(update_fields=["target_masked"])


class Migration(migrations.Migration):
    dependencies = [
        ("costapp", "0018_closed_periods_and_late_pages"),
    ]

    operations = [
        migrations.RunPython(targets_mask, migrations.RunPython.noop),
    ]
