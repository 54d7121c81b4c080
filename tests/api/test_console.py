"""The console's rules without a browser (docs/console.md): sign-in links are one-time and
last 15 minutes, sessions follow their member or key (removed, revoked, role changed),
cookies are HttpOnly and SameSite=Lax (Secure behind https), every form needs its CSRF
token, roles and test mode hold as in the API, and the score snapshots behind the
customer chart."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from cs_daemon.console import mail
from cs_daemon.console.models import ConsoleSession
from cs_daemon.customers import service as customers, snapshots
from cs_daemon.delivery import service as delivery
from cs_daemon.delivery.models import Delivery
from cs_daemon.runtime import Runtime
from tests.conftest import auth

TOKEN = re.compile(r'name="csrf_token" value="([^"]+)"')
LINK = re.compile(r"/console/auth\?token=([A-Za-z0-9_-]+)")


@pytest.fixture
def rt(settings, clock, mailbox):
    return Runtime(settings.model_copy(update={"smtp_url": mailbox.url, "cs_public_url": "https://cs.acme.example"}),
                   clock)


@pytest.fixture
def world(client, make_tenant):
    tenant = make_tenant("Acme", plan_tier="growth")
    h = auth(tenant.key)
    client.post("/api/track", headers=h, json={"events": [
        {"user_id": "u1", "event": "$identify", "properties": {"email": "ada@example.com", "name": "Ada"}}]})
    pid = client.post("/api/playbooks", headers=h, json={"name": "Welcome"}).json["id"]
    iv = client.post("/api/interventions", headers=h, json={"user_id": "u1", "playbook_id": pid,
                                                             "channel": "in_app", "message_body": "Hello"}).json["id"]
    return tenant, pid, iv


def _pre_token(client) -> str:
    return TOKEN.search(client.get("/console/sign-in").text).group(1)


def _sign_in_key(client, key: str):
    return client.post("/console/sign-in/key", data={"csrf_token": _pre_token(client), "api_key": key})


def _csrf(client) -> str:
    page = client.get("/console/review")
    assert page.status_code == 200, page.status_code
    return re.search(r'data-csrf="([^"]+)"', page.text).group(1)


def _status(client, tenant, iv) -> str:
    return [i for i in client.get("/api/interventions", headers=auth(tenant.key)).json["interventions"]
            if i["id"] == iv][0]["status"]


def _mail_link(rt, mailbox, tenant) -> str:
    with rt.session(tenant.id) as s:
        ids = [d.id for d in s.scalars(select(Delivery).where(Delivery.kind == mail.KIND,
                                                              Delivery.status == "pending"))]
    for delivery_id in ids:
        delivery.attempt(rt, delivery_id)
    text = mailbox.received[-1].message.get_body(("plain",)).get_content()
    return LINK.search(text).group(1)


def test_pages_need_a_session_and_forms_answer_401_without_one(client, world):
    tenant, _, iv = world
    resp = client.get("/console/review")
    assert resp.status_code == 302 and resp.headers["Location"].startswith("/console/sign-in")
    assert client.post(f"/console/interventions/{iv}/approve").status_code == 401
    assert client.get("/console/settings").status_code == 302


def test_a_key_signs_in_with_a_session_cookie_and_the_key_is_not_the_cookie(client, world):
    tenant, _, _ = world
    resp = _sign_in_key(client, tenant.key)
    assert resp.status_code == 303 and resp.headers["Location"] == "/console/review"
    [cookie] = [c for c in resp.headers.getlist("Set-Cookie") if c.startswith("cs_console=")]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Path=/console" in cookie
    assert "Secure" in cookie                      # the public URL is https: a proxy terminates TLS
    assert tenant.key not in cookie
    page = client.get("/console/review")
    assert page.status_code == 200 and page.headers["X-Frame-Options"] == "DENY"
    assert page.headers["Cache-Control"] == "no-store" and "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]


def test_sign_in_forms_need_their_token_and_bad_keys_are_refused(client, world):
    tenant, _, _ = world
    assert client.post("/console/sign-in/key", data={"api_key": tenant.key}).status_code == 403
    assert _sign_in_key(client, "rt_live_" + "x" * 32).status_code == 401
    ingest_only = tenant.issue(role="editor", permissions=("ingest",))
    refused = _sign_in_key(client, ingest_only)
    assert refused.status_code == 403 and "cannot read" in refused.text
    assert client.get("/console/review").status_code == 302


def test_every_form_needs_the_sessions_csrf_token(client, world):
    tenant, _, iv = world
    _sign_in_key(client, tenant.key)
    assert client.post(f"/console/interventions/{iv}/approve").status_code == 403
    assert client.post(f"/console/interventions/{iv}/approve", data={"csrf_token": "forged"}).status_code == 403
    assert client.post("/console/settings/kill-switch", data={"active": "true"}).status_code == 403
    assert _status(client, tenant, iv) == "planned"
    token = _csrf(client)
    assert client.post(f"/console/interventions/{iv}/approve", data={"csrf_token": token}).status_code == 303
    assert _status(client, tenant, iv) == "approved"


def test_a_viewer_is_offered_no_change_and_is_refused_as_by_the_api(client, world):
    tenant, pid, iv = world
    viewer = tenant.issue(role="viewer", permissions=("read", "full"))
    _sign_in_key(client, viewer)
    page = client.get("/console/review").text
    assert "Hello" in page and ">Approve<" not in page and "Edit message" not in page
    token = _csrf(client)
    for verb, data in (("approve", {}), ("reject", {"reason": "no"}), ("message", {"message_body": "x"})):
        resp = client.post(f"/console/interventions/{iv}/{verb}", data={"csrf_token": token, **data})
        assert resp.status_code == 403 and "the role viewer may not do this" in resp.text
    assert client.post("/console/settings/kill-switch", data={"csrf_token": token, "active": "true"}).status_code == 403
    assert client.post(f"/console/playbooks/{pid}/status", data={"csrf_token": token, "status": "active"}).status_code == 403
    assert _status(client, tenant, iv) == "planned"


@pytest.mark.parametrize("role, permissions", [("viewer", ("read",)), ("editor", ("full",))])
def test_only_an_admin_is_offered_the_api_keys_controls(client, world, role, permissions):
    """The template read `can.keys`, which Jinja finds as the dict's `keys` method: always true."""
    tenant = world[0]
    _sign_in_key(client, tenant.issue(role=role, permissions=permissions))
    page = client.get("/console/settings").text
    assert "API keys" in page and "Issue a key" not in page and ">Revoke</button>" not in page
    admin = client.application.test_client()
    _sign_in_key(admin, tenant.key)
    page = admin.get("/console/settings").text
    assert "Issue a key" in page and ">Revoke</button>" in page


