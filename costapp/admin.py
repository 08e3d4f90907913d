from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.forms import AdminUserCreationForm, UserChangeForm
from django.contrib.auth.models import Group, User
from django.core.exceptions import ValidationError
from django.http import HttpRequest

from costapp import roles
from costapp.fleet.forms import DeploymentForm
from costapp.forms import NamedErrors, NamedModelForm
from costapp.models import (
    AuditEntry,
    Calibration,
    CostLine,
    Deployment,
    IngestRun,
    Pool,
    RateCard,
    Scenario,
)


class ProductAdmin(admin.ModelAdmin):
    """Every model page of the admin edits through the product's form base
    (costapp/forms.py): errors name the field and the value, and a name holds
    no line break, control character or bidi override, as in the pages and
    the fleet file (``validation.name_problem``)."""

    form = NamedModelForm


@admin.register(Deployment)
class DeploymentAdmin(ProductAdmin):
    # Same rules as the fleet file (costapp/fleet/validation.py).
    form = DeploymentForm
    list_display = [
        "name",
        "team",
        "engine",
        "model_name",
        "gpu_type",
        "mig_profile",
        "pool",
        "target_utilisation",
    ]
    list_filter = ["team", "engine", "gpu_type"]
    search_fields = ["name", "model_name", "team"]


@admin.register(Pool)
class PoolAdmin(ProductAdmin):
    list_display = [
        "name",
        "instance_type",
        "gpu_type",
        "gpus_per_node",
        "allocation_key",
    ]


@admin.register(RateCard)
class RateCardAdmin(ProductAdmin):
    list_display = [
        "gpu_type",
        "instance_type",
        "region",
        "kind",
        "price",
        "effective_from",
    ]
    list_filter = ["kind", "gpu_type", "region"]


@admin.register(CostLine)
class CostLineAdmin(ProductAdmin):
    list_display = [
        "period_start",
        "account_id",
        "service",
        "usage_type",
        "record_type",
        "amortized_cost",
        "unblended_cost",
        "estimated",
        "source",
    ]
    list_filter = ["source", "record_type", "estimated", "granularity"]
    date_hierarchy = "period_start"


@admin.register(IngestRun)
class IngestRunAdmin(ProductAdmin):
    list_display = [
        "created_at",
        "source",
        "target",
        "status",
        "steps_done",
        "steps_total",
        "rows_written",
        "api_requests",
    ]
    list_filter = ["source", "status"]


admin.site.register(Calibration, ProductAdmin)
admin.site.register(Scenario, ProductAdmin)


# --- who opens the admin site, and what they may do to users ----------------------


def _has_admin_site_permission(request: HttpRequest) -> bool:
    return roles.uses_admin_site(request.user)


class AdminSignInForm(NamedErrors, AdminAuthenticationForm):
    """The admin site's login admits whom the site admits
    (``roles.uses_admin_site``): Django's form asks for the staff flag, which
    the admin group does not set, and refused every admin at the door."""

    error_messages = {
        **AdminAuthenticationForm.error_messages,
        "invalid_login": (
            "Please enter the correct %(username)s and password of an account in "
            "the admin group. Note that both fields may be case-sensitive."
        ),
    }

    def confirm_login_allowed(self, user: Any) -> None:
        # Django's AuthenticationForm check (an inactive user is refused),
        # without the staff check AdminAuthenticationForm adds to it.
        super(AdminAuthenticationForm, self).confirm_login_allowed(user)
        if not roles.uses_admin_site(user):
            raise ValidationError(
                self.error_messages["invalid_login"],
                code="invalid_login",
                params={"username": self.username_field.verbose_name},
            )


admin.site.has_permission = _has_admin_site_permission  # type: ignore[method-assign]
admin.site.login_form = AdminSignInForm
admin.site.site_header = "costapp administration"


class UserNamedChangeForm(NamedErrors, UserChangeForm):
    pass


class UserNamedCreationForm(NamedErrors, AdminUserCreationForm):
    pass


class ProductUserAdmin(UserAdmin):
    """Users managed by the admin group. A non-superuser sees no superuser or
    per-user permission fields, picks groups only among the product's three,
    and cannot change a superuser: nobody can make anyone, themselves
    included, a superuser."""

    form = UserNamedChangeForm
    add_form = UserNamedCreationForm

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        if request.user.is_superuser:
            return super().get_fieldsets(request, obj)
        if obj is None:
            return (
                (None, {"fields": ("username", "password1", "password2")}),
                ("Groups", {"fields": ("groups",)}),
            )
        return (
            (None, {"fields": ("username", "password")}),
            ("Personal info", {"fields": ("first_name", "last_name", "email")}),
            ("Access", {"fields": ("is_active", "groups")}),
            ("Important dates", {"fields": ("last_login", "date_joined")}),
        )

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if request.user.is_superuser:
            return super().get_readonly_fields(request, obj)
        return ("last_login", "date_joined")

    def formfield_for_manytomany(
        self, db_field: Any, request: HttpRequest, **kwargs: Any
    ) -> Any:
        if db_field.name == "groups" and not request.user.is_superuser:
            kwargs["queryset"] = Group.objects.filter(name__in=roles.PRODUCT_GROUPS)
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def get_queryset(self, request: HttpRequest) -> Any:
        queryset = super().get_queryset(request)
        if request.user.is_superuser:
            return queryset
        return queryset.filter(is_superuser=False)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and obj.is_superuser and not request.user.is_superuser:
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser and super().has_delete_permission(request, obj)

    def save_model(
        self, request: HttpRequest, obj: Any, form: Any, change: bool
    ) -> None:
        if not request.user.is_superuser:
            # Belt and braces: the fields are not on the form, but a crafted
            # POST must not set them either.
            obj.is_superuser = False
            obj.is_staff = False
        super().save_model(request, obj, form, change)


admin.site.unregister(User)
admin.site.register(User, ProductUserAdmin)


class ProductGroupAdmin(GroupAdmin):
    form = NamedModelForm  # a group's name holds to the name rule too


admin.site.unregister(Group)
admin.site.register(Group, ProductGroupAdmin)


@admin.register(AuditEntry)
class AuditEntryAdmin(ProductAdmin):
    """Read-only: the log is append-only for everyone, superusers included."""

    list_display = ["at", "username", "action", "target", "status_code", "client_ip"]
    list_filter = ["action", "status_code"]
    search_fields = ["username", "action", "target", "path"]
    date_hierarchy = "at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
