"""OpenTelemetry traces of the sensor-to-shooter chain, built from the timestamps already on the
samples: one trace per engagement, detection → track → threat → order → launch.

The apps are not instrumented: a `ChainTracer` reads the chain's topics like any other
subscriber and, when a launcher answers an order (``EngagementOutcome``), joins the samples by
the order's ``origin_ns`` (the scan that led to it) and ``track_id``. Each hop is a span whose
parent is the hop that caused it, under one root span ``engagement``::

    engagement (origin_ns → outcome)
      detection   origin_ns → DetectionBatch.publish_ns          (radar)
        track     → first Track of that origin seen on the bus   (tracker)
          threat  → Threat.update_ns of that track and origin    (tewa)
            order → EngagementOrder.issue_ns                     (tewa)
              launch → the launcher's answer seen on the bus     (launcher)

A hop whose sample was not seen (a late join, a lost best-effort batch) is left out and its
children attach to the hop before it. Wiring (``pip install 'mcc[observe]'``)::

    from mcc.observe.trace import ChainTracer, tracer_provider

    provider = tracer_provider(otlp_endpoint="http://collector:4318/v1/traces")
    tracer = ChainTracer(provider.get_tracer("mcc.chain"))
    tracer.attach(bus)          # readers on the five topics, the bus's dispatcher thread
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["CHAIN_TOPICS", "ChainTracer", "tracer_provider"]

CHAIN_TOPICS = ("DetectionBatch", "Track", "Threat", "EngagementOrder", "EngagementOutcome")
_ANSWERED = {"ORDER_IN_FLIGHT", "ORDER_KILL", "ORDER_MISS", "ORDER_ABORTED"}


def tracer_provider(
    *, otlp_endpoint: str | None = None, exporter: Any = None, service_name: str = "mcc"
) -> Any:
    """An SDK ``TracerProvider`` exporting to ``exporter`` (an in-memory one in tests) or over
    OTLP/HTTP to ``otlp_endpoint`` (needs the ``observe`` extra)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    if otlp_endpoint is not None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp_endpoint)))
    return provider


@dataclass(frozen=True)
class _Seen:
    end_ns: int
    attributes: dict[str, Any]