def test_a_test_keys_session_changes_only_test_data(client, world):
    tenant, pid, live = world
    test_key = tenant.issue(role="admin", test=True)
    mine = client.post("/api/interventions", headers=auth(test_key), json={
        "user_id": "u1", "playbook_id": pid, "channel": "in_app", "message_body": "Test hello"}).json["id"]
    _sign_in_key(client, test_key)
    page = client.get("/console/review").text
    assert "test key" in page and 'class="badge badge-test"' in page
    assert "Live data: a test key cannot change it." in page
    token = _csrf(client)
    refused = client.post(f"/console/interventions/{live}/approve", data={"csrf_token": token})
    assert refused.status_code == 403 and "a test key cannot change live data" in refused.text
    assert client.post("/console/settings/kill-switch", data={"csrf_token": token, "active": "true"}).status_code == 403
    assert client.post(f"/console/interventions/{mine}/approve", data={"csrf_token": token}).status_code == 303
    assert _status(client, tenant, live) == "planned" and _status(client, tenant, mine) == "approved"


def test_the_data_switch_shows_live_test_or_both(client, world):
    tenant, pid, _ = world
    test_key = tenant.issue(role="admin", test=True)
    client.post("/api/interventions", headers=auth(test_key), json={
        "user_id": "u1", "playbook_id": pid, "channel": "in_app", "message_body": "Sandbox text"})
    _sign_in_key(client, tenant.key)
    token = _csrf(client)
    seen = {}
    for view in ("live", "test", "both"):
        assert client.post("/console/view", data={"csrf_token": token, "view": view}).status_code == 303
        page = client.get("/console/review").text
        seen[view] = ("Hello<" in page, "Sandbox text" in page)
    assert seen == {"live": (True, False), "test": (False, True), "both": (True, True)}
    assert client.post("/console/view", data={"csrf_token": token, "view": "all"}).status_code == 400


