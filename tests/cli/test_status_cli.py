"""`cs status` (docs/operations.md): exit 0 and verdict ok when nothing is stuck; exit 1
and the finding named when something is: a delivery held by a receiver on loopback that
hangs, no live process, a sweep failing for a tenant (a warning, not stuck)."""

from __future__ import annotations

import json
import threading
import time

from sqlalchemy import select

from cs_daemon.delivery import service as delivery
from cs_daemon.delivery.models import Delivery
from cs_daemon.jobs import sweeps
from cs_daemon.jobs.heartbeat import process_beat
from cs_daemon.outbox import service as outbox
from cs_daemon.runtime import Runtime
from tests.conftest import auth
from tests.support.processes import Deadline
from tests.support.receiver import Receiver


def beat(rt) -> None:
    """The records a live API process and a live worker process write."""
    process_beat(rt, "api", time.time(), streams_open=3)
    process_beat(rt, "worker", time.time())


def status(cs, *argv) -> tuple[int, dict]:
    code, out, err = cs("status", *argv, "--json")
    assert "Traceback" not in err
    return code, json.loads(out)


def test_healthy_is_exit_0(cs, rt):
    beat(rt)
    code, body = status(cs)
    assert code == 0 and body["verdict"] == "ok", body
    assert [p["alive"] for p in body["processes"]["api"]] == [True]
    assert [p["alive"] for p in body["processes"]["worker"]] == [True]
    assert body["streams_open"] == 3 and body["findings"] == []
    assert body["summary"].startswith("ok: 1 API and 1 worker processes alive")
    code, out, _ = cs("status")
    assert code == 0 and "ok: 1 API and 1 worker" in out


def test_no_live_worker_is_stuck(cs, rt):
    process_beat(rt, "api", time.time())
    code, body = status(cs)
    assert code == 1 and body["verdict"] == "stuck"
    assert body["summary"] == "STUCK: no worker process alive (no heartbeat in 60 s)"


def test_a_delivery_held_by_a_hanging_receiver_is_stuck(cs, settings, make_tenant, client):
    release = threading.Event()
    receiver = Receiver(script=[("hold", release, 200)])
    live = Runtime(settings)   # the wall clock, as `cs status` reads it
    beat(live)
    tenant = make_tenant("Hooks", plan_tier="growth")
    resp = client.post("/api/webhooks/endpoints", headers=auth(tenant.key), json={"url": receiver.url})
    endpoint = resp.json["endpoint"]["id"]
    with live.session(tenant.id) as s:
        event_id = outbox.record(s, tenant.id, "user.risk_changed", {"user_id": "u1"}, now=live.now())
        [made] = s.scalars(select(Delivery.id).where(Delivery.subject_id == event_id))
    sending = threading.Thread(target=delivery.attempt, args=(live, made))
    sending.start()
    try:
        wait = Deadline(10)
        while not receiver.requests:
            assert wait, "the attempt never reached the receiver"
            time.sleep(0.01)
        # due now, not yet past the default threshold: not stuck
        code, body = status(cs)
        assert code == 0 and [(d["channel"], d["endpoint"], d["due"], d["overdue"]) for d in body["deliveries"]] == \
            [("event", endpoint, 1, 0)]
        # past a threshold of 0 s the hanging attempt is stuck, named by channel and endpoint
        code, body = status(cs, "--overdue-after", "0")
        assert code == 1 and body["verdict"] == "stuck"
        assert body["summary"] == f"STUCK: 1 event deliveries to {endpoint} overdue (due more than 0 s ago)"
        code, out, _ = cs("status", "--overdue-after", "0")
        assert code == 1 and "stuck" in out and endpoint in out
    finally:
        release.set()
        sending.join(10)
        receiver.close()
    code, body = status(cs, "--overdue-after", "0")
    assert code == 0 and body["deliveries"] == [], body


def test_a_failing_sweep_is_a_warning_and_its_run_is_shown(cs, settings):
    rt = Runtime(settings)   # the wall clock, as `cs status` reads it
    beat(rt)

    def work(tenant_id):
        raise RuntimeError("broken")

    sweeps.for_each_tenant(rt, "sweep_scores", ["t-1"], work)
    code, body = status(cs)
    assert code == 0 and body["verdict"] == "ok"
    [run] = body["sweeps"]["runs"]
    assert (run["sweep"], run["tenants"], run["failed"]) == ("sweep_scores", 1, 1)
    assert [(f["sweep"], f["tenant_id"]) for f in body["sweeps"]["failures"]] == [("sweep_scores", "t-1")]
    assert [f["stuck"] for f in body["findings"]] == [False]
    assert "sweep_scores fails for tenant t-1" in body["findings"][0]["message"]
