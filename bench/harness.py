"""What the bench scripts share: a run's fresh databases, Redis prefix and servers (torn down
at the end, also on an error or SIGTERM), options, interleaved timing, tables, CPU from /proc."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Iterator, Sequence

import psycopg
import redis
import requests

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [p for p in (str(BENCH), str(ROOT)) if p not in sys.path]

from tests.support.processes import CS, Service, Tree, descendants, free_port, service_env  # noqa: E402

PG = os.environ.get("CS_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432")
REDIS = os.environ.get("CS_TEST_REDIS", "redis://127.0.0.1:6379/0")
HOST = "127.0.0.1"
CPUS = os.cpu_count() or 1
CLK_TCK = os.sysconf("SC_CLK_TCK")


class BenchError(Exception):
    """A setup, request or check that failed: exit status 2."""


def conninfo(dbname: str = "postgres") -> str:
    return PG.replace("postgresql+psycopg://", "postgresql://") + f"/{dbname}"


def say(*parts) -> None:
    print(*parts, file=sys.stderr, flush=True)


# --- figures ----------------------------------------------------------------------------

def percentile(xs: Sequence[float], p: float) -> float:
    """As statistics.quantiles(method="inclusive")."""
    ordered = sorted(xs)
    pos = (len(ordered) - 1) * p / 100
    lo = int(pos)
    return ordered[lo] + (ordered[min(lo + 1, len(ordered) - 1)] - ordered[lo]) * (pos - lo)


def summary(xs: Sequence[float], scale: float = 1000.0) -> dict:
    """n, p50/p95/p99/mean/min/max of xs times `scale` (s -> ms)."""
    ys = [x * scale for x in xs]
    return {"n": len(ys), "p50": percentile(ys, 50), "p95": percentile(ys, 95), "p99": percentile(ys, 99),
            "mean": statistics.fmean(ys), "min": min(ys), "max": max(ys)}


def table(rows: Sequence[Sequence], head: Sequence[str] = (), align: str = "", indent: str = "  ") -> str:
    """Rows of cells (int as {:,}, float as {:,.2f}) in columns; `align`: '<' or '>' a column."""
    cells = [list(head)] * bool(head) + [[c if isinstance(c, str) else f"{c:,}" if isinstance(c, int)
                                          else f"{c:,.2f}" for c in row] for row in rows]
    widths = [max(len(r[k]) for r in cells) for k in range(len(cells[0]))]
    align = align or "<" + ">" * (len(widths) - 1)
    return "\n".join(indent + " ".join(f"{c:{a}{w}}" for c, a, w in zip(r, align, widths)).rstrip() for r in cells)


def interleave(rounds: int, sides: Sequence, budget: float | None = None,
               started: float | None = None) -> Iterator[tuple[int, object]]:
    """(round, side), the order reversed every other round so that drift hits all sides alike;
    with a budget (seconds from `started`), stop before a round that would end past it."""
    started = time.monotonic() if started is None else started
    for r in range(rounds):
        t0 = time.monotonic()
        yield from ((r, side) for side in (sides if r % 2 == 0 else sides[::-1]))
        now = time.monotonic()
        if budget is not None and r + 1 < rounds and now + (now - t0) - started > budget:
            say(f"time budget of {budget:.0f} s: stopping after round {r + 1} of {rounds}")
            return


def timed(fn: Callable):
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


def sides(fns: dict[str, Callable], rounds: int, warmup: int = 0) -> tuple[dict[str, list[float]], dict]:
    """Each function once a round, interleaved, after `warmup` rounds: seconds and last value by name."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times, last = {k: [] for k in fns}, {}
    for _, k in interleave(rounds, list(fns)):
        dt, last[k] = timed(fns[k])
        times[k].append(dt)
    return times, last


# --- the machine ------------------------------------------------------------------------

