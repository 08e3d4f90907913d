"""Alerts pages; each loads, validates a form, calls a selector or a service,
renders. Tech leads edit rules and silences; admins also manage channels."""

from __future__ import annotations

from datetime import timedelta

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone

from analytics.errors import InvalidInput
from costapp.access import requires
from costapp.alerts import selectors, services
from costapp.alerts.forms import AlertRuleForm, ChannelForm, SilenceForm
from costapp.filters import filters_read
from costapp.models import AlertRule, Channel, Delivery
from costapp.validation import int_in


def _needs(request: HttpRequest, permission: str) -> None:
    """An action's own right, beyond the page's write right (deleting a rule
    needs delete_alertrule, not only change_alertrule)."""
    if not request.user.has_perm(permission):
        request.missing_permission = permission  # type: ignore[attr-defined]
        raise PermissionDenied


def _rule_initial(rule: AlertRule) -> dict[str, object]:
    initial: dict[str, object] = {
        name: getattr(rule, name)
        for name in (
            "name", "metric", "grain", "scope", "scope_name", "condition",
            "direction", "ratio", "threshold", "for_periods", "keep_firing_for",
            "repeat_minutes", "min_requests", "include_traffic", "notify_resolved",
        )
    }  # fmt: skip
    initial["channels"] = list(rule.channels.all())
    return initial


def _rule_post(
    request: HttpRequest, form: AlertRuleForm, instance: AlertRule | None
) -> tuple[HttpResponse | None, object]:
    """Save, or backtest without saving; returns (redirect, backtest)."""
    if not form.is_valid():
        return None, None
    rule = form.rule(instance)
    if request.POST.get("action") == "backtest":
        return None, selectors.alert_rule_backtest(rule=rule, now=timezone.now())
    try:
        saved = services.alert_rule_save(
            rule=rule, channels=list(form.cleaned_data["channels"])
        )
    except InvalidInput as exc:
        form.add_error("name", str(exc))
        return None, None
    messages.success(request, f"rule {saved.name!r} saved")
    return redirect("alerts:rule", rule_id=saved.pk), None


@requires("costapp.view_alertrule", write="costapp.add_alertrule")
def rules(request: HttpRequest) -> HttpResponse:
    form = AlertRuleForm(request.POST or None)
    backtest = None
    if request.method == "POST":
        done, backtest = _rule_post(request, form, None)
        if done:
            return done
    return render(
        request,
        "alerts/rules.html",
        {
            "rules": selectors.rules_list(),
            "form": form,
            "backtest": backtest,
            "can_write": request.user.has_perm("costapp.add_alertrule"),
        },
    )


@requires("costapp.view_alertrule", write="costapp.change_alertrule")
def rule(request: HttpRequest, rule_id: int) -> HttpResponse:
    row = get_object_or_404(AlertRule, pk=rule_id)
    if request.method == "POST" and request.POST.get("action") == "acknowledge":
        # An acknowledgement is a silence of one alert until it resolves.
        _needs(request, "costapp.add_silence")
        scope_name = request.POST.get("scope_name", "")[:200]
        if services.alert_acknowledge(
            rule=row,
            scope_name=scope_name,
            by=request.user.get_username(),
            now=timezone.now(),
        ):
            messages.success(
                request,
                f"{scope_name} acknowledged: repeats are not sent until it resolves",
            )
        else:
            messages.error(request, f"scope_name={scope_name!r}: not an active alert")
        return redirect("alerts:rule", rule_id=row.pk)
    if request.method == "POST" and request.POST.get("action") == "delete":
        _needs(request, "costapp.delete_alertrule")
        services.alert_rule_delete(rule=row)
        messages.success(request, f"rule {row.name!r} deleted")
        return redirect("alerts:rules")
    form = AlertRuleForm(request.POST or None, initial=_rule_initial(row))
    backtest = None
    if request.method == "POST":
        done, backtest = _rule_post(request, form, row)
        if done:
            return done
    else:
        backtest = selectors.alert_rule_backtest(rule=row, now=timezone.now())
    return render(
        request,
        "alerts/rule.html",
        {
            "rule": row,
            "form": form,
            "backtest": backtest,
            "states": row.states.order_by("scope_name"),
            "events": row.events.all()[:50],
            "can_write": request.user.has_perm("costapp.change_alertrule"),
            "can_acknowledge": request.user.has_perms(
                ["costapp.change_alertrule", "costapp.add_silence"]
            ),
        },
    )


@requires("costapp.view_channel", write="costapp.manage_channels")
def channels(request: HttpRequest) -> HttpResponse:
    form = ChannelForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            if Channel.objects.filter(name=data["name"]).exists():
                # The form makes a channel: saving over one (its kind, its
                # target, a fleet file's row) by typing its name is a mistake.
                raise InvalidInput(
                    "name", data["name"], "a channel of that name exists"
                )
            created = services.channel_upsert(
                name=data["name"], kind=data["kind"], config=data["config"]
            )
        except InvalidInput as exc:
            form.add_error(None, str(exc))
        else:
            if created.secret:
                # Shown once: the receiver needs it to verify signatures.
                messages.warning(
                    request,
                    f"signing secret for {created.channel.name}: {created.secret} "
                    "(shown once; copy it now)",
                )
            return redirect("alerts:channel", channel_id=created.channel.pk)
    return render(
        request,
        "alerts/channels.html",
        {
            "channels": selectors.channels_list(),
            "form": form,
            "can_write": request.user.has_perm("costapp.manage_channels"),
            "can_rotate": request.user.has_perm("costapp.rotate_channel_secrets"),
            "can_delete": request.user.has_perm("costapp.delete_channel"),
        },
    )


