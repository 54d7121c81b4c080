"""The email channel against a real SMTP server on loopback, and the one-click unsubscribe
link it carries (docs/channels.md, "Email")."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import pytest
from sqlalchemy import select

from cs_daemon.channels import optout
from cs_daemon.customers.models import Customer
from cs_daemon.delivery import service as delivery
from cs_daemon.delivery.models import Delivery, DeliveryAttempt
from cs_daemon.outbox.models import OutboxEvent
from cs_daemon.runtime import Runtime
from tests.conftest import auth
from tests.support.smtp_server import Mailbox, self_signed

PUBLIC_URL = "https://cs.crew.example"
MAIL_FROM = "Crew Success <success@crew.example>"
MESSAGE = "Hello Ada <3\n\nYour first project & a template are waiting."


@pytest.fixture
def rt(settings, clock, mailbox):
    return Runtime(settings.model_copy(update={"smtp_url": mailbox.url, "cs_public_url": PUBLIC_URL,
                                               "mail_from": MAIL_FROM}), clock)


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    return self_signed(tmp_path_factory.mktemp("smtp-tls"))


@pytest.fixture
def world(client, make_tenant):
    """A tenant with two known users and an active email-only playbook."""
    tenant = make_tenant("Crew", plan_tier="growth")
    h = auth(tenant.key)
    client.post("/api/track", headers=h, json={"events": [
        {"user_id": "u1", "event": "$identify", "properties": {"email": "ada@x.io", "name": "Ada"}},
        {"user_id": "u1", "event": "signed_up"},
        {"user_id": "u2", "event": "$identify", "properties": {"email": "gone@x.io", "name": "Bo"}}]})
    pid = client.post("/api/playbooks", headers=h, json={
        "name": "welcome", "entry_conditions": {"trigger": {"event": "signed_up"}},
        "constraints": {"channels": ["email"]}, "strategy_hints": {"goal": "create a first project"}}).json["id"]
    client.put(f"/api/playbooks/{pid}/status", headers=h, json={"status": "active"})
    return tenant, pid


def _approve_email(client, tenant, pid, user="u1") -> str:
    h = auth(tenant.key)
    resp = client.post("/api/interventions", headers=h,
                       json={"user_id": user, "playbook_id": pid, "channel": "email", "message_body": MESSAGE})
    assert resp.status_code == 201, resp.json
    iv = resp.json["id"]
    assert client.put(f"/api/interventions/{iv}/approve", headers=h).json["status"] == "approved"
    return iv


def _run_deliveries(rt, tenant):
    with rt.session(tenant.id) as s:
        ids = [d.id for d in s.scalars(select(Delivery).where(Delivery.status.in_(("pending", "retrying"))))]
    for delivery_id in ids:
        delivery.attempt(rt, delivery_id)


def _status(client, tenant, iv):
    items = client.get("/api/interventions", headers=auth(tenant.key)).json["interventions"]
    return [i for i in items if i["id"] == iv][0]["status"]


def _delivery_of(rt, tenant, iv):
    with rt.session(tenant.id) as s:
        made = s.scalars(select(Delivery).where(Delivery.subject_id == iv)).one()
        tries = list(s.scalars(select(DeliveryAttempt).where(DeliveryAttempt.delivery_id == made.id)
                               .order_by(DeliveryAttempt.number)))
        s.expunge_all()
        return made, tries


def _events(rt, tenant, kind):
    with rt.session(tenant.id) as s:
        return [o.payload for o in s.scalars(select(OutboxEvent).where(OutboxEvent.event_type == kind))]


def _opted_out(rt, tenant, user="u1"):
    with rt.session(tenant.id) as s:
        return s.get(Customer, (tenant.id, user)).opted_out


def _part(msg, subtype: str) -> str:
    return msg.get_body((subtype,)).get_content().replace("\r\n", "\n")    # CRLF on the wire


def _link_in(text: str) -> str:
    return re.search(r"(https://\S+/api/unsubscribe\?token=[\w.%-]+)", text).group(1)


def _local(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


def _dry_run(client, tenant, user="u1"):
    resp = client.post("/api/interventions/dry-run", headers=auth(tenant.key), json={"user_id": user})
    assert resp.status_code == 200, resp.json
    return resp.json["decision"]


def test_an_approved_email_reaches_the_smtp_server_with_an_unsubscribe_link(client, world, rt, mailbox):
    tenant, pid = world
    iv = _approve_email(client, tenant, pid)
    _run_deliveries(rt, tenant)

    [got] = mailbox.received
    msg = got.message
    assert got.mail_from == "success@crew.example" and got.rcpt_tos == ["ada@x.io"]
    assert msg["From"] == MAIL_FROM and msg["To"] == "ada@x.io" and msg["Subject"] == "Create a first project"
    assert msg.get_content_type() == "multipart/alternative"
    text, page = _part(msg, "plain"), _part(msg, "html")
    assert MESSAGE in text
    assert "Hello Ada &lt;3" in page and "first project &amp; a template" in page and "<3" not in page
    link = _link_in(text)
    assert link.startswith(f"{PUBLIC_URL}/api/unsubscribe?token=")
    assert f'href="{link}"' in page
    assert msg["List-Unsubscribe"] == f"<{link}>"
    # as written on the wire, not RFC 2047-encoded: a mail client reads the URL from it
    assert f"List-Unsubscribe: <{link}>\r\n".encode() in got.raw
    assert msg["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    assert optout.read_token(rt.settings.secret_key, parse_qs(urlsplit(link).query)["token"][0]) == \
        optout.Unsubscribe(tenant.id, "u1", "email")

    assert _status(client, tenant, iv) == "delivered"
    made, [attempt] = _delivery_of(rt, tenant, iv)
    assert made.status == "delivered" and attempt.status_code == 250 and attempt.error is None
    [event] = _events(rt, tenant, "intervention.delivered")
    assert event["intervention_id"] == iv and event["channel"] == "email"


def test_a_recipient_refused_for_good_fails_after_one_attempt(client, world, rt, mailbox):
    tenant, pid = world
    mailbox.refuse["gone@x.io"] = "550 5.1.1 <gone@x.io>: mailbox unavailable"
    iv = _approve_email(client, tenant, pid, user="u2")
    _run_deliveries(rt, tenant)

    assert mailbox.received == []
    assert _status(client, tenant, iv) == "failed"
    made, [attempt] = _delivery_of(rt, tenant, iv)
    assert made.status == "failed" and made.next_attempt_at is None and made.attempts == 1
    assert attempt.status_code == 550 and "mailbox unavailable" in attempt.error
    [event] = _events(rt, tenant, "intervention.failed")
    assert event["intervention_id"] == iv and "550" in event["error"]["message"]


def test_a_message_refused_for_good_fails_after_one_attempt(client, world, rt, mailbox):
    tenant, pid = world
    mailbox.refuse_data = "554 5.7.1 message rejected as spam"
    iv = _approve_email(client, tenant, pid)
    _run_deliveries(rt, tenant)
    assert _status(client, tenant, iv) == "failed"
    made, [attempt] = _delivery_of(rt, tenant, iv)
    assert made.status == "failed" and attempt.status_code == 554 and "rejected as spam" in attempt.error


def test_a_temporary_refusal_is_retried_on_the_schedule(client, world, rt, mailbox, clock):
    tenant, pid = world
    mailbox.refuse["ada@x.io"] = "450 4.2.1 mailbox busy, try later"
    iv = _approve_email(client, tenant, pid)
    _run_deliveries(rt, tenant)
    made, [first] = _delivery_of(rt, tenant, iv)
    assert made.status == "retrying" and first.status_code == 450 and _status(client, tenant, iv) == "sent"

    mailbox.refuse.clear()
    clock.advance(seconds=delivery.RETRY_DELAYS[0].total_seconds())
    _run_deliveries(rt, tenant)
    assert len(mailbox.received) == 1 and _status(client, tenant, iv) == "delivered"


def test_without_smtp_url_the_attempt_fails_clearly_and_is_retried(client, world, settings, clock):
    tenant, pid = world
    iv = _approve_email(client, tenant, pid)
    _run_deliveries(Runtime(settings, clock), tenant)         # the settings as they come: no SMTP_URL
    made, [attempt] = _delivery_of(Runtime(settings, clock), tenant, iv)
    assert "SMTP_URL is not set" in attempt.error and made.status == "retrying"


def test_starttls_is_requested_and_the_server_is_verified(client, world, rt, clock, cert):
    tenant, pid = world
    secure = Mailbox(tls_context=cert.server_context())
    try:
        iv = _approve_email(client, tenant, pid)
        plain = rt.settings.model_copy(update={"smtp_url": secure.url, "smtp_ca_file": cert.cert_file})
        _run_deliveries(Runtime(plain, clock), tenant)            # no ?starttls=1: the server says no
        untrusted = rt.settings.model_copy(update={"smtp_url": f"{secure.url}?starttls=1"})
        clock.advance(seconds=30)
        _run_deliveries(Runtime(untrusted, clock), tenant)        # upgraded, but the cert is not trusted
        trusted = untrusted.model_copy(update={"smtp_ca_file": cert.cert_file})
        clock.advance(seconds=120)
        _run_deliveries(Runtime(trusted, clock), tenant)

        _, tries = _delivery_of(rt, tenant, iv)
        assert tries[0].status_code == 530 and "STARTTLS" in tries[0].error
        assert "CERTIFICATE_VERIFY_FAILED" in tries[1].error
        assert tries[2].error is None and tries[2].status_code == 250
        [got] = secure.received
        assert got.over_tls and got.rcpt_tos == ["ada@x.io"]
        assert _status(client, tenant, iv) == "delivered"
    finally:
        secure.close()


def test_smtps_is_implicit_tls_verified_against_the_ca_file(client, world, rt, cert):
    tenant, pid = world
    secure = Mailbox(tls_context=cert.server_context(), implicit_tls=True)
    try:
        iv = _approve_email(client, tenant, pid)
        trusted = rt.settings.model_copy(update={"smtp_url": secure.url, "smtp_ca_file": cert.cert_file})
        _run_deliveries(Runtime(trusted, rt.clock), tenant)
        [got] = secure.received
        assert got.over_tls and _status(client, tenant, iv) == "delivered"
    finally:
        secure.close()


def test_the_unsubscribe_link_asks_and_only_a_post_opts_the_user_out(client, world, rt, mailbox):
    tenant, pid = world
    before = _dry_run(client, tenant)
    assert (before["action"], before["channel"]) == ("send", "email")
    _approve_email(client, tenant, pid)
    _run_deliveries(rt, tenant)
    link = _link_in(_part(mailbox.received[0].message, "plain"))

    for _ in range(2):                              # a scanner following the link changes nothing
        page = client.get(_local(link))             # no bearer: the signed token is enough
        assert page.status_code == 200 and page.mimetype == "text/html"
        assert '<form method="post">' in page.text and "<button" in page.text
        assert _opted_out(rt, tenant) == [] and _events(rt, tenant, "user.opted_out") == []

    # the page's button: a form POST to the same URL, from a browser
    done = client.post(_local(link), data={"List-Unsubscribe": "One-Click"},
                       headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
    assert done.status_code == 200 and done.mimetype == "text/html" and "You are unsubscribed" in done.text
    assert _opted_out(rt, tenant) == ["email"]
    [event] = _events(rt, tenant, "user.opted_out")
    assert event == {"event": "user.opted_out", "user_id": "u1", "opted_out_at": rt.now().isoformat(),
                     "channel": "email"}
    assert "<form" not in client.get(_local(link)).text      # the page now says it is done

    one_click = client.post(_local(link), data="List-Unsubscribe=One-Click",
                            content_type="application/x-www-form-urlencoded")
    assert one_click.status_code == 200 and one_click.json == {"unsubscribed": True, "channel": "email"}
    assert _opted_out(rt, tenant) == ["email"] and len(_events(rt, tenant, "user.opted_out")) == 1

    after = _dry_run(client, tenant)
    assert after["action"] == "none" and "opted out of email" in after["reason"]


def test_one_opt_out_for_many_posts_of_the_link_at_once(app, client, world, rt, mailbox):
    """Real concurrent requests to a real server: each read the user not yet opted out,
    and each emitted user.opted_out (7 of 15 did)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import requests

    from tests.support.sse import AppServer

    tenant, pid = world
    _approve_email(client, tenant, pid)
    _run_deliveries(rt, tenant)
    link = _local(_link_in(_part(mailbox.received[0].message, "plain")))
    server = AppServer(app)
    start = threading.Barrier(10)

    def post(_):
        start.wait()
        return requests.post(server.url + link, data="List-Unsubscribe=One-Click", timeout=30,
                             headers={"Content-Type": "application/x-www-form-urlencoded"})

    try:
        with ThreadPoolExecutor(10) as pool:
            answers = list(pool.map(post, range(10)))
    finally:
        server.close()
    assert {r.status_code for r in answers} == {200}
    assert _opted_out(rt, tenant) == ["email"] and len(_events(rt, tenant, "user.opted_out")) == 1


