"""The console in a real browser (docs/console.md): sign in with an emailed link, review,
edit and approve a message and watch it reach the receiver; a viewer's console offers
no change and a forged form is refused; the playbook editor shows the API's errors and
a live count; the kill switch stops a delivery; no page has a serious accessibility
violation."""

from __future__ import annotations

import json
import math
from datetime import timedelta

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from cs_daemon.customers import snapshots
from cs_daemon.delivery import service as delivery
from cs_daemon.delivery.models import Delivery

from tests.browser.conftest import check_page, sign_in_link, wait_for


def _world(console, *, channel: str = "webhook", receiver=None, body: str = "Hello Ada") -> dict:
    """A customer, a playbook, a webhook endpoint at the receiver, a planned intervention."""
    console.api("POST", "/api/track", json={"events": [
        {"user_id": "u1", "event": "$identify", "properties": {"email": "ada@example.com", "name": "Ada Lovelace"}},
        {"user_id": "u2", "event": "$identify", "properties": {"name": "Grace Hopper", "plan": "pro"}}]})
    playbook = console.api("POST", "/api/playbooks", json={"name": "Welcome back"})["id"]
    if receiver is not None:
        console.api("POST", "/api/webhooks/endpoints", json={"url": receiver.url})
    iv = console.api("POST", "/api/interventions", json={"user_id": "u1", "playbook_id": playbook, "channel": channel,
                                                         "message_body": body})["id"]
    return {"playbook": playbook, "intervention": iv}


def _history(console, user_id: str, days: int) -> None:
    """Daily score snapshots of the last `days` days, as ingest and the sweep leave them."""
    now = console.rt.now()
    with console.rt.session(console.tenant.id) as s:
        for back in range(days, 0, -1):
            wave = math.sin(back / 5)
            s.add(snapshots.ScoreSnapshot(
                tenant_id=console.tenant.id, user_id=user_id, day=(now - timedelta(days=back)).date(),
                health=55 + 25 * wave, activation_score=60, engagement_score=45 + 30 * math.cos(back / 4),
                expansion_score=20, lifecycle_stage="engaged", risk_level="low"))


def _card(page, iv: str):
    return page.locator(f"#iv-{iv}")


def _channel_posts(receiver) -> list[dict]:
    """What the webhook channel delivered (the endpoint also gets the events it subscribes to)."""
    return [json.loads(r.body) for r in receiver.requests if r.headers.get("X-Service-Channel") == "webhook"]


def test_a_member_signs_in_by_link_edits_approves_and_sees_it_delivered(console, mailbox, receiver):
    made = _world(console, receiver=receiver)
    console.tenant.add_member("ed@acme.example", "editor")
    page = console.page()
    page.goto("/console/review")
    page.wait_for_url("**/console/sign-in**")                  # no session: the sign-in page
    page.get_by_label("Email", exact=True).fill("ed@acme.example")
    page.get_by_role("button", name="Send sign-in link").click()
    assert "a sign-in link is on its way" in page.locator("main").inner_text()

    page.goto(sign_in_link(mailbox, "ed@acme.example"))
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/console/review")
    assert "ed@acme.example · editor" in page.locator("header.top").inner_text()

    card = _card(page, made["intervention"])
    assert "Hello Ada" in card.locator("[data-message]").inner_text()
    card.get_by_text("Edit message").click()
    card.get_by_label("New message").fill("Dear Ada, {{name}} your reports are ready.")
    card.get_by_role("button", name="Save message").click()
    expect(card.locator("[data-message]")).to_have_text("Dear Ada, {{name}} your reports are ready.")
    expect(card.locator(".checks li.fail strong")).to_have_text(["placeholders"])     # the checks ran again
    card.get_by_text("Edit message").click()
    card.get_by_label("New message").fill("Dear Ada, your reports are ready.")
    card.get_by_role("button", name="Save message").click()
    expect(card.locator("[data-message]")).to_have_text("Dear Ada, your reports are ready.")
    expect(card.locator(".checks li.pass")).to_have_count(4)

    card.get_by_role("button", name="Approve").click()
    expect(card.locator("[data-status]")).to_have_attribute("data-status", "delivered")   # the card polls its status
    [post] = _channel_posts(receiver)
    assert post["intervention_id"] == made["intervention"] and post["message_body"] == "Dear Ada, your reports are ready."

    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/console/sign-in")
    page.goto("/console/review")
    page.wait_for_url("**/console/sign-in**")                  # the session is over


