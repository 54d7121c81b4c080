"""Browser tests of the console: Debian's chromium driven by Playwright for Python (no
browser is downloaded: `executable_path` is the system's), one browser for the whole
session, against the real app served by a real threaded HTTP server with the
in-process worker, a real SMTP server and a real HTTP receiver on loopback.

`CS_SCREENSHOTS=docs/console` makes the tests that show a page save it at desktop and
phone width into that directory (`just screenshots`)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from cs_daemon.runtime import Runtime
from tests.conftest import TenantHandle, auth
from tests.support.sse import AppServer

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
AXE = (ROOT / "tests" / "support" / "vendor" / "axe.min.js").read_text()
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
SCREENSHOTS = os.environ.get("CS_SCREENSHOTS")
TIMEOUT_MS = 15_000


@pytest.fixture(scope="session")
def browser():
    if not os.path.exists(CHROMIUM):
        subprocess.run([str(ROOT / "sdk" / "js" / "scripts" / "ensure-browser.sh")], check=True)
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
    yield chromium
    chromium.close()
    playwright.stop()


@dataclass
class Console:
    """The daemon under test and what a test needs around it."""

    rt: Runtime
    server: AppServer
    tenant: TenantHandle
    browser: object
    client: object          # a Flask test client of the same app, for API set-up

    @property
    def url(self) -> str:
        return self.server.url

    def page(self, viewport: dict = DESKTOP):
        context = self.browser.new_context(viewport=viewport, base_url=self.url)
        context.set_default_timeout(TIMEOUT_MS)
        return context.new_page()

    def api(self, method: str, path: str, key: str | None = None, **kw):
        resp = self.client.open(path, method=method, headers=auth(key or self.tenant.key), **kw)
        assert resp.status_code < 300, (path, resp.status_code, resp.json)
        return resp.json

    def sign_in_with_key(self, page, key: str | None = None) -> None:
        page.goto("/console/sign-in")
        page.get_by_label("API key", exact=True).fill(key or self.tenant.key)
        page.get_by_role("button", name="Sign in with key").click()
        page.wait_for_url("**/console/review")


@pytest.fixture
def console(settings, clock, mailbox, make_tenant, browser):
    rt = Runtime(settings.model_copy(update={"smtp_url": mailbox.url, "allow_private_webhook_urls": True,
                                             "mail_from": "Console <console@acme.example>"}), clock)
    from webapp import create_app

    app = create_app(runtime=rt)
    server = AppServer(app)
    rt.settings = rt.settings.model_copy(update={"cs_public_url": server.url})
    rt.start_worker()
    with rt.session() as s:
        from cs_daemon.tenants import service as tenants

        made = tenants.create(s, name="Acme", owner_email="owner@acme.example", now=rt.now(), plan_tier="growth")
    try:
        yield Console(rt, server, TenantHandle(rt, made), browser, app.test_client())
    finally:
        rt.stop_worker()
        server.close()


def wait_for(predicate, timeout: float = 15.0, what: str = "condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = predicate()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def axe_violations(page) -> list[dict]:
    """Serious and critical violations axe-core finds on the page as it is now."""
    page.add_script_tag(content=AXE)
    found = page.evaluate("async () => (await axe.run(document, {resultTypes: ['violations']})).violations")
    return [{"id": v["id"], "impact": v["impact"], "help": v["help"],
             "nodes": [n["target"] for n in v["nodes"]][:5]}
            for v in found if v["impact"] in ("serious", "critical")]


def check_page(page, name: str) -> None:
    """No serious or critical axe violation, at desktop and phone width; screenshots of
    both when CS_SCREENSHOTS names a directory."""
    for label, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
        page.set_viewport_size(viewport)
        violations = axe_violations(page)
        assert not violations, f"{name} at {label} width:\n" + json.dumps(violations, indent=1)
        if SCREENSHOTS:
            folder = ROOT / SCREENSHOTS
            folder.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(folder / f"{name}-{label}.png"), full_page=True)
    page.set_viewport_size(DESKTOP)


LINK = re.compile(r"(http://\S+/console/auth\?token=[A-Za-z0-9_-]+)")


def sign_in_link(mailbox, to: str) -> str:
    """The link of the newest sign-in mail to `to` the SMTP server accepted."""
    def found():
        for got in reversed(mailbox.received):
            if to in got.rcpt_tos:
                text = got.message.get_body(("plain",)).get_content()
                match = LINK.search(text)
                if match:
                    return match.group(1)
        return None

    return wait_for(found, what=f"a sign-in mail to {to}")