def test_a_session_ends_with_its_key_its_member_or_sign_out(client, world, rt):
    tenant, _, _ = world
    key = tenant.issue(role="editor")
    _sign_in_key(client, key)
    assert client.get("/console/review").status_code == 200
    key_id = [k["id"] for k in client.get("/api/settings", headers=auth(tenant.key)).json["api_keys"]
              if k["prefix"] == key[:12]][0]
    client.delete(f"/api/settings/api-keys/{key_id}", headers=auth(tenant.key))
    assert client.get("/console/review").status_code == 302           # revoked with the key

    member = tenant.add_member("ed@acme.example", "editor")
    personal = tenant.issue(role="editor", member_id=member)
    _sign_in_key(client, personal)
    assert "editor" in client.get("/console/review").text
    client.put(f"/api/team/members/{member}/role", headers=auth(tenant.key), json={"role": "viewer"})
    assert ">Approve<" not in client.get("/console/review").text       # the role follows the member
    client.delete(f"/api/team/members/{member}", headers=auth(tenant.key))
    assert client.get("/console/review").status_code == 302           # removed with the member

    _sign_in_key(client, tenant.key)
    token = _csrf(client)
    out = client.post("/console/sign-out", data={"csrf_token": token})
    assert out.status_code == 303 and any(c.startswith("cs_console=;") for c in out.headers.getlist("Set-Cookie"))
    assert client.get("/console/review").status_code == 302
    with rt.session(tenant.id) as s:
        assert s.scalar(select(func.count()).select_from(ConsoleSession)) == 3
    rt.clock.advance(days=8)
    _sign_in_key(client, tenant.key)                                   # sessions over for a day are deleted
    with rt.session(tenant.id) as s:
        assert s.scalar(select(func.count()).select_from(ConsoleSession)) == 1


def test_a_session_ends_after_idling_and_after_its_longest_life(client, world, clock):
    tenant, _, _ = world
    _sign_in_key(client, tenant.key)
    clock.advance(hours=11)
    assert client.get("/console/review").status_code == 200
    clock.advance(hours=11)
    assert client.get("/console/review").status_code == 200            # used within 12 h: still on
    clock.advance(hours=12, seconds=1)
    assert client.get("/console/review").status_code == 302            # idle 12 h: over
    _sign_in_key(client, tenant.key)
    for _ in range(15):                                                # used every 11 h: never idle
        clock.advance(hours=11)
        assert client.get("/console/review").status_code == 200
    clock.advance(hours=11)
    assert client.get("/console/review").status_code == 302            # 7 days after sign-in: over


def test_a_member_signs_in_once_with_a_mailed_link_within_15_minutes(client, world, rt, mailbox, clock):
    tenant, _, _ = world
    member = tenant.add_member("Ed@Acme.example", "editor")
    sent = client.post("/console/sign-in/email", data={"csrf_token": _pre_token(client), "email": "ed@acme.example"})
    assert sent.status_code == 200 and "a sign-in link is on its way" in sent.text
    assert mailbox.received == []                                      # mailed off the request path
    token = _mail_link(rt, mailbox, tenant)
    msg = mailbox.received[-1].message
    assert msg["Subject"] == "Sign in to the Acme console" and mailbox.received[-1].rcpt_tos == ["Ed@Acme.example"]
    assert "https://cs.acme.example/console/auth?token=" in msg.get_body(("plain",)).get_content()

    assert client.get(f"/console/auth?token={token}").status_code == 200
    assert client.get("/console/review").status_code == 302           # opening the link signs in nobody
    pre = TOKEN.search(client.get(f"/console/auth?token={token}").text).group(1)
    used = client.post("/console/auth", data={"csrf_token": pre, "token": token})
    assert used.status_code == 303 and "Ed@Acme.example · editor" in client.get("/console/review").text

    other = client.application.test_client()
    pre = TOKEN.search(other.get(f"/console/auth?token={token}").text).group(1)
    again = other.post("/console/auth", data={"csrf_token": pre, "token": token})
    assert again.status_code == 410 and other.get("/console/review").status_code == 302   # one-time

    fresh = client.application.test_client()
    fresh.post("/console/sign-in/email", data={"csrf_token": _pre_token(fresh), "email": "ed@acme.example"})
    late = _mail_link(rt, mailbox, tenant)
    clock.advance(minutes=15)
    third = client.application.test_client()
    pre = TOKEN.search(third.get(f"/console/auth?token={late}").text).group(1)
    assert third.post("/console/auth", data={"csrf_token": pre, "token": late}).status_code == 410
    assert member


def test_an_unknown_address_gets_the_same_answer_and_no_mail_and_links_are_capped(client, world, rt, mailbox):
    tenant, _, _ = world
    tenant.add_member("ed@acme.example", "editor")
    unknown = client.post("/console/sign-in/email", data={"csrf_token": _pre_token(client), "email": "who@else.example"})
    assert unknown.status_code == 200 and "a sign-in link is on its way" in unknown.text
    for _ in range(5):
        client.post("/console/sign-in/email", data={"csrf_token": _pre_token(client), "email": "ed@acme.example"})
    with rt.session(tenant.id) as s:
        mails = list(s.scalars(select(Delivery).where(Delivery.kind == mail.KIND)))
    assert [m.url for m in mails] == ["mailto:ed@acme.example"] * 3   # at most three open links a member


