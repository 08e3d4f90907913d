"""Email: HTML and plain text, the subject says deployment, metric, value and
baseline. SMTP 5xx is permanent, 4xx and connection failures are retried.

Headers are built from one-line values only: the names in the subject are
``body_one_line``'s, and an address holding a line break is refused before
anything is sent (Django would raise; a header of its own must never reach
the message)."""

from __future__ import annotations

import smtplib
from typing import Any

from django.conf import settings
from django.core.mail import EmailMultiAlternatives, get_connection
from django.template.loader import render_to_string

from analytics.errors import shown
from costapp.alerts.payload import headline, subject, value_text
from costapp.alerts.transports.base import Transport, TransportError, body_one_line
from costapp.formatting import duration
from costapp.models import Delivery
from costapp.validation import name_problem

CONSOLE = "django.core.mail.backends.console.EmailBackend"


class Email(Transport):
    def connection(self) -> Any:
        # The demo's channel prints to the console; real ones use EMAIL_*.
        if self.config.get("backend") == "console":
            return get_connection(CONSOLE)
        return get_connection(timeout=settings.EMAIL_TIMEOUT)

    def notify(self, *, delivery: Delivery, body: dict[str, Any]) -> int | None:
        to = [str(address) for address in self.config["to"]]
        for address in to:
            problem = name_problem(address)
            if problem:
                raise TransportError(f"to={shown(address)}: {problem}", permanent=True)
        body = body_one_line(body)
        events = [
            {
                **e,
                "headline": headline(e),
                "value_text": value_text(e["value"], e["metric"]),
                "baseline_text": value_text(e["baseline"], e["metric"])
                if e["baseline"] is not None
                else "",
                "late_text": duration(e["late_s"]) if e.get("late_s") else "",
            }
            for e in body["events"]
        ]
        context = {"body": body, "events": events}
        message = EmailMultiAlternatives(
            subject=subject(body),
            body=render_to_string("alerts/email/body.txt", context),
            from_email=settings.DEFAULT_FROM_EMAIL,
            to=to,
            headers={"X-Costapp-Notification": delivery.webhook_id},
            connection=self.connection(),
        )
        message.attach_alternative(
            render_to_string("alerts/email/body.html", context), "text/html"
        )
        try:
            message.send()
        except smtplib.SMTPRecipientsRefused as exc:
            codes = [code for code, _msg in exc.recipients.values()]
            permanent = all(code >= 500 for code in codes)
            raise TransportError(
                f"recipients refused ({', '.join(map(str, codes))})",
                permanent=permanent,
                status=codes[0] if codes else None,
            ) from None
        except smtplib.SMTPResponseException as exc:
            raise TransportError(
                f"SMTP {exc.smtp_code}",
                permanent=exc.smtp_code >= 500,
                status=exc.smtp_code,
            ) from None
        except (TimeoutError, smtplib.SMTPException, OSError) as exc:
            raise TransportError(
                f"SMTP connection failed: {type(exc).__name__}"
            ) from None
        return None
