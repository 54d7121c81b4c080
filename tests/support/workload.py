"""A steady mixed load over HTTP against one or more API processes, shared by the fault
campaign (tests/chaos/) and the soak (bench/soak.py): tracked events, email, webhook and
in_app interventions created and approved, external action dispatches. It records what
the service acknowledged, so a test can check afterwards that each of it happened, and
counts every answer by status (a 5xx, a refused or reset connection)."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import requests

USERS = 20
CHANNELS = ("email", "webhook", "in_app")
SCHEMA = {"type": "object", "properties": {"points": {"type": "integer", "minimum": 1}},
          "required": ["points"], "additionalProperties": False}


@dataclass
class Acknowledged:
    """What the service answered with success, by kind."""

    events: set[str] = field(default_factory=set)                 # idempotency keys answered 200
    interventions: dict[str, str] = field(default_factory=dict)   # id -> channel, approve answered 200
    markers: dict[str, str] = field(default_factory=dict)         # intervention id -> text in its message
    actions: set[str] = field(default_factory=set)                # external action ids answered 201


class Workload:
    """`step()` does one unit of work against a random API base URL; thread-safe."""

    def __init__(self, bases: list[str], key: str, *, timeout: float = 10.0, seed: int = 0):
        self.bases, self.key, self.timeout = list(bases), key, timeout
        self.acked = Acknowledged()
        self.answers: Counter = Counter()      # "200", "503", "connection", ... per request
        self.failures: list[tuple[float, float, str]] = []   # 5xx answers: (sent, answered, what), monotonic
        self.dropped: list[tuple[float, float, str]] = []   # no answer: (sent, failed, what)
        self._lock = threading.Lock()
        self._seq = 0
        self._rng = random.Random(seed)
        self._local = threading.local()
        self.playbook_id = ""

    # --- HTTP ---------------------------------------------------------------------------

    def _session(self) -> requests.Session:
        if getattr(self._local, "session", None) is None:
            self._local.session = requests.Session()
        return self._local.session

    def call(self, method: str, path: str, body=None, *, base: str | None = None) -> tuple[int, dict]:
        """(status, JSON body); status 0 when the connection failed or timed out."""
        base = base or random.choice(self.bases)
        sent = time.monotonic()
        try:
            resp = self._session().request(method, base + path, json=body, timeout=self.timeout,
                                           headers={"Authorization": f"Bearer {self.key}"})
        except requests.RequestException as exc:
            self._local.session = None   # a reset connection: start afresh
            with self._lock:
                self.answers["connection"] += 1
                self.dropped.append((sent, time.monotonic(), f"{method} {path}: {type(exc).__name__}"))
            return 0, {"error": type(exc).__name__}
        with self._lock:
            self.answers[str(resp.status_code)] += 1
            if resp.status_code >= 500:
                self.failures.append((sent, time.monotonic(), f"{method} {path} -> {resp.status_code} {resp.text[:200]}"))
        try:
            return resp.status_code, resp.json()
        except ValueError:
            return resp.status_code, {}

    def must(self, method: str, path: str, body=None, status: int = 200) -> dict:
        code, data = self.call(method, path, body, base=self.bases[0])
        if code != status:
            raise AssertionError(f"{method} {path}: {code} {data}")
        return data

    def next_seq(self) -> int:
        with self._lock:
            self._seq += 1
            return self._seq

    # --- set-up -------------------------------------------------------------------------

    def setup(self, *, hooks_url: str, actions_url: str) -> None:
        """One webhook endpoint for every event, one action type, a playbook offering the
        three channels, and USERS customers with an email address."""
        self.must("POST", "/api/webhooks/endpoints", {"url": hooks_url, "description": "load"}, 201)
        self.must("POST", "/api/external/action-types", {
            "name": "award_points", "description": "points", "provider": "loyaltyco",
            "parameters_schema": SCHEMA, "delivery_webhook": actions_url}, 201)
        self.playbook_id = self.must("POST", "/api/playbooks", {
            "name": "Load", "constraints": {"channels": list(CHANNELS)}}, 201)["id"]
        self.must("POST", "/api/track", {"events": [
            {"user_id": f"u{i}", "event": "$identify", "properties": {"email": f"u{i}@load.example", "name": f"U{i}"}}
            for i in range(USERS)]})

    # --- the units of work --------------------------------------------------------------

    def step(self) -> None:
        roll = self._rng.random()
        if roll < 0.55:
            self.track()
        elif roll < 0.85:
            self.intervene(self._rng.choice(CHANNELS))
        else:
            self.dispatch()

    def track(self, size: int = 5) -> None:
        seq = self.next_seq()
        keys = [f"ev-{seq}-{i}" for i in range(size)]
        events = [{"user_id": f"u{self._rng.randrange(USERS)}", "event": self._rng.choice(("login", "feature_used")),
                   "properties": {"seq": seq}, "idempotency_key": k} for k in keys]
        for _ in range(3):   # a client retries with the same keys: stored once whatever happened
            code, _ = self.call("POST", "/api/track", {"events": events})
            if code == 200:
                with self._lock:
                    self.acked.events.update(keys)
                return

    def intervene(self, channel: str) -> None:
        marker = f"load-{self.next_seq()}"
        code, made = self.call("POST", "/api/interventions", {
            "user_id": f"u{self._rng.randrange(USERS)}", "playbook_id": self.playbook_id, "channel": channel,
            "message_body": f"Hello from {marker}."})
        if code != 201:
            return
        code, _ = self.call("PUT", f"/api/interventions/{made['id']}/approve")
        if code == 200:
            with self._lock:
                self.acked.interventions[made["id"]] = channel
                self.acked.markers[made["id"]] = marker

    def dispatch(self) -> None:
        code, made = self.call("POST", "/api/external/actions", {
            "action_type": "award_points", "user_id": f"u{self._rng.randrange(USERS)}",
            "parameters": {"points": 1 + self._rng.randrange(100)}})
        if code == 201:
            with self._lock:
                self.acked.actions.add(made["action"]["id"])


class Driver:
    """`threads` threads each calling workload.step() every `pause` seconds until stop()."""

    def __init__(self, workload: Workload, threads: int, pause: float):
        self.workload, self.pause = workload, pause
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def start(self) -> "Driver":
        for t in self.threads:
            t.start()
        return self

    def _run(self) -> None:
        while not self.stopping.is_set():
            self.workload.step()
            self.stopping.wait(self.pause)

    def stop(self) -> None:
        self.stopping.set()
        for t in self.threads:
            t.join(30)
