"""The service's Prometheus metrics (docs/operations.md, "Metrics"). Counters and
histograms are bumped where things happen; the gauges that need a query (deliveries due
and overdue, job queue depths) are computed when /metrics is scraped.

Under gunicorn and dramatiq (production) every process writes its values to files in
PROMETHEUS_MULTIPROC_DIR, which `cs serve` makes and empties at start; a scrape of any
API process sums them. Without that directory (the embedded mode) the values live in the
process's own registry."""

from __future__ import annotations

import logging
import os
from datetime import timedelta

from prometheus_client import Counter, Gauge, Histogram, multiprocess

log = logging.getLogger(__name__)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
if os.environ.get(MULTIPROC_ENV):   # a directory named but not made yet would stop the import
    os.makedirs(os.environ[MULTIPROC_ENV], exist_ok=True)
OVERDUE_AFTER = timedelta(minutes=5)   # due this long ago and still not attempted: a stuck delivery

REQUESTS = Counter("cs_http_requests_total", "HTTP requests answered, by route (the URL rule) and status",
                   ["method", "route", "status"])
LATENCY = Histogram("cs_http_request_duration_seconds", "Time to answer an HTTP request, by route",
                    ["method", "route"], buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
EVENTS = Counter("cs_events_ingested_total", "Events received, by outcome (accepted, duplicate, over_limit)",
                 ["outcome"])
DECISIONS = Counter("cs_decisions_total", "Decisions recorded, by who decided and the action",
                    ["decided_by", "action"])
DELIVERIES = Counter("cs_delivery_attempts_total", "Delivery attempts, by channel (kind) and the status left",
                     ["channel", "status"])
SWEEP_SECONDS = Histogram("cs_sweep_duration_seconds", "Time a periodic sweep took", ["sweep"],
                          buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300, 1800))
SWEEP_FAILURES = Counter("cs_sweep_tenant_failures_total", "Tenants whose share of a sweep failed",
                         ["sweep", "tenant_id"])
STREAMS = Gauge("cs_in_app_streams_open", "In-app (SSE) streams open", multiprocess_mode="livesum")
RATE_LIMITED = Counter("cs_rate_limit_refusals_total", "Requests refused with 429, by limit (key, address)",
                       ["limit"])
LLM_CALLS = Counter("cs_llm_calls_total", "Calls to the language model, by outcome (ok, unavailable)",
                    ["outcome"])
LLM_TOKENS = Counter("cs_llm_tokens_total", "Tokens the language model used, by kind (prompt, completion)",
                     ["kind"])


def bump(counter: Counter, amount: float = 1, **labels) -> None:
    """Count, never failing the work counted (a full disk under the metrics directory)."""
    if amount <= 0:
        return
    try:
        counter.labels(**labels).inc(amount)
    except Exception as exc:
        log.debug("metric %s not counted: %s", counter, exc)


def process_exited(pid: int) -> None:
    """A gunicorn worker is gone: its live gauges (open streams) stop counting."""
    if os.environ.get(MULTIPROC_ENV):
        multiprocess.mark_process_dead(pid)
