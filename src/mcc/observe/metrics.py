"""Prometheus metrics of MCC processes with prometheus-client: custom collectors that read what
a process already keeps (a supervisor's `status()`, a bus's `BusStatistics`, the heartbeats the
instances publish) at scrape time, and an HTTP endpoint that serves them.

Wiring a supervisor (``mcc up``)::

    from mcc.observe.metrics import serve, supervisor_registry

    endpoint = serve(supervisor_registry(supervisor), port=9464)   # GET /metrics
    ...
    endpoint.close()

A service or app with a bus adds ``BusStatsCollector(lambda: bus.stats)`` to a registry of its
own. Metric names are those of docs/observability.md; counters end in ``_total``.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from mcc.lifecycle import Closeable

__all__ = [
    "BusStatsCollector",
    "HeartbeatCollector",
    "MetricsServer",
    "StatusCollector",
    "serve",
    "supervisor_registry",
]


class _HasStatus(Protocol):
    def status(self) -> dict[str, Any]: ...


class StatusCollector(Collector):
    """A mission as a supervisor sees it (``Supervisor.status()``): its phase and state, each
    instance up or not and its restarts, each virtual cluster's size."""

    def __init__(self, status: Callable[[], Mapping[str, Any]]) -> None:
        self._status = status

    def collect(self) -> Iterator[Any]:
        status = self._status()
        info = GaugeMetricFamily(
            "mcc_mission_info",
            "the mission: name, phase, state, backend, security (value 1)",
            labels=["mission", "phase", "state", "backend", "security"],
        )
        info.add_metric(
            [str(status.get(k, "")) for k in ("mission", "phase", "state", "backend", "security")],
            1,
        )
        yield info
        up = GaugeMetricFamily(
            "mcc_instance_up",
            "1 when the instance is running, else 0",
            labels=["instance", "system", "state", "node"],
        )
        restarts = CounterMetricFamily(
            "mcc_instance_restarts",
            "restarts by the supervisor",
            labels=["instance", "system"],
        )
        for inst in status.get("instances", []):
            system = str(inst["id"]).split("/")[1] if "/" in str(inst["id"]) else ""
            up.add_metric(
                [inst["id"], system, inst["state"], str(inst.get("node") or "")],
                1 if inst["state"] == "running" else 0,
            )
            restarts.add_metric([inst["id"], system], inst.get("restarts", 0))
        yield up
        yield restarts
        size = GaugeMetricFamily(
            "mcc_cluster_size", "instances of a virtual cluster", labels=["cluster", "bound"]
        )
        for name, cluster in status.get("clusters", {}).items():
            for bound in ("size", "min", "max"):
                size.add_metric([name, bound], cluster[bound])
        yield size


class BusStatsCollector(Collector):
    """A bus's counters (``Bus.stats``): QoS events, refused samples and the samples dropped
    because they did not decode or failed the topic's checks, per topic."""

    def __init__(self, stats: Callable[[], Any], *, process: str = "") -> None:
        self._stats = stats
        self._process = process

    def collect(self) -> Iterator[Any]:
        stats = self._stats()
        for f in dataclasses.fields(stats):
            value = getattr(stats, f.name)
            if isinstance(value, int) and not isinstance(value, bool):
                family = CounterMetricFamily(
                    f"mcc_bus_{f.name}", f"bus counter {f.name}", labels=["process"]
                )
                family.add_metric([self._process], value)
                yield family
        dropped = CounterMetricFamily(
            "mcc_bus_decode_drops",
            "received samples dropped (did not decode or failed the topic's checks), by topic",
            labels=["process", "topic"],
        )
        for topic, n in sorted(stats.dropped_by_topic.items()):
            dropped.add_metric([self._process, topic], n)
        yield dropped


class HeartbeatCollector(Collector):
    """The latest heartbeat of every instance (`observe` it from a Heartbeat reader): message
    rates, latency p50/p99 from origin_ns, CPU and memory."""

    _FIELDS = (
        ("mcc_instance_messages_in_per_second", "samples taken per second", "msgs_in_per_s", 1.0),
        (
            "mcc_instance_messages_out_per_second",
            "samples written per second",
            "msgs_out_per_s",
            1.0,
        ),
        (
            "mcc_instance_latency_p50_seconds",
            "median latency from origin_ns",
            "latency_p50_us",
            1e-6,
        ),
        ("mcc_instance_latency_p99_seconds", "p99 latency from origin_ns", "latency_p99_us", 1e-6),
        ("mcc_instance_cpu_percent", "CPU use (100 = one core)", "cpu_percent", 1.0),
        ("mcc_instance_resident_memory_bytes", "resident set size", "rss_bytes", 1.0),
    )

    def __init__(self, *, max_instances: int = 10_000) -> None:
        self._latest: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._max = max_instances

    def observe(self, heartbeat: Any) -> None:
        with self._lock:
            if heartbeat.system_id in self._latest or len(self._latest) < self._max:
                self._latest[heartbeat.system_id] = heartbeat

    def collect(self) -> Iterator[Any]:
        with self._lock:
            beats = list(self._latest.values())
        for name, doc, attr, scale in self._FIELDS:
            family = GaugeMetricFamily(name, doc, labels=["instance", "host"])
            for hb in beats:
                family.add_metric([hb.system_id, hb.host], float(getattr(hb, attr)) * scale)
            yield family


def supervisor_registry(
    supervisor: _HasStatus, *, bus_stats: Callable[[], Any] | None = None
) -> CollectorRegistry:
    """A registry with the supervisor's `StatusCollector` (and its bus's counters)."""
    registry = CollectorRegistry()
    registry.register(StatusCollector(supervisor.status))
    if bus_stats is not None:
        registry.register(BusStatsCollector(bus_stats, process="supervisor"))
    return registry


@dataclasses.dataclass
class MetricsServer(Closeable):
    """A running ``/metrics`` endpoint; `close` stops it."""

    address: str
    port: int
    _server: Any
    _thread: threading.Thread

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5.0)


def serve(
    registry: CollectorRegistry, *, port: int = 0, address: str = "127.0.0.1"
) -> MetricsServer:
    """Serve ``registry`` on http://ADDRESS:PORT/metrics (port 0: a free one) from a daemon
    thread. Loopback by default: expose it further only behind the node's firewall."""
    server, thread = start_http_server(port, addr=address, registry=registry)
    return MetricsServer(address, server.server_address[1], server, thread)