def test_a_viewer_sees_no_review_control_and_a_forged_form_is_refused(console):
    made = _world(console)
    viewer = console.tenant.issue(role="viewer", permissions=("read",))
    page = console.page()
    console.sign_in_with_key(page, viewer)
    card = _card(page, made["intervention"])
    assert "Hello Ada" in card.inner_text()
    for name in ("Approve", "Reject", "Pause", "Flag"):
        assert card.get_by_role("button", name=name).count() == 0
    assert card.get_by_text("Edit message").count() == 0

    token = page.locator("body").get_attribute("data-csrf")
    forged = page.request.post(f"/console/interventions/{made['intervention']}/approve", form={"csrf_token": token})
    assert forged.status == 403 and "(forbidden)" in forged.text()
    no_token = page.request.post(f"/console/interventions/{made['intervention']}/approve")
    assert no_token.status == 403
    [item] = [i for i in console.api("GET", "/api/interventions")["interventions"] if i["id"] == made["intervention"]]
    assert item["status"] == "planned"


def test_a_form_without_its_csrf_token_is_refused_even_for_an_admin(console):
    made = _world(console)
    page = console.page()
    console.sign_in_with_key(page)
    refused = page.request.post(f"/console/interventions/{made['intervention']}/approve", form={"csrf_token": "x"})
    assert refused.status == 403
    [item] = [i for i in console.api("GET", "/api/interventions")["interventions"] if i["id"] == made["intervention"]]
    assert item["status"] == "planned"


def test_the_playbook_editor_shows_the_api_errors_and_a_live_count(console):
    made = _world(console)
    page = console.page()
    console.sign_in_with_key(page)
    page.goto(f"/console/playbooks/{made['playbook']}")
    entry = page.get_by_label("Entry conditions (JSON)")
    entry.fill('{"field": "shoe_size", "op": "eq", "value": 42}')
    count = page.locator("#preview-count")
    count.get_by_role("alert").wait_for()
    assert "invalid entry_conditions" in count.inner_text() and "shoe_size" in count.inner_text()
    page.get_by_role("button", name="Save playbook").click()
    assert "invalid entry_conditions" in page.get_by_role("alert").first.inner_text()

    entry = page.get_by_label("Entry conditions (JSON)")
    entry.fill('{"field": "traits.plan", "op": "eq", "value": "pro"}')
    expect(page.locator("#preview-count [data-count]")).to_have_text("1")
    entry.fill("{}")
    expect(page.locator("#preview-count [data-count]")).to_have_text("2")
    page.get_by_role("button", name="Save playbook").click()
    page.get_by_text("Saved.").wait_for()
    page.get_by_role("button", name="Activate").click()
    page.get_by_text("Status changed.").wait_for()
    [stored] = console.api("GET", "/api/playbooks")["playbooks"]
    assert stored["status"] == "active" and stored["entry_conditions"] == {}


