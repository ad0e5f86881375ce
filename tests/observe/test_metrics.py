"""The supervisor's and a bus's /metrics, scraped over HTTP and read by prometheus-client's
own text parser."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from mcc.bus import Bus
from mcc.observe.metrics import (
    BusStatsCollector,
    HeartbeatCollector,
    serve,
    supervisor_registry,
)
from mcc.orchestrate import Supervisor
from mcc.types import Heartbeat, SystemState
from tests.conftest import wait_for

APP = "mcc.orchestrate.probe:idle"
MANIFEST = f"""
mission: observed
domain: {{domain}}
security: none
systems:
  worker: {{app: "{APP}", restart: always, replicas: 2, resources: {{cpus: 0.1}}}}
clusters:
  farm: {{app: "{APP}", size: 2, min: 1, max: 4, resources: {{cpus: 0.1}}}}
"""


def scrape(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def values(family: Any, **labels: str) -> list[float]:
    return [
        s.value
        for s in family.samples
        if all(s.labels.get(k) == v for k, v in labels.items()) and not s.name.endswith("_created")
    ]


def test_a_supervisors_metrics(run_supervisor: Callable[..., Supervisor]) -> None:
    sup = run_supervisor(MANIFEST)
    wait_for(
        lambda: sum(i["state"] == "running" for i in sup.status()["instances"]) == 4,
        60,
        "two workers and two of the farm running",
    )
    with serve(supervisor_registry(sup, bus_stats=lambda: sup.bus.stats)) as endpoint:
        families = scrape(endpoint.url)
    info = families["mcc_mission_info"].samples[0]
    assert info.labels["mission"] == "observed" and info.value == 1
    assert values(families["mcc_instance_up"], instance="observed/worker/0") == [1]
    assert values(families["mcc_instance_up"], instance="observed/worker/1") == [1]
    restarts = families["mcc_instance_restarts"]
    assert restarts.type == "counter"
    assert values(restarts, instance="observed/worker/0", system="worker") == [0]
    assert sorted(values(families["mcc_cluster_size"], cluster="farm")) == [
        1,
        2,
        4,
    ]  # min, size, max
    assert values(families["mcc_bus_decode_drops"]) == []  # nothing bad was sent
    assert values(families["mcc_bus_samples_dropped"], process="supervisor") == [0]


def test_bus_counters_and_heartbeats(bus_env: dict[str, str], domain_id: int) -> None:
    beats = HeartbeatCollector()
    beats.observe(
        Heartbeat(
            system_id="m/tracker/0",
            host="node-1",
            pid=42,
            state=SystemState.SYSTEM_RUNNING,
            msgs_in_per_s=20.0,
            msgs_out_per_s=10.0,
            latency_p50_us=1500.0,
            latency_p99_us=4000.0,
            cpu_percent=12.5,
            rss_bytes=1 << 20,
        )
    )
    with Bus(domain_id, name="metrics-test") as bus:
        bus.stats.dropped_by_topic["Track"] = 3  # as `StatsBook.dropped` counts a bad sample
        bus.stats.samples_dropped = 3
        registry = CollectorRegistry()
        registry.register(BusStatsCollector(lambda: bus.stats, process="tracker"))
        registry.register(beats)
        with serve(registry) as endpoint:
            families = scrape(endpoint.url)
    assert values(families["mcc_bus_decode_drops"], topic="Track", process="tracker") == [3]
    p99 = families["mcc_instance_latency_p99_seconds"]
    assert values(p99, instance="m/tracker/0", system="tracker") == [0.004]  # as the console's
    assert values(families["mcc_instance_messages_in_per_second"], host="node-1") == [20.0]
    assert values(families["mcc_instance_resident_memory_bytes"]) == [1 << 20]