class _Bounded(OrderedDict[Any, _Seen]):
    """The latest ``limit`` entries: the chain is joined within seconds, never from old state."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def keep(self, key: Any, value: _Seen) -> None:
        if key in self:
            return  # the first sighting is when it happened
        self[key] = value
        while len(self) > self.limit:
            self.popitem(last=False)


class ChainTracer:
    """Joins the chain's samples into one trace per answered order (see the module's doc);
    with ``tracer`` None it only counts the samples per topic (``samples``)."""

    def __init__(self, tracer: Any | None, *, limit: int = 4096) -> None:
        self._tracer = tracer
        self._lock = threading.Lock()
        self._detections = _Bounded(limit)  # origin_ns
        self._tracks = _Bounded(limit)  # (track_id, origin_ns)
        self._threats = _Bounded(limit)  # (track_id, origin_ns)
        self._orders = _Bounded(limit)  # order_id
        self._traced: OrderedDict[int, None] = OrderedDict()
        self._limit = limit
        self.samples: dict[str, int] = dict.fromkeys(CHAIN_TOPICS, 0)
        self.traces = 0

    # -- samples in ---------------------------------------------------------------------------
    def on_detection(self, batch: Any, receive_ns: int | None = None) -> None:
        with self._lock:
            self.samples["DetectionBatch"] += 1
            end = batch.publish_ns or _now(receive_ns)
            attrs = {"mcc.sensor_id": batch.sensor_id, "mcc.scan_id": int(batch.scan_id)}
            self._detections.keep(int(batch.origin_ns), _Seen(end, attrs))

    def on_track(self, track: Any, receive_ns: int | None = None) -> None:
        with self._lock:
            self.samples["Track"] += 1
            attrs = {"mcc.track_id": int(track.track_id), "mcc.tracker_id": track.tracker_id}
            key = (int(track.track_id), int(track.origin_ns))
            self._tracks.keep(key, _Seen(_now(receive_ns), attrs))

    def on_threat(self, threat: Any, receive_ns: int | None = None) -> None:
        with self._lock:
            self.samples["Threat"] += 1
            attrs = {
                "mcc.track_id": int(threat.track_id),
                "mcc.asset_id": threat.asset_id,
                "mcc.threat_score": float(threat.score),
                "mcc.threat_rank": int(threat.rank),
            }
            key = (int(threat.track_id), int(threat.origin_ns))
            self._threats.keep(key, _Seen(threat.update_ns or _now(receive_ns), attrs))

    def on_order(self, order: Any, receive_ns: int | None = None) -> None:
        with self._lock:
            self.samples["EngagementOrder"] += 1
            self._orders.keep(int(order.order_id), _Seen(order.issue_ns, _order_attrs(order)))

    def on_outcome(self, outcome: Any, receive_ns: int | None = None) -> bool:
        """A launcher's answer: the order's trace is emitted (once); True when it was."""
        with self._lock:
            self.samples["EngagementOutcome"] += 1
            status = getattr(outcome.status, "name", str(outcome.status))
            order_id = int(outcome.order_id)
            if self._tracer is None or status not in _ANSWERED or order_id in self._traced:
                return False
            self._traced[order_id] = None
            while len(self._traced) > self._limit:
                self._traced.popitem(last=False)
            hops = list(self._hops(outcome, status, _now(receive_ns)))
        self._emit(int(outcome.origin_ns), hops)
        self.traces += 1
        return True

    # -- the trace ------------------------------------------------------------------------------
    def _hops(
        self, outcome: Any, status: str, answered_ns: int
    ) -> Iterator[tuple[str, int, dict[str, Any]]]:
        origin = int(outcome.origin_ns)
        key = (int(outcome.track_id), origin)
        seen = [
            ("detection", self._detections.get(origin)),
            ("track", self._tracks.get(key)),
            ("threat", self._threats.get(key)),
            ("order", self._orders.get(int(outcome.order_id))),
        ]
        for name, hop in seen:
            if hop is not None:
                yield name, hop.end_ns, hop.attributes
        yield "launch", answered_ns, {**_order_attrs(outcome), "mcc.outcome": status}

    def _emit(self, origin_ns: int, hops: list[tuple[str, int, dict[str, Any]]]) -> None:
        from opentelemetry import trace

        assert self._tracer is not None

        end_ns = max([origin_ns, *(end for _, end, _ in hops)])
        root = self._tracer.start_span(
            "engagement",
            start_time=origin_ns,
            attributes={"mcc.origin_ns": origin_ns, **hops[-1][2]},
        )
        parent = root
        start = origin_ns
        spans = []
        for name, end, attrs in hops:
            end = max(end, start)  # clocks of different hosts: never a negative hop
            span = self._tracer.start_span(
                name,
                context=trace.set_span_in_context(parent),
                start_time=start,
                attributes=attrs,
            )
            spans.append((span, end))
            parent, start = span, end
        for span, end in reversed(spans):
            span.end(end_time=end)
        root.end(end_time=end_ns)

    # -- on a bus ---------------------------------------------------------------------------------
    def attach(self, bus: Any) -> list[Any]:
        """Readers on the chain's topics that feed this tracer (kept by the bus until it closes)."""
        handlers = {
            "DetectionBatch": self.on_detection,
            "Track": self.on_track,
            "Threat": self.on_threat,
            "EngagementOrder": self.on_order,
            "EngagementOutcome": self.on_outcome,
        }
        readers = []
        for topic, handler in handlers.items():

            def on_data(reader: Any, handler: Any = handler) -> None:
                now = time.time_ns()
                for sample in reader.take(256):
                    handler(sample, now)

            readers.append(bus.reader(topic, on_data=on_data, history=False))
        return readers


def _now(receive_ns: int | None) -> int:
    return receive_ns if receive_ns is not None else time.time_ns()


def _order_attrs(order: Any) -> dict[str, Any]:
    return {
        "mcc.order_id": int(order.order_id),
        "mcc.weapon_id": order.weapon_id,
        "mcc.track_id": int(order.track_id),
        "mcc.rounds": int(order.rounds),
        "mcc.pk": float(order.pk),
    }
