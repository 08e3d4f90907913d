"""Give an account-month back: delete its claim and that source's lines.

The one source per account and billing month rule refuses the other source
while a claim stands; switching a month from Cost Explorer to FOCUS (or back)
is this command, then the other source's import.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from analytics.errors import InvalidInput
from costapp.days import utc_midnight
from costapp.models import BillingPeriodSource, CostLine
from costapp.validation import account_id_in, date_in


def _month(value: str) -> date:
    try:
        return date_in(f"{value}-01", field="month").replace(day=1)
    except InvalidInput:
        raise CommandError(f"month={value[:80]!r}: expected YYYY-MM") from None


class Command(BaseCommand):
    help = (
        "Release an account-month claimed by a bill source (deleting that "
        "source's lines for the month), so the other source may import it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--account", required=True)
        parser.add_argument("--month", required=True, type=_month, help="YYYY-MM")
        parser.add_argument(
            "--yes", action="store_true", help="delete; without it, only report"
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            account = account_id_in(opts["account"], field="account")
        except InvalidInput as exc:
            # FOCUS sub-accounts need not be 12 digits; any stored id is accepted.
            if not BillingPeriodSource.objects.filter(
                account_id=opts["account"]
            ).exists():
                raise CommandError(str(exc)) from None
            account = opts["account"]
        month: date = opts["month"]
        claim = BillingPeriodSource.objects.filter(
            account_id=account, billing_period=month
        ).first()
        if claim is None:
            raise CommandError(f"account {account} {month:%Y-%m}: no claim to release")
        first = utc_midnight(month)
        following = (first + timedelta(days=32)).replace(day=1)
        lines = CostLine.objects.filter(
            source=claim.source,
            account_id=account,
            period_start__gte=first,
            period_start__lt=following,
        )
        count = lines.count()
        what = (
            f"account {account} {month:%Y-%m} from {claim.get_source_display()}: "
            f"{count} line(s)"
        )
        if not opts["yes"]:
            self.stdout.write(f"would release {what}; rerun with --yes")
            return
        with transaction.atomic():
            lines.delete()
            claim.delete()
        self.stdout.write(f"released {what} deleted")