def test_mail_approved_before_the_user_unsubscribed_never_leaves(client, world, rt, mailbox):
    tenant, pid = world
    iv = _approve_email(client, tenant, pid)
    link = optout.link(PUBLIC_URL, rt.settings.secret_key, tenant.id, "u1", "email")
    assert client.post(_local(link)).status_code == 200
    _run_deliveries(rt, tenant)
    assert mailbox.received == [] and _status(client, tenant, iv) == "failed"
    made, [attempt] = _delivery_of(rt, tenant, iv)
    assert made.status == "failed" and attempt.error == "the user opted out of email"


def test_a_tampered_or_foreign_token_is_refused(client, world, rt):
    tenant, _ = world
    good = optout.token(rt.settings.secret_key, tenant.id, "u1", "email")
    payload, signature = good.split(".")
    other_user = optout.token(rt.settings.secret_key, tenant.id, "u2", "email").split(".")[0]
    bad = [f"{other_user}.{signature}",                                     # payload swapped
           f"{payload}.{signature[:-2]}{'AA' if signature[-2:] != 'AA' else 'BB'}",   # signature altered
           optout.token("another-secret", tenant.id, "u1", "email"),       # signed elsewhere
           "not-a-token", ""]
    for token in bad:
        for method in (client.get, client.post):
            resp = method("/api/unsubscribe", query_string={"token": token})
            assert resp.status_code == 400 and resp.json["code"] == "validation_failed", (token, resp.json)
    assert client.get("/api/unsubscribe").status_code == 400
    assert _opted_out(rt, tenant) == [] and _opted_out(rt, tenant, "u2") == []
    assert _events(rt, tenant, "user.opted_out") == []