def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU seconds of these processes so far."""
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def proc_status(pid: int) -> dict[str, str]:
    """/proc/PID/status as a dict (empty once the process is gone)."""
    try:
        return dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    except OSError:
        return {}


def _machine() -> tuple[float, float]:
    """(busy, all) CPU seconds of all cores since boot."""
    with open("/proc/stat") as fh:
        f = [int(x) for x in fh.readline().split()[1:9]]
    return (sum(f) - f[3] - f[4]) / CLK_TCK, sum(f) / CLK_TCK


class LoadProbe:
    def __init__(self):
        self.load0 = os.getloadavg()[0]
        self.busy0, self.all0 = _machine()

    def line(self) -> str:
        busy, total = _machine()
        share = 100.0 * (busy - self.busy0) / (total - self.all0) if total > self.all0 else float("nan")
        return (f"load average {self.load0:.2f} -> {os.getloadavg()[0]:.2f} on {CPUS} CPUs, "
                f"machine CPU busy {share:.0f}% over the phase")


class CpuMeter(threading.Thread):
    """CPU seconds by process family (`families()`: name -> pids, sampled every `every` s)."""

    def __init__(self, families: Callable[[], dict[str, list[int]]], every: float | None = None):
        super().__init__(daemon=True)
        self.families, self.every, self.stopping = families, every, threading.Event()
        self.first: dict[tuple[str, int], float] = {}
        self.last: dict[tuple[str, int], float] = {}
        self.names: dict[str, None] = {}
        self.sample(started=True)
        if every:
            self.start()

    def sample(self, started: bool = False) -> None:
        for fam, pids in self.families().items():
            self.names[fam] = None
            for pid in pids:
                if cpu := cpu_seconds([pid]):
                    self.first.setdefault((fam, pid), cpu if started else 0.0)
                    self.last[(fam, pid)] = cpu

    def run(self) -> None:
        while not self.stopping.wait(self.every):
            self.sample()

    def stop(self) -> dict[str, float]:
        self.stopping.set()
        if self.every:
            self.join()
        self.sample()
        out = dict.fromkeys(self.names, 0.0)
        for (fam, pid), cpu in self.last.items():
            out[fam] += cpu - self.first[(fam, pid)]
        return out


# --- the run's resources ----------------------------------------------------------------

class Server:
    def __init__(self, name: str, argv: list[str], env: dict, tmp: Path, port: int = 0):
        self.name, self.port = name, port
        self.tree = Tree(Service(argv, env=env, cwd=tmp, log=tmp / f"{name}.log", new_session=True))
        self.pid = self.tree.root.pid

    def url(self, path: str = "") -> str:
        return f"http://{HOST}:{self.port}{path}"

    def log(self, lines: int = 10**9) -> str:
        return self.tree.root.stderr_tail(lines)

    def check(self, when: str = "the run") -> None:
        if self.tree.root.proc.poll() is not None:
            raise BenchError(f"{self.name} exited during {when}:\n{self.log(30)}")

    def wait_until(self, ready: Callable[[], object], timeout: float = 60.0, poll: float = 0.1):
        deadline, last = time.monotonic() + timeout, "no answer"
        while time.monotonic() < deadline:
            self.check("its start")
            try:
                if (got := ready()) not in (None, False):
                    self.tree.record()
                    return got
            except (requests.RequestException, OSError) as exc:
                last = str(exc)
            time.sleep(poll)
        raise BenchError(f"{self.name} not ready after {timeout:.0f} s ({last}):\n{self.log(30)}")

    def wait_http(self, path: str, headers: dict | None = None, ok=(200,)) -> requests.Response:
        def ready():
            resp = requests.get(self.url(path), headers=headers, timeout=5)
            if resp.status_code not in ok:
                raise requests.RequestException(f"HTTP {resp.status_code}: {resp.text[:300]}")
            return resp
        return self.wait_until(ready, 90)

    def children(self) -> list[int]:
        return [p.pid for p in descendants(self.pid) if p.ppid == self.pid]

    def stop(self, grace: float) -> str | None:
        self.tree.record()
        self.tree.root.signal(signal.SIGTERM)   # graceful first; then whatever is left is killed
        try:
            self.tree.root.wait(grace)
        except subprocess.TimeoutExpired:
            return f"{self.name} did not stop on SIGTERM; killed"
        finally:
            self.tree.kill()


class Bench:
    def __init__(self, name: str, keep_db: bool = False):
        self.name, self.tag, self.keep_db = name, uuid.uuid4().hex[:10], keep_db
        self.prefix = f"csbench-{name}-{self.tag[:8]}"
        self.secret = secrets.token_hex(32)
        self.tmp = Path(tempfile.mkdtemp(prefix=f"cs-bench-{name}-"))
        self.created: list[str] = []
        self.servers: list[Server] = []
        self.cleanups: list[Callable[[], object]] = []

    def database(self, suffix: str = "") -> str:
        dbname = f"cs_bench_{self.name}_{self.tag}{suffix}"
        with psycopg.connect(conninfo(), autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{dbname}"')
        self.created.append(dbname)
        say(f"database {dbname}, Redis prefix {self.prefix}")
        from cs_daemon import migrate

        migrate.upgrade(self.settings(dbname, redis_url=None))
        return dbname

    def settings(self, dbname: str, **values):
        from cs_daemon.config import Settings

        return Settings(**{"database_url": f"{PG}/{dbname}", "redis_url": REDIS, "cs_redis_prefix": self.prefix,
                           "cs_secret_key": self.secret, "cs_data_dir": self.tmp / "data", **values})

    def runtime(self, dbname: str, clock=None, **values):
        from cs_daemon.wiring import bootstrap

        return bootstrap(self.settings(dbname, **values), clock)

    def tenant(self, dbname: str, plan: str = "scale", *, name: str = "Bench", now=None, keys: int = 1,
               role: str = "admin", permissions: Sequence[str] = ("full",), unlimited: bool = False,
               rt=None) -> SimpleNamespace:
        """A tenant, its admin key and keys - 1 more; `unlimited`: no tracked-user limit."""
        from sqlalchemy import update

        from cs_daemon.auth import service as auth
        from cs_daemon.tenants import service as tenants
        from cs_daemon.tenants.models import Tenant

        rt = rt or self.runtime(dbname)
        with rt.session() as s:
            made = tenants.create(s, name=name, owner_email=f"owner@{name.lower()}.example", now=now or rt.now(),
                                  plan_tier=plan)
            if unlimited:
                s.execute(update(Tenant).where(Tenant.id == made.tenant.id).values(tracked_user_limit=None))
        tid, secrets_ = made.tenant.id, [made.key.secret]
        with rt.session(tid) as s:
            secrets_ += [auth.issue(s, tid, role=role, permissions=list(permissions), now=rt.now(),
                                    label=f"bench-{i}").secret for i in range(1, keys)]
        return SimpleNamespace(id=tid, key=secrets_[0], keys=secrets_, rt=rt)

    def env(self, dbname: str, **values) -> dict[str, str]:
        return service_env(DATABASE_URL=f"{PG}/{dbname}", REDIS_URL=REDIS, CS_REDIS_PREFIX=self.prefix,
                           CS_SECRET_KEY=self.secret, CS_DATA_DIR=str(self.tmp / "data"),
                           BENCH_PG_CONNINFO=conninfo(dbname), PYTHONUNBUFFERED="1", **values)

    def gunicorn(self, dbname: str, app: str = "webapp.wsgi:app", name: str = "api", path: Path = ROOT,
                 wait: str | None = "/api/health", **env) -> Server:
        """2 sync workers on a free port, once `wait` answers (/api/health: 503 too, with no worker)."""
        from gunicorn import config

        port = free_port()
        # gunicorn >= 27 opens a control socket at one fixed path that all servers would share
        no_socket = ["--no-control-socket"] * any(s.name == "control_socket_disable" for s in config.KNOWN_SETTINGS)
        argv = [sys.executable, "-m", "gunicorn", app, "--workers", "2", "--bind", f"{HOST}:{port}",
                "--pythonpath", str(path), "--graceful-timeout", "5", *no_socket]
        srv = self.start(Server(name, argv, self.env(dbname, **env), self.tmp, port))
        if wait:
            srv.wait_http(wait, ok=(200, 503))
        return srv

    def api(self, dbname: str, headers: dict, plan: str, **env) -> tuple[Server, requests.Response]:
        """The app under gunicorn, checked to run in production mode with the plan's rate limit."""
        from cs_daemon.plans import plan as plan_of

        srv = self.gunicorn(dbname, wait=None, **env)
        first = srv.wait_http("/api/settings", headers)
        if first.headers.get("X-RateLimit-Limit") != str(plan_of(plan).requests_per_minute):
            raise BenchError(f"expected X-RateLimit-Limit {plan_of(plan).requests_per_minute} (production mode, "
                             f"plan {plan}), got {first.headers.get('X-RateLimit-Limit')!r}")
        return srv, first

    def cs(self, dbname: str, name: str, *args: str, port: int = 0, **env) -> Server:
        return self.start(Server(name, [CS, *args], self.env(dbname, **env), self.tmp, port))

    def serve(self, dbname: str, **env) -> Server:
        """`cs serve` on a free port, once /api/health answers 200."""
        port = free_port()
        daemon = self.cs(dbname, "daemon", "serve", "--host", HOST, "--port", str(port), port=port, **env)
        daemon.wait_until(lambda: requests.get(daemon.url("/api/health"), timeout=2).status_code == 200, 90, 0.2)
        return daemon

    def start(self, server: Server) -> Server:
        self.servers.append(server)
        return server

    def teardown(self) -> None:
        done, problems = [], []

        def attempt(what: str, fn: Callable[[], object]) -> None:
            try:
                fn()
            except Exception as exc:  # best effort: the rest is still undone
                problems.append(f"{what}: {exc}")

        for cleanup in self.cleanups:
            attempt("cleanup", cleanup)
        for server in reversed(self.servers):
            problems += [p for p in [server.stop(40 if server.name == "daemon" else 15)] if p]
        if self.servers:
            done.append(f"{', '.join(s.name for s in self.servers)} stopped")
        from cs_daemon.db import dispose_engines

        attempt("disposing engines", dispose_engines)
        for dbname in self.created:
            if not self.keep_db:
                attempt(f"dropping database {dbname}", lambda: drop(dbname))
            done.append(f"database {dbname} {'kept' if self.keep_db else 'dropped'}")
        attempt(f"deleting Redis keys {self.prefix}:*", lambda: done.append(f"{unset(self.prefix)} Redis keys deleted"))
        shutil.rmtree(self.tmp, ignore_errors=True)
        say(f"teardown: {', '.join(done) or 'nothing to undo'}")
        for p in problems:
            say(f"teardown problem: {p}")