def _channel_edit(
    request: HttpRequest, form: ChannelForm, row: Channel
) -> HttpResponse | None:
    """Save the edit form; a blank target keeps the stored one."""
    if not form.is_valid():
        return None
    data = form.cleaned_data
    try:
        updated = services.channel_update(
            channel=row, name=data["name"], kind=data["kind"], config=data["config"]
        )
    except InvalidInput as exc:
        form.add_error(None, str(exc))
        row.refresh_from_db()
        return None
    messages.success(request, f"channel {updated.channel.name!r} saved")
    if updated.secret:
        messages.warning(
            request,
            f"signing secret for {updated.channel.name}: {updated.secret} "
            "(shown once; copy it now)",
        )
    return redirect("alerts:channel", channel_id=row.pk)


@requires("costapp.view_channel", write="costapp.manage_channels")
def channel(request: HttpRequest, channel_id: int) -> HttpResponse:
    row = get_object_or_404(Channel, pk=channel_id)
    outcome = None
    form = ChannelForm(channel=row, initial={"name": row.name, "kind": row.kind})
    if request.method == "POST":
        action = request.POST.get("action")
        if action == "edit":
            form = ChannelForm(request.POST, channel=row)
            done = _channel_edit(request, form, row)
            if done:
                return done
        elif action == "test":
            outcome = services.channel_test_send(channel=row)
        elif action == "enable":
            services.channel_enable(channel=row)
            return redirect("alerts:channel", channel_id=row.pk)
        elif action == "rotate" and row.kind == "webhook":
            _needs(request, "costapp.rotate_channel_secrets")
            secret = services.channel_secret_create(channel=row)
            messages.warning(
                request,
                f"new signing secret: {secret} (shown once; both are sent until "
                "the old one is retired)",
            )
            return redirect("alerts:channel", channel_id=row.pk)
        elif action == "retire" and row.kind == "webhook":
            _needs(request, "costapp.rotate_channel_secrets")
            services.channel_secret_retire(channel=row)
            return redirect("alerts:channel", channel_id=row.pk)
        elif action == "delete":
            _needs(request, "costapp.delete_channel")
            services.channel_delete(channel=row)
            return redirect("alerts:channels")
        else:
            messages.error(
                request,
                f"action={action!r}: edit, test, enable, rotate, retire or delete",
            )
        row.refresh_from_db()
    return render(
        request,
        "alerts/channel.html",
        {
            "channel": row,
            "form": form,
            "outcome": outcome,
            "secret": services.channel_secret_masked(row)
            if row.kind == "webhook"
            else "",
            "deliveries": selectors.notification_log(channel_id=row.pk, limit=50),
            "can_write": request.user.has_perm("costapp.manage_channels"),
        },
    )


@requires("costapp.view_silence", write="costapp.add_silence")
def silences(request: HttpRequest) -> HttpResponse:
    now = timezone.now()
    end = request.POST.get("end") if request.method == "POST" else None
    form = SilenceForm(
        request.POST if request.method == "POST" and end is None else None
    )
    if end is not None:
        _needs(request, "costapp.change_silence")
        try:
            silence_id = int_in(end, field="end", minimum=1, maximum=2**62)
            if not services.silence_end(silence_id=silence_id, now=now):
                raise InvalidInput("end", end, "not an active silence")
        except InvalidInput as exc:
            messages.error(request, str(exc))
        else:
            return redirect("alerts:silences")
    elif request.method == "POST":
        if form.is_valid():
            data = form.cleaned_data
            services.silence_create(
                scope=data["scope"],
                name=data["name"],
                starts_at=now,
                ends_at=now + timedelta(hours=data["hours"]),
                comment=data["comment"],
                by=request.user.get_username(),
            )
            messages.success(request, f"{data['scope']} {data['name']} silenced")
            return redirect("alerts:silences")
    return render(
        request,
        "alerts/silences.html",
        {
            "silences": selectors.silences_active(now=now),
            "silenceable": selectors.silenceable_all(),
            "form": form,
            "can_write": request.user.has_perm("costapp.add_silence"),
        },
    )


@requires("costapp.view_delivery")
def log(request: HttpRequest) -> HttpResponse:
    status = request.GET.get("status") or None
    statuses = [s for s, _ in Delivery.STATUSES]
    if status is not None and status not in statuses:
        messages.error(
            request,
            str(InvalidInput("status", status, f"one of {', '.join(statuses)}"))
            + "; showing every status",
        )
        status = None
    # The log is live: its presets run to now (today labelled partial).
    filters = filters_read(request.GET, through_today=True)
    names = None
    if filters.deployments is not None:
        names = [*filters.deployments, *([filters.team] if filters.team else [])]
    return render(
        request,
        "alerts/log.html",
        {
            "deliveries": selectors.notification_log(
                status=status, start=filters.start, end=filters.end, scope_names=names
            ),
            "filters": filters,
            "status": status,
            "statuses": statuses,
        },
    )
