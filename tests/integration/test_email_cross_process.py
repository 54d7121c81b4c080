"""Email and opt-out in production mode, with the worker in another process (issue 7):
an approved email is sent by a real `cs worker` (Dramatiq on Redis, PostgreSQL) to an
SMTP server on loopback; the unsubscribe link read from the received mail, followed over
HTTP against the API here, opts the user out; the next email intervention is then not
sent by that worker, with the reason visible in its delivery log and in a dry run."""

from __future__ import annotations

import re
import time

import pytest
import requests
from sqlalchemy import select

from cs_daemon.delivery.models import Delivery, DeliveryAttempt
from cs_daemon.tenants import service as tenants
from tests.conftest import auth
from tests.integration.conftest import running_worker
from tests.support.processes import Deadline

LINK = re.compile(r"(http://127\.0\.0\.1:\d+/api/unsubscribe\?token=[\w.%-]+)")


@pytest.fixture
def rt(production_rt):
    return production_rt


@pytest.fixture
def api(api_here):
    """The API on a real HTTP server here; the worker links its mail to this address."""
    return api_here


def _call(base, key, method, path, body=None) -> dict:
    resp = requests.request(method, base + path, headers=auth(key), json=body, timeout=10)
    assert resp.status_code < 300, (path, resp.status_code, resp.text)
    return resp.json()


def _until(what, check, worker, timeout=30.0):
    deadline = Deadline(timeout)
    while not (found := check()):
        assert worker.root.proc.poll() is None, f"cs worker exited\n{worker.root.describe()}"
        assert deadline, f"timed out waiting for {what}\n{worker.root.describe()}"
        time.sleep(0.05)
    return found


def test_a_worker_process_sends_the_mail_and_respects_the_unsubscribe_that_follows(rt, api, mailbox, tmp_path):
    base = api.url
    with rt.session() as s:
        key = tenants.create(s, name="Mailers", owner_email="owner@mailers.example", now=rt.now(),
                             plan_tier="growth").key.secret
    _call(base, key, "POST", "/api/track", {"events": [
        {"user_id": "u1", "event": "$identify", "properties": {"email": "ada@x.io", "name": "Ada"}}]})
    pid = _call(base, key, "POST", "/api/playbooks", {"name": "Welcome", "constraints": {"channels": ["email"]}})["id"]
    _call(base, key, "PUT", f"/api/playbooks/{pid}/status", {"status": "active"})

    def approve(text) -> str:
        iv = _call(base, key, "POST", "/api/interventions", {"user_id": "u1", "playbook_id": pid,
                                                            "channel": "email", "message_body": text})["id"]
        _call(base, key, "PUT", f"/api/interventions/{iv}/approve")
        return iv

    def status(iv) -> str:
        items = _call(base, key, "GET", "/api/interventions?limit=200")["interventions"]
        return [i for i in items if i["id"] == iv][0]["status"]

    with running_worker(rt, tmp_path, SMTP_URL=mailbox.url, CS_PUBLIC_URL=base) as worker:
        first = approve("Your first project is waiting.")
        _until("the first mail", lambda: status(first) == "delivered", worker)
        [mail] = mailbox.received
        assert mail.rcpt_tos == ["ada@x.io"]
        text = mail.message.get_body(("plain",)).get_content()
        assert "Your first project is waiting." in text
        link = LINK.search(text).group(1)
        assert mail.message["List-Unsubscribe"] == f"<{link}>"

        page = requests.get(link, timeout=10)               # no key: the signed link is the credential
        assert page.status_code == 200 and '<form method="post">' in page.text     # it asks first
        done = requests.post(link, data={"List-Unsubscribe": "One-Click"}, headers={"Accept": "text/html"},
                             timeout=10)                    # the page's button
        assert done.status_code == 200 and "You are unsubscribed" in done.text

        second = approve("One more thing.")
        _until("the second to fail", lambda: status(second) == "failed", worker)
        assert len(mailbox.received) == 1
        deliveries = _call(base, key, "GET", "/api/interventions?limit=200")
        assert [i["status"] for i in deliveries["interventions"] if i["id"] == first] == ["delivered"]

    dry = _call(base, key, "POST", "/api/interventions/dry-run", {"user_id": "u1"})
    assert dry["decision"]["action"] == "none" and "opted out of email" in dry["decision"]["reason"]
    with rt.session() as s:
        made = s.scalars(select(Delivery).where(Delivery.subject_id == second)).one()
        [attempt] = s.scalars(select(DeliveryAttempt).where(DeliveryAttempt.delivery_id == made.id)).all()
        assert made.status == "failed" and attempt.error == "the user opted out of email"