def drop(dbname: str) -> None:
    with psycopg.connect(conninfo(), autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


def unset(prefix: str) -> int:
    with contextlib.closing(redis.Redis.from_url(REDIS, socket_timeout=5)) as client:
        if keys := list(client.scan_iter(f"{prefix}:*", count=1000)):
            client.delete(*keys)
    return len(keys)


def parser(doc: str, options: str) -> argparse.ArgumentParser:
    """Options as `--name DEFAULT help` lines: DEFAULT a number (help may start with `>=N`, the
    least value), a|b|c (choices), 'text' or a METAVAR; `--name help` is a flag."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.least = {}      # flag -> the least value it takes (checked by main)
    for flag, word, text in (item.split(None, 2) for item in re.split(r"\n(?=--)", options.strip())):
        text = " ".join(text.split()).replace("%", "%%")    # argparse formats the help with %
        if re.fullmatch(r"[\d_]+(\.\d*)?", word):
            kind = float if "." in word else int
            if least := re.match(r">=(\d+) ", text):
                ap.least[flag] = kind(least.group(1))
                text = text[least.end():] + f"; at least {least.group(1)}"
            ap.add_argument(flag, type=kind, default=kind(word), help=f"{text} (default {word.replace('_', ',')})")
        elif "|" in word:
            choices = word.split("|")
            ap.add_argument(flag, choices=choices, default=choices[0], help=f"{text} (default {choices[0]})")
        elif word.startswith("'"):
            ap.add_argument(flag, default=word.strip("'"), help=text + f" (default {word})" * (word != "''"))
        elif word.isupper():
            ap.add_argument(flag, metavar=word, help=text)
        else:
            ap.add_argument(flag, action="store_true", help=f"{word} {text}")
    return ap


def main(name: str, doc: str, options: str, run: Callable, check: Callable | None = None, argv=None) -> int:
    """Parse the options, run run(bench, args), tear down (also on SIGTERM); the exit status."""
    ap = parser(doc, options)
    args = ap.parse_args(argv)
    for flag, least in ap.least.items():
        if getattr(args, flag[2:].replace("-", "_")) < least:
            ap.error(f"{flag} must be >= {least}")
    if check and (problem := check(args)):
        ap.error(problem)
    started = time.monotonic()
    say(f"machine: {CPUS} CPUs, load average {os.getloadavg()[0]:.2f} at start")

    def _on_term(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _on_term)
    bench = Bench(name, getattr(args, "keep_db", False))
    try:
        return run(bench, args) or 0
    except (BenchError, requests.RequestException, psycopg.Error, redis.RedisError) as exc:
        say(f"bench failed: {type(exc).__name__}: {exc}")
        return 2
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # let the teardown finish
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        bench.teardown()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        say(f"total run {time.monotonic() - started:.0f} s")


class Api:
    def __init__(self, url: str, key: str):
        self.url, self.key, self.headers, self._local = url, key, {"Authorization": f"Bearer {key}"}, threading.local()

    @property
    def session(self) -> requests.Session:
        if getattr(self._local, "session", None) is None:
            self._local.session = requests.Session()
        return self._local.session

    def call(self, method: str, path: str, body=None, status: int | None = None) -> dict:
        resp = self.session.request(method, self.url + path, headers=self.headers, json=body, timeout=60)
        if (resp.status_code != status) if status else (resp.status_code >= 300):
            raise BenchError(f"{method} {path}: HTTP {resp.status_code}: {resp.text[:300]}")
        return resp.json()


def sizes(dbname: str, *relations: str) -> list[str]:
    with psycopg.connect(conninfo(dbname)) as conn:
        return list(conn.execute("SELECT " + ", ".join(["pg_size_pretty(pg_total_relation_size(%s))"] * len(relations)),
                                 relations).fetchone())


def seed_sql(dbname: str, tenant_id: str, steps: Sequence[tuple[str, str]], params: dict, users: int) -> dict:
    """Each (label, SQL) step on the server (random() seeded); the seconds of each."""
    seconds = {}
    with psycopg.connect(conninfo(dbname)) as conn:
        conn.execute("SELECT setseed(0.20261102)")
        for label, sql in steps:
            seconds[label], _ = timed(lambda: conn.execute(sql, params))
            say(f"  {label}: {seconds[label]:.1f} s")
        conn.execute("UPDATE tenants SET tracked_users = %s WHERE id = %s", (users, tenant_id))
    return seconds


def reload(dbname: str, tables: Sequence[str], load: Callable[[], dict[str, float]]) -> dict[str, float]:
    """load() with the indexes and constraints of `tables` dropped, then re-created as migrated
    and VACUUM ANALYZE; the seconds of each step."""
    ddl, drops = [], []
    with psycopg.connect(conninfo(dbname), autocommit=True) as conn:
        for table in tables:
            for name, definition in conn.execute(
                    "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass "
                    "AND contype IN ('p', 'f', 'u') ORDER BY contype DESC, conname", (table,)):
                ddl.append(f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}')
                drops.append(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
            for name, definition in conn.execute(
                    "SELECT i.relname, pg_get_indexdef(i.oid) FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
                    "WHERE x.indrelid = %s::regclass AND NOT EXISTS (SELECT 1 FROM pg_constraint c "
                    "WHERE c.conindid = x.indexrelid) ORDER BY i.relname", (table,)):
                ddl.append(definition)
                drops.append(f'DROP INDEX "{name}"')
        for stmt in drops:
            conn.execute(stmt)
    from cs_daemon.db import dispose_engines

    dispose_engines()
    seconds = load()
    with psycopg.connect(conninfo(dbname), autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '512MB'")
        seconds["indexes + constraints"], _ = timed(lambda: [conn.execute(stmt) for stmt in ddl])
        seconds["VACUUM ANALYZE"], _ = timed(lambda: [conn.execute(f"VACUUM ANALYZE {t}") for t in tables])
    return seconds


# --- the vocabulary of the generated corpora (name, weight) ------------------------------

STAGES = [("new", 8), ("onboarding", 20), ("activated", 25), ("engaged", 22), ("at_risk", 12),
          ("dormant", 8), ("churned", 5)]
LOCALES = [("en", 40), ("de", 15), ("fr", 10), ("es", 8), ("en-GB", 7), ("ja", 5), ("pt", 5), ("nl", 5)]
PLAN_TRAITS = [("free", 40), ("starter", 30), ("pro", 20), ("enterprise", 10)]
ROLES = ["engineer", "product manager", "designer", "founder", "marketing", "support lead", "admin", "analyst"]
TAGS = ["beta", "vip", "trial-extended", "partner", "edu", "api", "sso", "churn-risk"]
TIMEZONES = ["Europe/Berlin", "America/New_York", "America/Los_Angeles", "Asia/Tokyo", "UTC"]
EVENT_NAMES = ["page_viewed", "feature_used", "session_started", "login", "api_call", "report_viewed",
               "dashboard_viewed", "search_performed", "created_project", "logout", "comment_added",
               "file_uploaded", "export_created", "invited_teammate", "settings_changed",
               "integration_connected", "billing_viewed", "support_ticket_opened", "upgraded_plan", "seat_added"]


def names(pairs) -> list[str]:
    return [n for n, _ in pairs]


def weights(pairs) -> list[float]:
    return [w for _, w in pairs]
