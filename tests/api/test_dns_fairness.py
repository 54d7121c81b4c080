"""One tenant's hanging DNS cannot starve another tenant's deliveries (docs/webhooks.md,
Where deliveries may go): a tenant has at most two name look-ups in flight; past that its
attempts fail at once ("DNS busy") and are retried on the schedule, while every other
tenant's deliveries resolve and go out. The resolver here is a real function put at the
one seam (netguard.lookup): names under .hang.test wait until the test lets them go."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from sqlalchemy import select

from cs_daemon.delivery import service as delivery
from cs_daemon.delivery.models import DeliveryAttempt
from cs_daemon.integrations import netguard


class HangingDns:
    def __init__(self):
        self.released = threading.Event()
        self.hanging = 0
        self.asked: list[str] = []
        self._changed = threading.Condition()

    def __call__(self, host, port, *args, **kw):
        self.asked.append(host)
        if host.endswith(".hang.test"):
            with self._changed:
                self.hanging += 1
                self._changed.notify_all()
            self.released.wait(30)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return socket.getaddrinfo("127.0.0.1", port, *args, **kw)      # every other name: this machine

    def wait_hanging(self, count: int) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: self.hanging >= count, 10), self.hanging


@pytest.fixture
def dns(monkeypatch):
    hanging = HangingDns()
    monkeypatch.setattr(netguard, "lookup", hanging)
    monkeypatch.setattr(netguard, "resolver", netguard.Resolver())     # nothing remembered from before
    yield hanging
    hanging.released.set()


def _delivery(rt, tenant, url) -> str:
    with rt.session(tenant.id) as s:
        return delivery.create(s, tenant.id, kind="event", channel="webhook", url=url, body={"event": "x"}, secret_enc="",
                               event_type="user.risk_changed", now=rt.now(), enqueue=False).id


def _errors(rt, delivery_id) -> list[str | None]:
    with rt.session() as s:
        return list(s.scalars(select(DeliveryAttempt.error).where(DeliveryAttempt.delivery_id == delivery_id)))


def test_a_tenant_whose_dns_hangs_does_not_hold_up_another_tenants_deliveries(rt, make_tenant, receiver, dns):
    slow, good = make_tenant("Slow", plan_tier="growth"), make_tenant("Good", plan_tier="growth")
    port = receiver.server.server_port
    stuck = [_delivery(rt, slow, f"http://api{n}.hang.test:{port}/hook") for n in range(3)]
    fine = _delivery(rt, good, f"http://hooks.good.test:{port}/hook")

    workers = [threading.Thread(target=delivery.attempt, args=(rt, d), daemon=True) for d in stuck[:2]]
    for worker in workers:
        worker.start()
    dns.wait_hanging(2)                                 # two worker threads wait on the slow tenant's DNS

    started = time.monotonic()
    assert delivery.attempt(rt, stuck[2]) == "retrying"             # its third: no wait, retried later
    assert time.monotonic() - started < 0.5
    [error] = _errors(rt, stuck[2])
    assert error.startswith("DNS busy:") and "this tenant" in error
    assert dns.hanging == 2                                         # it did not even ask

    started = time.monotonic()
    assert delivery.attempt(rt, fine) == "delivered"                # the other tenant's goes out
    assert time.monotonic() - started < 2 and len(receiver.requests) == 1

    dns.released.set()
    for worker in workers:
        worker.join(15)
    assert [_errors(rt, d)[0].startswith("refused:") for d in stuck[:2]] == [True, True]


def test_a_look_up_past_its_time_out_keeps_its_tenants_place_until_it_ends(dns):
    url = "http://api.hang.test/hook"
    for _ in range(2):
        with pytest.raises(netguard.UrlRefused, match="did not resolve within"):
            netguard.resolve(url, allow_private=True, timeout=0.1, tenant="slow")
    started = time.monotonic()
    with pytest.raises(netguard.LookupBusy):
        netguard.resolve(url, allow_private=True, timeout=5, tenant="slow")
    assert time.monotonic() - started < 0.5
    assert netguard.resolve("http://fine.test/", allow_private=True, tenant="other")[3] == "127.0.0.1"
    dns.released.set()                                  # the hung look-ups end: the places come back
    deadline = time.monotonic() + 10
    while True:
        try:
            netguard.resolve("http://api.good.test/", allow_private=True, tenant="slow")
            break
        except netguard.LookupBusy:
            assert time.monotonic() < deadline
            time.sleep(0.01)


def test_answers_are_remembered_briefly_and_the_policy_still_applies(dns):
    for _ in range(3):
        assert netguard.resolve("http://hooks.good.test/", allow_private=True, tenant="t")[3] == "127.0.0.1"
    assert dns.asked == ["hooks.good.test"]
    with pytest.raises(netguard.UrlRefused, match="non-public"):
        netguard.resolve("http://hooks.good.test/", allow_private=False, tenant="t")
