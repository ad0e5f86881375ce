"""Prometheus metrics of MCC processes with prometheus-client: collectors that fill the families
of `mcc.observe.families` at scrape time from what a process already keeps (a supervisor's
`status()`, a bus's `BusStatistics`, the heartbeats the instances publish), and an HTTP endpoint
that serves them. The console's ``/metrics`` fills the same families with `status_metrics` and
`heartbeat_metrics` from its own view of the bus.

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
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from mcc.lifecycle import Closeable
from mcc.observe import families

__all__ = [
    "BusStatsCollector",
    "HeartbeatCollector",
    "MetricsServer",
    "StatusCollector",
    "heartbeat_metrics",
    "serve",
    "status_metrics",
    "supervisor_registry",
]


def _instance(row: Mapping[str, Any]) -> tuple[str, str, str]:
    """The `families.INSTANCE` labels of a row with ``id`` (``mission/system/index``) and host."""
    parts = str(row["id"]).split("/")
    return str(row["id"]), parts[1] if len(parts) == 3 else "", str(row.get("host") or "")


def status_metrics(status: Mapping[str, Any]) -> Iterator[Metric]:
    """The mission as a supervisor's ``status()`` shows it (or a view of ``MissionStatus`` of
    that shape): its info once it is named, each instance up or not and its restarts, the
    instances pending, each virtual cluster's size and bounds."""
    if status.get("mission"):
        yield families.MISSION_INFO.metric(
            [([status.get(k) or "" for k in families.MISSION_INFO.labels], 1)]
        )
    instances = status.get("instances", [])
    yield families.INSTANCE_UP.metric(
        ((*_instance(i), i["state"], i.get("node") or ""), int(i["state"] == "running"))
        for i in instances
    )
    yield families.INSTANCE_RESTARTS.metric((_instance(i), i.get("restarts")) for i in instances)
    yield families.QUEUE_PENDING.one(sum(i["state"] == "pending" for i in instances))
    yield families.CLUSTER_SIZE.metric(
        ((name, bound), cluster.get(bound) if isinstance(cluster, Mapping) else None)
        for name, cluster in status.get("clusters", {}).items()
        for bound in ("size", "min", "max")
    )


def heartbeat_metrics(rows: Sequence[Mapping[str, Any]]) -> Iterator[Metric]:
    """Each instance's figures from its latest heartbeat: rows with ``id``, ``host`` and the
    fields of `families.HEARTBEAT` (a field that is None or absent is left out)."""
    for family, field, scale in families.HEARTBEAT:
        yield family.metric(
            (_instance(r), None if r.get(field) is None else float(r[field]) * scale) for r in rows
        )


class _HasStatus(Protocol):
    def status(self) -> dict[str, Any]: ...


class StatusCollector(Collector):
    """A mission as a supervisor sees it (``Supervisor.status()``): `status_metrics`."""

    def __init__(self, status: Callable[[], Mapping[str, Any]]) -> None:
        self._status = status

    def collect(self) -> Iterator[Metric]:
        return status_metrics(self._status())


class BusStatsCollector(Collector):
    """A bus's counters (``Bus.stats``): QoS events, refused samples and the samples dropped
    because they did not decode or failed the topic's checks, per topic."""

    def __init__(self, stats: Callable[[], Any], *, process: str = "") -> None:
        self._stats = stats
        self._process = process

    def collect(self) -> Iterator[Metric]:
        stats = self._stats()
        for f in dataclasses.fields(stats):
            value = getattr(stats, f.name)
            if isinstance(value, int) and not isinstance(value, bool):
                yield families.bus_counter(f.name).metric([((self._process,), value)])
        yield families.BUS_DECODE_DROPS.metric(
            ((self._process, topic), n) for topic, n in sorted(stats.dropped_by_topic.items())
        )


class HeartbeatCollector(Collector):
    """The latest heartbeat of every instance (`observe` it from a Heartbeat reader):
    `heartbeat_metrics`, its age counted from when it was observed."""

    def __init__(self, *, max_instances: int = 10_000) -> None:
        self._latest: dict[str, tuple[Any, float]] = {}
        self._lock = threading.Lock()
        self._max = max_instances

    def observe(self, heartbeat: Any) -> None:
        with self._lock:
            if heartbeat.system_id in self._latest or len(self._latest) < self._max:
                self._latest[heartbeat.system_id] = (heartbeat, time.monotonic())

    def collect(self) -> Iterator[Metric]:
        now = time.monotonic()
        with self._lock:
            latest = list(self._latest.values())
        return heartbeat_metrics(
            [
                {field: getattr(hb, field, None) for _, field, _ in families.HEARTBEAT}
                | {"id": hb.system_id, "host": hb.host, "beat_age_ms": (now - seen) * 1e3}
                for hb, seen in latest
            ]
        )


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