def test_a_link_used_before_its_mail_leaves_is_not_mailed(client, world, rt, mailbox, clock):
    tenant, _, _ = world
    tenant.add_member("ed@acme.example", "editor")
    client.post("/console/sign-in/email", data={"csrf_token": _pre_token(client), "email": "ed@acme.example"})
    clock.advance(minutes=16)
    with rt.session(tenant.id) as s:
        [queued] = [d.id for d in s.scalars(select(Delivery).where(Delivery.kind == mail.KIND))]
    assert delivery.attempt(rt, queued) == "failed" and mailbox.received == []


def test_edit_approve_and_escalation_forms_act_through_the_api(client, world):
    tenant, pid, iv = world
    _sign_in_key(client, tenant.key)
    token = _csrf(client)
    resp = client.post(f"/console/interventions/{iv}/message", data={"csrf_token": token, "message_body": "New {{x}}"},
                       headers={"HX-Request": "true"})
    assert resp.status_code == 200 and "New {{x}}" in resp.text and 'class="fail"' in resp.text
    bad = client.post(f"/console/interventions/{iv}/reject", data={"csrf_token": token, "reason": "x" * 2001})
    assert bad.status_code == 400 and "reason" in bad.text
    esc = client.post("/api/escalations", headers=auth(tenant.key), json={
        "user_id": "u1", "playbook_id": pid, "severity": "High", "reason": "call me"}).json["id"]
    handled = client.post(f"/console/escalations/{esc}/handle",
                          data={"csrf_token": token, "action_taken": "called", "outcome": "positive"})
    assert handled.status_code == 303
    escalations = client.get("/api/escalations", headers=auth(tenant.key)).json["escalations"]
    assert [(e["status"], e["action_taken"], e["outcome"]) for e in escalations] == [("handled", "called", "positive")]


def test_every_page_answers_and_lists_paginate(client, world, clock):
    tenant, pid, iv = world
    h = auth(tenant.key)
    client.post("/api/track", headers=h, json={"events": [
        {"user_id": f"p{i:02d}", "event": "$identify", "properties": {"name": f"Person {i}", "plan": "pro" if i % 2 else "free"}}
        for i in range(60)]})
    _sign_in_key(client, tenant.key)
    for path in ("/console/review", "/console/interventions", "/console/interventions?kind=escalations",
                 f"/console/interventions/{iv}", "/console/customers", "/console/customers/u1", "/console/playbooks",
                 f"/console/playbooks/{pid}", "/console/analytics?range=7d", "/console/analytics?range=90d",
                 "/console/webhooks", "/console/settings"):
        assert client.get(path).status_code == 200, path
    first = client.get("/console/customers").text
    assert first.count('href="/console/customers/') == 50 and "Older</a>" in first
    assert "<dt>All</dt><dd>61</dd>" in first and "<dt>Churned</dt><dd>0</dd>" in first   # the tenant's totals
    bad = client.get("/console/analytics?range=5d")
    assert bad.status_code == 400 and "range" in bad.text
    pros = client.get("/console/customers?trait=plan&value=pro").text
    assert pros.count('href="/console/customers/') == 30 and "Older</a>" not in pros
    assert client.get("/console/customers?q=person%205").text.count('href="/console/customers/') == 11
    assert client.get("/console/interventions?status=bogus").status_code == 400
    missing = client.get(f"/console/interventions/{'0' * 8}-0000-4000-8000-{'0' * 12}")
    assert missing.status_code == 404 and "intervention not found" in missing.text   # the API's words
    assert "Go to sign-in" not in missing.text


