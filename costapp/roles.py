"""The product's three roles, declared once.

A user's rights are the union of their groups. ``roles_sync`` makes the groups'
permissions exactly these sets; it runs after every ``migrate`` (a data
migration would find no permission rows on a fresh database and silently attach
nothing) and as ``manage.py roles_sync``. The same matrix is written by hand in
docs/security.md and in tests/foundation/test_roles.py: change all three.
"""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser, Group, Permission, User
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

FINANCE = "finance"
TECH_LEAD = "tech lead"
ADMIN = "admin"
PRODUCT_GROUPS = (FINANCE, TECH_LEAD, ADMIN)

_FINANCE = frozenset(
    {
        "costapp.view_overview",
        "costapp.view_bills",
        "costapp.export_bills",
        "costapp.view_costline",
        "costapp.view_ratecard",
        "costapp.view_billingperiodsource",
        "costapp.view_unitcostfigure",
        "costapp.view_budget",
        # Finance owns the money plan: it sets and edits budgets (issue 24).
        "costapp.add_budget",
        "costapp.change_budget",
        # Saved views (issue 27): each user keeps, renames and deletes their
        # own; the views check ownership, the rights say who has any.
        "costapp.view_savedview",
        "costapp.add_savedview",
        "costapp.change_savedview",
        "costapp.delete_savedview",
    }
)

_TECH_LEAD = _FINANCE | {
    "costapp.view_fleet",
    "costapp.run_whatif",
    "costapp.view_deployment",
    "costapp.change_deployment",
    "costapp.view_pool",
    "costapp.view_deploymenthour",
    "costapp.view_devicehour",
    "costapp.view_histogramhour",
    "costapp.view_enginediscovery",
    "costapp.view_ingestrun",
    "costapp.view_scenario",
    "costapp.add_scenario",
    "costapp.view_calibration",
    "costapp.add_calibration",
    "costapp.view_alertrule",
    "costapp.add_alertrule",
    "costapp.change_alertrule",
    "costapp.delete_alertrule",
    "costapp.view_silence",
    "costapp.add_silence",
    "costapp.change_silence",
    "costapp.view_channel",
    # On-call owns its routes: create, edit, test and enable channels; an
    # admin keeps deleting them and rotating their secrets.
    "costapp.manage_channels",
    "costapp.add_channel",
    "costapp.change_channel",
    "costapp.view_delivery",
}

_ADMIN = _TECH_LEAD | {
    "costapp.run_backfill",
    "costapp.import_focus",
    "costapp.manage_sources",
    "costapp.delete_channel",
    "costapp.rotate_channel_secrets",
    "costapp.delete_silence",
    "costapp.manage_users",
    "costapp.view_auditentry",
    "costapp.add_deployment",
    "costapp.delete_deployment",
    "costapp.add_pool",
    "costapp.change_pool",
    "costapp.delete_pool",
    "costapp.add_ratecard",
    "costapp.change_ratecard",
    "costapp.delete_ratecard",
    "costapp.change_scenario",
    "costapp.delete_scenario",
    "costapp.change_calibration",
    "costapp.delete_calibration",
    "costapp.delete_budget",
    "costapp.change_ingestrun",
    "costapp.delete_billingperiodsource",
    "auth.view_user",
    "auth.add_user",
    "auth.change_user",
    "auth.view_group",
}

ROLES: dict[str, frozenset[str]] = {
    FINANCE: _FINANCE,
    TECH_LEAD: frozenset(_TECH_LEAD),
    ADMIN: frozenset(_ADMIN),
}


def uses_admin_site(user: User | AnonymousUser) -> bool:
    """Who signs in to and opens the admin site: an active member of the admin
    group (or a superuser). Django's staff flag is neither needed nor enough:
    the groups above are the one place a role is given."""
    return bool(
        user.is_active
        and (user.is_superuser or user.groups.filter(name=ADMIN).exists())
    )


def _permission_rows(names: frozenset[str]) -> list[Permission]:
    wanted = {tuple(name.split(".", 1)) for name in names}
    rows = [
        perm
        for perm in Permission.objects.select_related("content_type").filter(
            codename__in={codename for _app, codename in wanted}
        )
        if (perm.content_type.app_label, perm.codename) in wanted
    ]
    found = {(p.content_type.app_label, p.codename) for p in rows}
    if missing := sorted(".".join(pair) for pair in wanted - found):
        # Attaching fewer rights than declared would look like success.
        raise ImproperlyConfigured(
            f"roles_sync: no permission rows for {', '.join(missing)}; run migrate"
        )
    return rows


@transaction.atomic
def roles_sync() -> dict[str, int]:
    """Create the product groups and set each one's permissions to exactly its
    role's set. Returns the number of permissions per group."""
    counts = {}
    for name, perms in ROLES.items():
        group, _created = Group.objects.get_or_create(name=name)
        group.permissions.set(_permission_rows(perms))
        counts[name] = len(perms)
    return counts
