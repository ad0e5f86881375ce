"""`python -m mcc.observer`: a mission's metrics and traces from one more subscriber on its bus.

The observer joins the mission (found by name in ``$MCC_HOME/active``, or by ``--domain``)
with the mission's ``console`` identity when it is secured, and reads what the mission already
publishes: ``MissionStatus`` (every instance's state and restarts, the clusters),
``Heartbeat`` (every instance's rates, latency p50/p99, CPU, memory) and the sensor-to-shooter
topics (sample counts per topic; one OpenTelemetry trace per engagement with
``--otlp-endpoint``). It serves them on ``/metrics`` (prometheus-client) and, under systemd,
reports ``READY=1`` and pings the watchdog while its bus is alive.

    python -m mcc.observer --mission sam-toc --metrics-port 9464 \\
        --otlp-endpoint http://127.0.0.1:4318/v1/traces
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

from mcc.bus import Bus, Transport
from mcc.errors import MccError
from mcc.observe import notify
from mcc.observe.families import TOPIC_SAMPLES
from mcc.observe.logs import add_log_format_argument, configure_logging
from mcc.observe.metrics import (
    BusStatsCollector,
    HeartbeatCollector,
    StatusCollector,
    serve,
)
from mcc.observe.trace import ChainTracer

__all__ = ["MissionStatusView", "TopicCounter", "main"]


class MissionStatusView:
    """The latest ``MissionStatus`` as the dict `StatusCollector` reads (the shape of
    ``Supervisor.status()``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._status: dict[str, Any] = {"instances": [], "clusters": {}}
        self.received = 0

    def observe(self, status: Any) -> None:
        try:
            clusters = json.loads(status.clusters_json or "{}")
        except ValueError:
            clusters = {}
        view = {
            "mission": status.mission,
            "phase": status.phase,
            "state": status.state.name.removeprefix("SYSTEM_").lower(),
            "backend": status.backend,
            "clusters": clusters if isinstance(clusters, dict) else {},
            "instances": [
                {
                    "id": e.system_id,
                    "state": e.state.name.removeprefix("SYSTEM_").lower(),
                    "node": e.node,
                    "restarts": int(e.restarts),
                }
                for e in status.systems
            ],
        }
        with self._lock:
            self._status = view
            self.received += 1

    def __call__(self) -> dict[str, Any]:
        with self._lock:
            return self._status


class TopicCounter(Collector):
    """``mcc_topic_samples_total{topic}``: samples of the chain's topics seen by the observer
    (Prometheus's ``rate()`` of it is the per-topic rate)."""

    def __init__(self, tracer: ChainTracer) -> None:
        self._tracer = tracer

    def collect(self) -> Iterator[Any]:
        yield TOPIC_SAMPLES.metric(
            ((topic,), n) for topic, n in sorted(self._tracer.samples.items())
        )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m mcc.observer",
        description="Serve a running mission's metrics (/metrics) and export its engagement "
        "traces over OTLP, from the samples on its bus.",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--mission", help="a mission running here (`mcc up`), found by name")
    where.add_argument(
        "--domain", type=int, help="the mission's DDS domain (transport and tag: environment)"
    )
    parser.add_argument("--metrics-host", default="127.0.0.1", help="(%(default)s)")
    parser.add_argument("--metrics-port", type=int, default=9464, help="(%(default)s; 0: any)")
    parser.add_argument(
        "--otlp-endpoint", help="export traces over OTLP/HTTP, e.g. http://127.0.0.1:4318/v1/traces"
    )
    parser.add_argument("--duration", type=float, help="stop after this many seconds")
    add_log_format_argument(parser)
    return parser


def _join(args: argparse.Namespace) -> tuple[int, Transport | None, str | None]:
    """Domain, transport and discovery tag of the mission (its console identity if secured)."""
    if args.domain is not None:
        return args.domain, None, None
    from mcc.orchestrate import registry
    from mcc.orchestrate.client import mission_transport, operator_transport
    from mcc.security.mission import CONSOLE

    record = registry.find(args.mission)
    transport, tag = mission_transport(record)
    if record.keystore:
        transport = operator_transport(record.keystore, record.mission, CONSOLE, base=transport)
    return record.domain, transport, tag


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    configure_logging(args.log_format)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    provider = None
    try:
        domain, transport, tag = _join(args)
        if args.otlp_endpoint:
            from mcc.observe.trace import tracer_provider

            provider = tracer_provider(otlp_endpoint=args.otlp_endpoint, service_name="mcc")
            tracer = ChainTracer(provider.get_tracer("mcc.chain"))
        else:
            tracer = ChainTracer(None)  # counts samples per topic, emits no trace
        with Bus(domain, transport=transport, discovery_tag=tag, name="mcc observe") as bus:
            status, beats = MissionStatusView(), HeartbeatCollector()
            registry = CollectorRegistry()
            for collector in (
                StatusCollector(status),
                beats,
                BusStatsCollector(lambda: bus.stats, process="observer"),
                TopicCounter(tracer),
            ):
                registry.register(collector)
            _subscribe(bus, status, beats, tracer)
            with serve(registry, port=args.metrics_port, address=args.metrics_host) as endpoint:
                print(f"mcc observe: {endpoint.url} (domain {domain})", flush=True)
                notify.ready(status=f"serving {endpoint.url}")
                dog = notify.start_watchdog(lambda: not stop.is_set())
                deadline = None if args.duration is None else time.monotonic() + args.duration
                while not stop.wait(0.5):
                    if deadline is not None and time.monotonic() >= deadline:
                        break
                notify.stopping()
                if dog is not None:
                    dog.stop()
    except MccError as exc:
        print(f"mcc observe: error: {exc}", file=sys.stderr)
        return 2
    finally:
        if provider is not None:
            provider.shutdown()  # flushes the spans still in the batch
    return 0


def _subscribe(
    bus: Bus, status: MissionStatusView, beats: HeartbeatCollector, tracer: ChainTracer
) -> None:
    def feed(handler: Any) -> Any:
        def on_data(reader: Any) -> None:
            for sample in reader.take(256):
                handler(sample)

        return on_data

    bus.reader("MissionStatus", on_data=feed(status.observe))
    bus.reader("Heartbeat", on_data=feed(beats.observe))
    tracer.attach(bus)