def test_ingest_and_the_sweep_keep_a_daily_score_snapshot(client, world, rt, clock):
    tenant, _, _ = world
    h = auth(tenant.key)
    client.post("/api/track", headers=h, json={"events": [{"user_id": "u1", "event": "report_created"}]})
    clock.advance(days=1)
    with rt.session(tenant.id) as s:
        customers.sweep(s, now=rt.now())
    clock.advance(days=1)
    client.post("/api/track", headers=h, json={"events": [{"user_id": "u1", "event": "report_created"}]})
    client.post("/api/track", headers=h, json={"events": [{"user_id": "u1", "event": "report_shared"}]})
    with rt.session(tenant.id) as s:
        days = [(snap.day, round(snap.health, 3)) for snap in snapshots.history(s, "u1", days=90, now=rt.now())]
        current = customers.get(s, "u1")
        assert [d for d, _ in days] == [(rt.now() - timedelta(days=n)).date() for n in (2, 1, 0)]   # one a day
        assert days[-1][1] == round(current.health, 3)                                      # the day's last score
    _sign_in_key(client, tenant.key)
    page = client.get("/console/customers/u1").text
    assert '<svg class="chart"' in page and "Health and engagement over the last 90 days" in page

    clock.advance(days=snapshots.RETENTION_DAYS + 1)
    with rt.session(tenant.id) as s:
        customers.sweep(s, now=rt.now())
        kept = [snap.day for snap in snapshots.history(s, "u1", days=400, now=rt.now())]
    assert kept == [rt.now().date()]                                   # older than 90 days: pruned


def _stored(rt, tenant_id) -> list[tuple]:
    """The score_snapshots rows: (day, health, engagement, stage, risk)."""
    with rt.session(tenant_id) as s:
        return [(r.day, r.health, r.engagement_score, r.lifecycle_stage, r.risk_level)
                for r in s.scalars(select(snapshots.ScoreSnapshot).order_by(snapshots.ScoreSnapshot.day))]


def _scores(rt, tenant_id, user_id: str) -> tuple:
    with rt.session(tenant_id) as s:
        c = customers.get(s, user_id)
        return c.scored_at.date(), c.health, c.engagement_score, c.lifecycle_stage, c.risk_level


def test_ingest_stores_a_day_of_scores_at_the_first_re_score_of_a_later_day(client, world, rt, clock):
    tenant, _, _ = world
    h = auth(tenant.key)
    for name in ("report_created", "report_shared", "invited_teammate"):
        client.post("/api/track", headers=h, json={"events": [{"user_id": "u1", "event": name}]})
    assert _stored(rt, tenant.id) == []                     # scored today already: the customer row is the day
    with rt.session(tenant.id) as s:                        # a row the day's earlier re-scores left (before lazy snapshots)
        s.add(snapshots.ScoreSnapshot(tenant_id=tenant.id, user_id="u1", day=rt.now().date(), health=1.0,
                                      activation_score=1.0, engagement_score=1.0, expansion_score=1.0,
                                      lifecycle_stage="new", risk_level="high"))
        s.flush()
        [today] = snapshots.history(s, "u1", days=90, now=rt.now())
        assert (today.day, today.health, today.engagement_score, today.lifecycle_stage, today.risk_level) \
            == _scores(rt, tenant.id, "u1")                # the customer row stands for its day
    day_end = _scores(rt, tenant.id, "u1")

    clock.advance(days=1)
    client.post("/api/track", headers=h, json={"events": [{"user_id": "u1", "event": "report_created"}]})
    assert _stored(rt, tenant.id) == [day_end]              # yesterday's final scores, dated yesterday
    client.post("/api/track", headers=h, json={"events": [{"user_id": "u1", "event": "report_shared"}]})
    assert _stored(rt, tenant.id) == [day_end]              # and only at the day's first re-score
    with rt.session(tenant.id) as s:
        points = [(p.day, p.health, p.engagement_score, p.lifecycle_stage, p.risk_level)
                  for p in snapshots.history(s, "u1", days=90, now=rt.now())]
    assert points == [day_end, _scores(rt, tenant.id, "u1")]


def test_the_sweep_stores_a_day_of_scores_at_its_first_re_score_of_a_later_day(client, world, rt, clock):
    tenant, _, _ = world
    client.post("/api/track", headers=auth(tenant.key), json={"events": [{"user_id": "u1", "event": "report_created"}]})
    clock.advance(minutes=11)
    with rt.session(tenant.id) as s:
        assert customers.sweep(s, now=rt.now()) == 1
    assert _stored(rt, tenant.id) == []
    day_end = _scores(rt, tenant.id, "u1")

    clock.advance(days=1)
    with rt.session(tenant.id) as s:
        assert customers.sweep(s, now=rt.now()) == 1
    assert _stored(rt, tenant.id) == [day_end]
    clock.advance(minutes=11)
    with rt.session(tenant.id) as s:
        assert customers.sweep(s, now=rt.now()) == 1
        assert [p.day for p in snapshots.history(s, "u1", days=90, now=rt.now())] == [
            day_end[0], rt.now().date()]
    assert _stored(rt, tenant.id) == [day_end]
