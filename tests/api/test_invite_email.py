"""The invitation email (docs/channels.md, "Team invitations"), end to end against a real SMTP server on
loopback: invite → the mail → accept with the token read from it → the new key works
with its role. The mail is a delivery written with the invitation and sent off the
request path by the email channel."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import pytest
from sqlalchemy import select

from cs_daemon.delivery import service as delivery
from cs_daemon.delivery.models import Delivery, DeliveryAttempt
from cs_daemon.runtime import Runtime
from cs_daemon.team import mail
from tests.conftest import auth

PUBLIC_URL = "https://cs.crew.example"
MAIL_FROM = "Crew Success <success@crew.example>"
LINK = re.compile(r"(https://\S+/api/team/accept\?token=[0-9a-f-]{36})")


@pytest.fixture
def rt(settings, clock, mailbox):
    return Runtime(settings.model_copy(update={"smtp_url": mailbox.url, "cs_public_url": PUBLIC_URL,
                                               "mail_from": MAIL_FROM}), clock)


def _invite(client, tenant, email="ed@acme.example", role="editor", key=None):
    resp = client.post("/api/team/invite", headers=auth(key or tenant.key), json={"email": email, "role": role})
    assert resp.status_code == 201, resp.json
    return resp.json["invitation"]


def _mails(rt, tenant) -> list[Delivery]:
    with rt.session(tenant.id) as s:
        rows = list(s.scalars(select(Delivery).where(Delivery.kind == mail.KIND)))
        s.expunge_all()
        return rows


def _run_deliveries(rt, tenant) -> None:
    for made in _mails(rt, tenant):
        delivery.attempt(rt, made.id)


def _attempts(rt, delivery_id) -> list[DeliveryAttempt]:
    with rt.session() as s:
        rows = list(s.scalars(select(DeliveryAttempt).where(DeliveryAttempt.delivery_id == delivery_id)
                              .order_by(DeliveryAttempt.number)))
        s.expunge_all()
        return rows


def _text(msg) -> str:
    return msg.get_body(("plain",)).get_content().replace("\r\n", "\n")


def _local(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


def test_invite_mails_an_accept_link_whose_token_makes_a_working_member(client, tenant, rt, mailbox):
    invitation = _invite(client, tenant)
    [queued] = _mails(rt, tenant)
    assert mailbox.received == []                       # not sent on the request path
    assert queued.url == "mailto:ed@acme.example" and queued.subject_id == invitation["id"]
    assert invitation["token"] not in queued.body + queued.secret_enc   # the token is encrypted at rest

    _run_deliveries(rt, tenant)
    [got] = mailbox.received
    msg = got.message
    assert got.rcpt_tos == ["ed@acme.example"] and got.mail_from == "success@crew.example"
    assert msg["From"] == MAIL_FROM and msg["Subject"] == "You are invited to join Acme"
    assert msg["X-Service-Invitation-Id"] == invitation["id"] and msg["List-Unsubscribe"] is None
    text = _text(msg)
    assert "owner@acme.example invited you to join Acme as an editor." in text
    link = LINK.search(text).group(1)
    assert link.startswith(f"{PUBLIC_URL}/api/team/accept?token=")
    assert f'href="{link}"' in msg.get_body(("html",)).get_content()
    token = parse_qs(urlsplit(link).query)["token"][0]
    assert token == invitation["token"]
    [attempt] = _attempts(rt, queued.id)
    assert attempt.status_code == 250 and attempt.error is None

    page = client.get(_local(link))                     # following the link accepts nothing
    assert page.status_code == 200 and page.mimetype == "text/html"
    assert "Join Acme" in page.text and "ed@acme.example" in page.text and "editor" in page.text
    assert [i["id"] for i in client.get("/api/team/invitations", headers=auth(tenant.key)).json["invitations"]] == [
        invitation["id"]]

    accepted = client.post("/api/team/accept", json={"token": token})
    assert accepted.status_code == 200 and accepted.json["role"] == "editor"
    key = accepted.json["api_key"]
    assert client.patch("/api/settings", headers=auth(key), json={"name": "Crew"}).status_code == 200
    assert client.put("/api/settings/kill-switch", headers=auth(key), json={"active": True}).status_code == 403
    assert client.post("/api/team/accept", json={"token": token}).status_code == 409
    resp = client.get(_local(link))
    assert resp.status_code == 409 and resp.json["code"] == "conflict"


def test_without_smtp_url_nothing_is_sent_and_the_invite_still_works(client, tenant, settings, clock, mailbox):
    plain = Runtime(settings, clock)                     # the settings as they come: no SMTP_URL
    from webapp import create_app

    plain_client = create_app(runtime=plain).test_client()
    invitation = _invite(plain_client, tenant)
    assert _mails(plain, tenant) == []
    accepted = plain_client.post("/api/team/accept", json={"token": invitation["token"]})
    assert accepted.status_code == 200 and accepted.json["role"] == "editor"
    assert mailbox.received == []


def test_an_invitation_revoked_before_its_mail_leaves_is_not_mailed(client, tenant, rt, mailbox):
    invitation = _invite(client, tenant)
    assert client.delete(f"/api/team/invitations/{invitation['id']}", headers=auth(tenant.key)).status_code == 200
    _run_deliveries(rt, tenant)
    assert mailbox.received == []
    [made] = _mails(rt, tenant)
    [attempt] = _attempts(rt, made.id)
    assert made.status == "failed" and made.next_attempt_at is None
    assert attempt.error == "the invitation is revoked: not mailed"


def test_a_temporary_smtp_refusal_is_retried_on_the_schedule(client, tenant, rt, clock, mailbox):
    mailbox.refuse["ed@acme.example"] = "450 4.2.1 mailbox busy, try later"
    _invite(client, tenant)
    _run_deliveries(rt, tenant)
    [made] = _mails(rt, tenant)
    assert made.status == "retrying" and mailbox.received == []
    assert _attempts(rt, made.id)[0].status_code == 450

    mailbox.refuse.clear()
    clock.advance(seconds=delivery.RETRY_DELAYS[0].total_seconds())
    _run_deliveries(rt, tenant)
    [got] = mailbox.received
    assert LINK.search(_text(got.message)) and _mails(rt, tenant)[0].status == "delivered"


def test_a_test_mode_key_invites_into_the_sink(client, tenant, rt, mailbox):
    test_admin = tenant.issue("admin", ["full"], test=True)
    invitation = _invite(client, tenant, key=test_admin)
    _run_deliveries(rt, tenant)
    [made] = _mails(rt, tenant)
    assert made.url == "sink:test-mode" and made.test and made.status == "delivered"
    assert mailbox.received == []
    assert client.post("/api/team/accept", json={"token": invitation["token"]}).status_code == 200


@pytest.mark.parametrize("token, status", [("6f1c2e9a-9a55-4b8e-9d0e-2f4b8f3c1d11", 404), ("nope", 400)])
def test_the_accept_page_refuses_a_bad_token(client, token, status):
    assert client.get(f"/api/team/accept?token={token}").status_code == status


def test_the_accept_page_of_an_expired_invitation_is_gone(client, tenant, clock):
    token = _invite(client, tenant)["token"]
    clock.advance(days=7, seconds=1)
    resp = client.get(f"/api/team/accept?token={token}")
    assert resp.status_code == 410 and resp.json["code"] == "gone"