def test_the_kill_switch_flipped_in_the_console_stops_a_delivery(console, receiver):
    made = _world(console, receiver=receiver)
    page = console.page()
    console.sign_in_with_key(page)
    page.goto("/console/settings")
    page.get_by_role("button", name="Turn the kill switch on").click()
    assert page.locator("[data-kill-switch]").inner_text().startswith("on")

    page.goto("/console/review")
    _card(page, made["intervention"]).get_by_role("button", name="Approve").click()
    _card(page, made["intervention"]).locator("[data-status='approved']").wait_for()
    with console.rt.session(console.tenant.id) as s:
        [held] = [d.id for d in s.scalars(select(Delivery).where(Delivery.subject_id == made["intervention"]))]
    assert delivery.attempt(console.rt, held) is None          # the sweep's try: held back
    assert _channel_posts(receiver) == []

    page.goto("/console/settings")
    page.get_by_role("button", name="Turn the kill switch off").click()
    assert page.locator("[data-kill-switch]").inner_text() == "off"
    delivery.attempt(console.rt, held)                         # the sweep's next try
    wait_for(lambda: _channel_posts(receiver), what="the delivery after the kill switch is off")
    assert [p["intervention_id"] for p in _channel_posts(receiver)] == [made["intervention"]]


def test_review_shortcuts_move_and_approve_from_the_keyboard(console, receiver):
    first = _world(console, receiver=receiver)
    console.rt.clock.advance(seconds=1)
    second = console.api("POST", "/api/interventions", json={"user_id": "u2", "playbook_id": first["playbook"],
                                                             "channel": "webhook", "message_body": "Hi Grace"})["id"]
    page = console.page()
    console.sign_in_with_key(page)
    page.keyboard.press("j")
    assert page.evaluate("document.activeElement.id") == f"iv-{second}"     # newest first
    page.keyboard.press("j")
    assert page.evaluate("document.activeElement.id") == f"iv-{first['intervention']}"
    page.keyboard.press("k")
    page.keyboard.press("r")
    assert page.evaluate("document.activeElement.name") == "reason"
    page.keyboard.type("not for Grace")
    page.keyboard.press("Enter")
    _card(page, second).locator("[data-status='rejected']").wait_for()
    page.keyboard.press("j")
    page.keyboard.press("a")
    _card(page, first["intervention"]).locator("[data-status='approved'], [data-status='sent'], "
                                               "[data-status='delivered']").wait_for()


@pytest.mark.parametrize("backend", ["embedded"])
def test_every_page_passes_axe_at_desktop_and_phone_width(console, receiver, mailbox):
    made = _world(console, receiver=receiver)
    console.api("PUT", f"/api/interventions/{made['intervention']}/approve")
    wait_for(lambda: _channel_posts(receiver), what="the delivery")
    other = console.api("POST", "/api/interventions", json={"user_id": "u2", "playbook_id": made["playbook"],
                                                            "channel": "email", "message_body": "Hi Grace"})["id"]
    console.api("POST", "/api/escalations", json={"user_id": "u2", "playbook_id": made["playbook"],
                                                  "severity": "High", "reason": "asked for a call"})
    test_key = console.tenant.issue(role="admin", test=True)
    console.api("POST", "/api/track", key=test_key, json={"events": [
        {"user_id": "t1", "event": "$identify", "properties": {"name": "Test Person"}}]})
    console.api("POST", "/api/track", json={"events": [
        {"user_id": "u1", "event": name, "properties": {}} for name in ("report_created", "invited_teammate")]})
    _history(console, "u1", days=30)
    page = console.page()
    page.goto("/console/sign-in")
    check_page(page, "sign-in")
    console.sign_in_with_key(page)
    pages = [("review", "/console/review"), ("interventions", "/console/interventions"),
             ("escalations", "/console/interventions?kind=escalations"),
             ("intervention", f"/console/interventions/{made['intervention']}"),
             ("customers", "/console/customers"), ("customer", "/console/customers/u1"),
             ("playbooks", "/console/playbooks"), ("playbook", f"/console/playbooks/{made['playbook']}"),
             ("analytics", "/console/analytics"), ("webhooks", "/console/webhooks"), ("settings", "/console/settings")]
    for name, path in pages:
        page.goto(path)
        check_page(page, name)
    page.goto("/console/customers/u1")
    assert page.locator("svg.chart").count() == 1
    assert other
