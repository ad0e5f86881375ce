"""The metric families MCC exports, in one place: each one's name, type, help and labels.

Every ``/metrics`` endpoint fills these (the console from its snapshot, a supervisor and the
observer through the collectors of `mcc.observe.metrics`), so a name means one thing with one
label set wherever it is scraped. docs/observability.md lists which endpoint serves which.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

QUANTILES = (0.5, 0.99)


@dataclass(frozen=True)
class Family:
    """A metric family: ``name`` (a counter's samples add ``_total``), ``kind``, ``doc`` (its
    HELP) and the names of its labels."""

    name: str
    kind: Literal["gauge", "counter", "summary"]
    doc: str
    labels: tuple[str, ...] = ()

    def metric(self, rows: Iterable[tuple[Sequence[object], object]]) -> Metric:
        """The family with a sample per ``(label values, value)`` row; a row whose value is not
        a number (None: not known) is left out."""
        kind = CounterMetricFamily if self.kind == "counter" else GaugeMetricFamily
        metric = kind(self.name, self.doc, labels=self.labels)
        for values, value in rows:
            if isinstance(value, int | float):
                metric.add_metric([str(v) for v in values], value)
        return metric

    def one(self, value: float | None) -> Metric:
        """The family with one sample, without labels."""
        return self.metric([((), value)])

    def summary(self, values: Sequence[float]) -> Metric:
        """A summary of recent ``values``: their `QUANTILES`, sum and count."""
        metric = Metric(self.name, self.doc, "summary")
        for q in QUANTILES if values else ():
            p = float(np.percentile(values, q * 100))
            metric.add_sample(self.name, {"quantile": str(q)}, p)
        metric.add_sample(f"{self.name}_sum", {}, sum(values))
        metric.add_sample(f"{self.name}_count", {}, len(values))
        return metric


INSTANCE = ("instance", "system", "host")
"""The labels of a per-instance family: ``mission/system/index``, its system, its host."""

# -- a mission (``MissionStatus``, a supervisor's ``status()``) -----------------------------------
MISSION_INFO = Family(
    "mcc_mission_info",
    "gauge",
    "the mission: name, phase, state, backend, security (value 1)",
    ("mission", "phase", "state", "backend", "security"),
)
INSTANCE_UP = Family(
    "mcc_instance_up",
    "gauge",
    "1 when the instance is running (supervisor state or last heartbeat), else 0",
    (*INSTANCE, "state", "node"),
)
INSTANCE_RESTARTS = Family(
    "mcc_instance_restarts", "counter", "restarts by the supervisor", INSTANCE
)
QUEUE_PENDING = Family("mcc_queue_pending", "gauge", "instances waiting in the supervisor's queue")
CLUSTER_SIZE = Family(
    "mcc_cluster_size",
    "gauge",
    "instances of a virtual cluster: size, min, max",
    ("cluster", "bound"),
)

# -- each instance's latest heartbeat: name, the row's field, scale to the family's unit, help --
_HEARTBEAT = (
    ("mcc_instance_cpu_percent", "cpu_percent", 1.0, "CPU use (100 = one core)"),
    ("mcc_instance_resident_memory_bytes", "rss_bytes", 1.0, "resident set size"),
    ("mcc_instance_messages_in_per_second", "msgs_in_per_s", 1.0, "samples taken per second"),
    ("mcc_instance_messages_out_per_second", "msgs_out_per_s", 1.0, "samples written per second"),
    ("mcc_instance_latency_p50_seconds", "latency_p50_us", 1e-6, "median latency from origin_ns"),
    ("mcc_instance_latency_p99_seconds", "latency_p99_us", 1e-6, "p99 latency from origin_ns"),
    ("mcc_instance_heartbeat_age_seconds", "beat_age_ms", 1e-3, "time since the last heartbeat"),
)
HEARTBEAT = tuple((Family(n, "gauge", doc, INSTANCE), f, s) for n, f, s, doc in _HEARTBEAT)

# -- a bus (``BusStatistics``): `bus_counter` per integer counter, and the drops per topic --
BUS_DECODE_DROPS = Family(
    "mcc_bus_decode_drops",
    "counter",
    "received samples dropped (did not decode or failed the topic's checks), by topic",
    ("process", "topic"),
)


def bus_counter(field: str) -> Family:
    """The family of the counter ``field`` of `BusStatistics`."""
    return Family(f"mcc_bus_{field}", "counter", f"bus counter {field}", ("process",))


# -- the air picture and the engagements (the console) -------------------------------------------
TRACKS = Family("mcc_tracks", "gauge", "tracks in the air picture")
THREATS = Family("mcc_threats", "gauge", "evaluated threats")
AIR_PICTURES = Family("mcc_air_pictures", "counter", "air pictures received")
ENGAGEMENT_OUTCOMES = Family(
    "mcc_engagement_outcomes",
    "counter",
    "engagement outcomes reported by the launchers",
    ("outcome",),
)
DETECTION_TO_ORDER_LATENCY = Family(
    "mcc_detection_to_order_latency_seconds",
    "summary",
    "detection (origin_ns) to engagement order (issue_ns), recent orders",
)
AIR_PICTURE_LATENCY = Family(
    "mcc_air_picture_latency_seconds",
    "summary",
    "detection (origin_ns) to air picture publication (publish_ns), recent pictures",
)

# -- the console itself --------------------------------------------------------------------------
CONSOLE_BUS_TO_CLIENT = Family(
    "mcc_console_bus_to_client_seconds",
    "summary",
    "air picture publication to the console's websocket send (recent updates)",
)
CONSOLE_BUS_SECURED = Family(
    "mcc_console_bus_secured",
    "gauge",
    "1 when the console's bus joined with DDS Security (an identity of the mission's "
    "keystore), 0 when it did not (a mission with security: none)",
)
CONSOLE_CLIENTS = Family("mcc_console_clients", "gauge", "connected browsers")
CONSOLE_UPDATES_SENT = Family(
    "mcc_console_updates_sent", "counter", "state updates sent to browsers"
)
CONSOLE_UPDATE_BYTES = Family(
    "mcc_console_update_bytes", "gauge", "size of the latest state update sent to browsers"
)
CONSOLE_COMMANDS = Family(
    "mcc_console_commands", "counter", "control requests, by result (audit log)", ("result",)
)
CONSOLE_LOGINS = Family("mcc_console_logins", "counter", "login attempts, by result", ("result",))
TOPIC_SAMPLES = Family(
    "mcc_topic_samples", "counter", "samples seen on the bus by the observer, by topic", ("topic",)
)
CONSOLE_BUS_SAMPLES = Family(
    "mcc_console_bus_samples", "counter", "bus samples taken by the console, by topic", ("topic",)
)
CONSOLE_SAMPLES_DROPPED = Family(
    "mcc_console_samples_dropped",
    "counter",
    "bus samples the console dropped, by topic and reason (nonfinite, future, malformed, "
    "oversized; topic snapshot: non-finite numbers caught by the JSON's last guard)",
    ("topic", "reason"),
)
CONSOLE_IDENTITY_ERRORS = Family(
    "mcc_console_identity_errors",
    "counter",
    "track identity/IFF values the console shows as '?', by topic and reason "
    "(unknown_value: outside the enum; malformed: packed arrays of another length)",
    ("topic", "reason"),
)
CONSOLE_LEFT_OUT = Family(
    "mcc_console_left_out",
    "counter",
    "items left out by the console's bounds (tracks, threats, orders, ...), by kind",
    ("kind",),
)
