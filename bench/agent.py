"""The agent's cost: CPU per tool-calling step outside the model (instant loopback model),
and decisions/s with a slow model from 1 thread and from the worker's threads."""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import harness as h
from tests.support.openai_server import OpenAIServer, model_answer, tool_call, tool_reply

GOAL_MS = 5.0
DELAY_MS = 300      # the slow model's time a call
STEPS = ["get_customer", "list_options", "get_recent_events", "get_history"]

OPTIONS = """
--decisions 150      >=1 decisions timed for the CPU per step
--slow-decisions 24  >=1 decisions a throughput run (1 thread, then the worker's threads)
--strict             exit 1 when a goal is missed
"""


def responder(delay_s: float):
    """Answer by how far the conversation is: the next read tool, then decide."""
    def answer(body: dict):
        if not body.get("tools"):        # the message writer
            return model_answer("Hi Ada, your first project takes two minutes.", "A first step.")
        messages = body.get("messages") or []
        done = sum(1 for m in messages if m.get("role") == "tool")
        if done < len(STEPS):
            return tool_reply(tool_call(STEPS[done], {"limit": 10} if STEPS[done] == "get_recent_events" else {}),
                              total_tokens=40, delay_s=delay_s)
        options = json.loads(next(m["content"] for m in messages if m.get("role") == "tool"
                                  and "options" in m["content"]))["options"]
        return tool_reply(tool_call("decide", {"option_id": options[-1]["option_id"], "reasoning": "bench",
                                               "confidence": 0.7}), total_tokens=40, delay_s=delay_s)
    return answer


def setup(bench: h.Bench, users: int, model: OpenAIServer):
    from webapp import create_app

    dbname = bench.database()
    rt = bench.runtime(dbname, openai_base_url=model.base_url, openai_model=model.model, openai_api_key="sk-bench")
    tenant = bench.tenant(dbname, rt=rt, unlimited=True)
    client = create_app(runtime=rt).test_client()
    auth = {"Authorization": f"Bearer {tenant.key}"}
    assert client.patch("/api/settings", headers=auth, json={"config": {"holdout_percent": 0}}).status_code == 200
    pid = client.post("/api/playbooks", headers=auth, json={
        "name": "welcome", "entry_conditions": {"trigger": {"event": "signed_up"}},
        "constraints": {"channels": ["email", "in_app"]},
        "strategy_hints": {"goal": "create a first project", "message_template": "Hi {{name}}, welcome."}}).json["id"]
    client.put(f"/api/playbooks/{pid}/status", headers=auth, json={"status": "active"})
    for start in range(0, users, 33):
        events = []
        for i in range(start, min(start + 33, users)):
            events += [{"user_id": f"u{i}", "event": "$identify", "properties": {"email": f"u{i}@x.io", "name": "Ada"}},
                       {"user_id": f"u{i}", "event": "page_viewed"}, {"user_id": f"u{i}", "event": "signed_up"}]
        resp = client.post("/api/track", headers=auth, json={"events": events})
        if resp.status_code != 200:
            raise h.BenchError(f"track answered {resp.status_code}: {resp.json}")
    return rt, tenant


def cpu_per_step(rt, tenant, users: list[str]) -> dict:
    from cs_daemon.agent import service as agent_service
    from cs_daemon.customers.models import Customer
    from cs_daemon.decisions import context
    from cs_daemon.decisions.record import drafter
    from cs_daemon.engine.decisions import decide
    from cs_daemon.tenants import config as tenant_config
    from cs_daemon.tenants import service as tenants

    cpu, wall, steps, decided = 0.0, 0.0, 0, 0
    for user_id in users:
        now = rt.now()
        with rt.session(tenant.id, commit=False) as session:
            t = tenants.get(session, tenant.id, now=now)
            customer = session.get(Customer, (tenant.id, user_id))
            specs = context.specs(session)
            config = tenant_config.read(t.config)
            made = decide(context.user_context(session, customer, specs, now), specs,
                          context.history(session, user_id, now), now=now, events=["signed_up"])
            c0, w0 = time.thread_time(), time.perf_counter()
            run = agent_service.run(session, tenant.id, customer, made, specs, writer=rt.writer, config=config,
                                    now=now, draft=drafter(t, customer, specs, rt.writer))
            cpu += time.thread_time() - c0
            wall += time.perf_counter() - w0
        steps += len(run.steps)
        decided += run.decided_by == "agent"
    if decided != len(users):
        raise h.BenchError(f"the agent decided {decided} of {len(users)}")
    return {"decisions": len(users), "steps": steps, "cpu_ms_per_step": 1000 * cpu / steps,
            "wall_ms_per_step": 1000 * wall / steps}


def throughput(rt, tenant, users: list[str], threads: int) -> float:
    from cs_daemon.decisions import requests

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        made = list(pool.map(lambda u: requests.decide_for(rt, tenant.id, u, events=["signed_up"]), users))
    elapsed = time.perf_counter() - started
    if sum(m is not None for m in made) != len(users):
        raise h.BenchError("a decision made no intervention")
    return len(users) / elapsed


def run(bench: h.Bench, args) -> int:
    probe = h.LoadProbe()
    model = OpenAIServer(keep_requests=False)
    bench.cleanups.append(model.close)
    model.responder = responder(0.0)
    n_users = args.decisions + 2 * args.slow_decisions + 10    # each decision takes a fresh user
    rt, tenant = setup(bench, n_users, model)
    users = iter(f"u{i}" for i in range(n_users))
    take = lambda n: [next(users) for _ in range(n)]   # noqa: E731
    cpu_per_step(rt, tenant, take(10))                                    # warm-up
    fast = cpu_per_step(rt, tenant, take(args.decisions))
    threads = rt.settings.cs_worker_threads
    model.responder = responder(DELAY_MS / 1000)
    one = throughput(rt, tenant, take(args.slow_decisions), 1)
    many = throughput(rt, tenant, take(args.slow_decisions), threads)
    print(h.table([
        ["CPU per step (instant model)", f"{fast['cpu_ms_per_step']:.2f} ms", f"goal <= {GOAL_MS:g} ms"],
        ["wall per step (instant model)", f"{fast['wall_ms_per_step']:.2f} ms",
         f"{fast['steps']} steps over {fast['decisions']} decisions"],
        [f"decisions/s, {DELAY_MS} ms model, 1 thread", f"{one:.2f}", "5 model calls a decision"],
        [f"decisions/s, {DELAY_MS} ms model, {threads} threads", f"{many:.2f}", f"speed-up {many / one:.2f}x"],
    ], head=["measure", "value", "note"]))
    print(probe.line())
    missed = fast["cpu_ms_per_step"] > GOAL_MS or many / one < threads / 2
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(h.main("agent", __doc__, OPTIONS, run))
