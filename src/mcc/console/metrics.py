"""``/metrics``: system health and latency figures in the Prometheus text format (0.0.4),
written by prometheus-client from a collector over one snapshot of the console's state.

From the heartbeats and ``MissionStatus`` (per instance: up, CPU, memory, message rates,
latency p50/p99, restarts), the mission (phase, tracks, threats, orders, kills), the
end-to-end latencies measured on the bus (detection → engagement order, air picture) and the
console itself (clients, updates sent, bus → browser lag, bus samples per topic, samples
dropped and items left out, the size of an update, whether its bus is secured).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from mcc.console.state import percentile

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
QUANTILES = (0.5, 0.99)


@dataclass
class ServerFigures:
    """What the web side counts (mutated by the server only, read here)."""

    clients: int = 0
    updates_sent: int = 0
    commands: dict[str, int] = field(default_factory=dict)  # result → count
    logins: dict[str, int] = field(default_factory=dict)
    bus_to_client_ms: list[float] = field(default_factory=list)  # recent, bounded by the server
    bus_secured: bool | None = None  # None: the bus is not joined yet
    snapshot_bytes: int = 0  # the latest update sent to browsers


class _Writer:
    """Collects metric families for one scrape; `text` renders them with prometheus-client."""

    def __init__(self) -> None:
        self.metrics: list[Metric] = []

    def family(
        self,
        name: str,
        kind: str,
        doc: str,
        samples: Iterable[tuple[Mapping[str, Any], float | None]],
    ) -> None:
        metric = Metric(name, doc, kind)
        sample_name = name + "_total" if kind == "counter" else name
        for labels, value in samples:
            if value is not None:
                metric.add_sample(sample_name, {k: str(v) for k, v in labels.items()}, value)
        self.metrics.append(metric)

    def summary(self, name: str, doc: str, values_s: list[float]) -> None:
        metric = Metric(name, doc, "summary")
        for q in QUANTILES:
            p = percentile(values_s, q * 100)
            if p is not None:
                metric.add_sample(name, {"quantile": str(q)}, p)
        metric.add_sample(name + "_sum", {}, sum(values_s))
        metric.add_sample(name + "_count", {}, len(values_s))
        self.metrics.append(metric)

    def text(self) -> str:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Snapshot(self.metrics))
        return generate_latest(registry).decode()


class _Snapshot(Collector):
    def __init__(self, metrics: list[Metric]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return iter(self._metrics)


def render(
    snapshot: Mapping[str, Any],
    samples: Mapping[str, int],
    server: ServerFigures,
    *,
    dropped: Mapping[tuple[str, str], int] | None = None,
    left_out: Mapping[str, int] | None = None,
) -> str:
    """The Prometheus exposition of one `LiveState.snapshot` and the server's figures (with
    `LiveState.dropped` and `LiveState.left_out_total`)."""
    w = _Writer()
    mission = snapshot.get("mission")
    if mission:
        w.family(
            "mcc_mission_info",
            "gauge",
            "the mission seen on the bus: name, phase, state, backend (value 1)",
            [
                (
                    {
                        "mission": mission["name"],
                        "phase": mission["phase"],
                        "state": mission["state"],
                        "backend": mission["backend"],
                    },
                    1,
                )
            ],
        )
    health = snapshot.get("health", [])

    def per_instance(key: str, scale: float = 1.0) -> list[tuple[dict[str, Any], float | None]]:
        return [
            (
                {"instance": r["id"], "system": r["system"], "host": r.get("host", "")},
                None if r.get(key) is None else float(r[key]) * scale,
            )
            for r in health
        ]

    w.family(
        "mcc_instance_up",
        "gauge",
        "1 when the instance is running (supervisor state or last heartbeat), else 0",
        [
            (
                {"instance": r["id"], "system": r["system"], "state": r["state"]},
                1 if r["state"] == "running" else 0,
            )
            for r in health
        ],
    )
    w.family(
        "mcc_instance_cpu_percent", "gauge", "CPU use (100 = one core)", per_instance("cpu_percent")
    )
    w.family(
        "mcc_instance_resident_memory_bytes",
        "gauge",
        "resident set size",
        per_instance("rss_bytes"),
    )
    w.family(
        "mcc_instance_messages_in_per_second",
        "gauge",
        "samples taken per second",
        per_instance("msgs_in_per_s"),
    )
    w.family(
        "mcc_instance_messages_out_per_second",
        "gauge",
        "samples written per second",
        per_instance("msgs_out_per_s"),
    )
    w.family(
        "mcc_instance_latency_p50_seconds",
        "gauge",
        "median end-to-end latency from origin_ns over the last heartbeat period",
        per_instance("latency_p50_us", 1e-6),
    )
    w.family(
        "mcc_instance_latency_p99_seconds",
        "gauge",
        "99th percentile end-to-end latency over the last heartbeat period",
        per_instance("latency_p99_us", 1e-6),
    )
    w.family(
        "mcc_instance_heartbeat_age_seconds",
        "gauge",
        "time since the last heartbeat",
        per_instance("beat_age_ms", 1e-3),
    )
    w.family(
        "mcc_instance_restarts", "gauge", "restarts by the supervisor", per_instance("restarts")
    )
    w.family(
        "mcc_queue_pending",
        "gauge",
        "instances waiting in the supervisor's queue",
        [({}, len(snapshot.get("queue", [])))],
    )

    stats = snapshot.get("stats", {})
    w.family("mcc_tracks", "gauge", "tracks in the air picture", [({}, stats.get("tracks", 0))])
    w.family("mcc_threats", "gauge", "evaluated threats", [({}, stats.get("threats", 0))])
    w.family(
        "mcc_air_pictures", "counter", "air pictures received", [({}, stats.get("pictures", 0))]
    )
    w.family(
        "mcc_engagement_outcomes",
        "counter",
        "engagement outcomes reported by the launchers",
        [
            ({"outcome": k}, stats.get(f"{k}s" if k != "aborted" else k, 0))
            for k in ("kill", "miss", "aborted")
        ],
    )
    series = snapshot.get("series", {})
    w.summary(
        "mcc_detection_to_order_latency_seconds",
        "detection (origin_ns) to engagement order (issue_ns), recent orders",
        [v / 1e3 for _, v in series.get("det_to_order_ms", [])],
    )
    w.summary(
        "mcc_air_picture_latency_seconds",
        "detection (origin_ns) to air picture publication (publish_ns), recent pictures",
        [v / 1e3 for _, v in series.get("picture_latency_ms", [])],
    )
    w.summary(
        "mcc_console_bus_to_client_seconds",
        "air picture publication to the console's websocket send (recent updates)",
        [v / 1e3 for v in server.bus_to_client_ms],
    )
    w.family(
        "mcc_console_bus_secured",
        "gauge",
        "1 when the console's bus joined with DDS Security (an identity of the mission's "
        "keystore), 0 when it did not (a mission with security: none)",
        [({}, None if server.bus_secured is None else int(server.bus_secured))],
    )
    w.family("mcc_console_clients", "gauge", "connected browsers", [({}, server.clients)])
    w.family(
        "mcc_console_updates_sent",
        "counter",
        "state updates sent to browsers",
        [({}, server.updates_sent)],
    )
    w.family(
        "mcc_console_bus_samples",
        "counter",
        "bus samples taken by the console, by topic",
        [({"topic": t}, n) for t, n in samples.items()],
    )
    w.family(
        "mcc_console_samples_dropped",
        "counter",
        "bus samples the console dropped, by topic and reason (nonfinite, future, malformed, "
        "oversized; topic snapshot: non-finite numbers caught by the JSON's last guard)",
        [({"topic": t, "reason": r}, n) for (t, r), n in sorted((dropped or {}).items())],
    )
    w.family(
        "mcc_console_identity_errors",
        "counter",
        "track identity/IFF values the console shows as '?', by topic and reason "
        "(unknown_value: outside the enum; malformed: packed arrays of another length)",
        [
            ({"topic": t, "reason": r}, n)
            for t, reasons in sorted((snapshot.get("identity_errors") or {}).items())
            for r, n in sorted(reasons.items())
        ],
    )
    w.family(
        "mcc_console_left_out",
        "counter",
        "items left out by the console's bounds (tracks, threats, orders, ...), by kind",
        [({"kind": k}, n) for k, n in sorted((left_out or {}).items())],
    )
    w.family(
        "mcc_console_update_bytes",
        "gauge",
        "size of the latest state update sent to browsers",
        [({}, server.snapshot_bytes)],
    )
    w.family(
        "mcc_console_commands",
        "counter",
        "control requests, by result (audit log)",
        [({"result": r}, n) for r, n in sorted(server.commands.items())],
    )
    w.family(
        "mcc_console_logins",
        "counter",
        "login attempts, by result",
        [({"result": r}, n) for r, n in sorted(server.logins.items())],
    )
    return w.text()
