"""Every page of the demo says it is a demo; a real installation never does."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.support.users import user_in

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]


@pytest.mark.parametrize("demo", [True, False])
def test_the_demo_banner_shows_only_in_the_demo(
    client: Client, settings: object, demo: bool
) -> None:
    settings.COSTAPP_DEMO = demo  # type: ignore[attr-defined]
    client.force_login(user_in("lead", "tech lead"))
    for url in ("/", "/fleet/", "/alerts/"):
        page = client.get(url).content.decode()
        assert ('id="demo-banner"' in page) is demo, url
