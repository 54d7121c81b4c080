"""One scrape of /metrics (docs/operations.md, "Metrics"): the counters and histograms of
cs_daemon/metrics.py, and the gauges read from the database and the broker when asked.
Apart from metrics.py so that the modules that count (deliveries among them) need not
import what the scrape reads."""

from __future__ import annotations

import logging
import os

from prometheus_client import REGISTRY, CollectorRegistry, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily

from .delivery import health as delivery_health
from .jobs import queues
from .metrics import MULTIPROC_ENV, OVERDUE_AFTER

log = logging.getLogger("cs_daemon.metrics")


class QueryGauges:
    """The gauges read from the database and the broker at scrape time."""

    def __init__(self, rt):
        self.rt = rt

    def collect(self):
        due = GaugeMetricFamily("cs_deliveries_due", "Open deliveries whose next attempt is due now", labels=["channel"])
        overdue = GaugeMetricFamily("cs_deliveries_overdue",
                                    f"Open deliveries due more than {int(OVERDUE_AFTER.total_seconds())} s ago",
                                    labels=["channel"])
        try:
            with self.rt.session(atomic=False) as s:
                for row in delivery_health.due_by_channel(s, self.rt.now(), OVERDUE_AFTER):
                    due.add_metric([row.channel], row.due)
                    overdue.add_metric([row.channel], row.overdue)
        except Exception as exc:   # a scrape reports what it can
            log.warning("deliveries due not read for /metrics: %s", exc)
        yield due
        yield overdue
        ready = GaugeMetricFamily("cs_job_queue_ready", "Jobs waiting in a queue", labels=["queue"])
        delayed = GaugeMetricFamily("cs_job_queue_delayed", "Jobs scheduled for later", labels=["queue"])
        oldest = GaugeMetricFamily("cs_job_queue_oldest_age_seconds", "Age of the oldest waiting job", labels=["queue"])
        try:
            for depth in queues.depths(self.rt.settings):
                ready.add_metric([depth.queue], depth.ready)
                delayed.add_metric([depth.queue], depth.delayed)
                oldest.add_metric([depth.queue], depth.oldest_age_seconds or 0.0)
        except Exception as exc:
            log.warning("job queues not read for /metrics: %s", exc)
        yield ready
        yield delayed
        yield oldest


def exposition(rt) -> bytes:
    """The text of one scrape."""
    registry = CollectorRegistry()
    if os.environ.get(MULTIPROC_ENV):
        multiprocess.MultiProcessCollector(registry)
        registry.register(QueryGauges(rt))
        return generate_latest(registry)
    registry.register(QueryGauges(rt))
    return generate_latest(REGISTRY) + generate_latest(registry)
