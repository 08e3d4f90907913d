"""Users in the product's groups, for tests that open pages."""

from __future__ import annotations

from django.contrib.auth.models import Group, User


def user_in(username: str, *groups: str, password: str | None = None) -> User:
    """A user in these groups (``finance``, ``tech lead``, ``admin``)."""
    user = User.objects.create_user(username, password=password)
    for name in groups:
        user.groups.add(Group.objects.get(name=name))
    return user
