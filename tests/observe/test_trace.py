"""One engagement's trace, built from the samples' own timestamps: the spans, their order in
time and their parentage; then the same from samples written on a real bus."""

from __future__ import annotations

import time
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mcc.bus import Bus
from mcc.observe.trace import ChainTracer, tracer_provider
from mcc.types import DetectionBatch, EngagementOrder, OrderStatus, Threat, Track
from tests.conftest import wait_for

T0 = 1_700_000_000_000_000_000  # origin_ns of the scan that starts the chain
CHAIN = ["detection", "track", "threat", "order", "launch"]


def samples(origin_ns: int = T0) -> dict[str, Any]:
    order = EngagementOrder(
        order_id=11,
        weapon_id="sam-1",
        track_id=5,
        pk=0.8,
        rounds=2,
        issue_ns=origin_ns + 40_000_000,
        origin_ns=origin_ns,
        status=OrderStatus.ORDER_ISSUED,
    )
    outcome = EngagementOrder(**{**vars(order), "status": OrderStatus.ORDER_IN_FLIGHT})
    return {
        "batch": DetectionBatch(
            sensor_id="radar-1", scan_id=9, origin_ns=origin_ns, publish_ns=origin_ns + 2_000_000
        ),
        "track": Track(
            track_id=5, tracker_id="tracker-0", update_ns=origin_ns, origin_ns=origin_ns
        ),
        "threat": Threat(
            track_id=5,
            asset_id="airbase",
            score=0.9,
            rank=1,
            update_ns=origin_ns + 30_000_000,
            origin_ns=origin_ns,
        ),
        "order": order,
        "outcome": outcome,
    }


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


def check_trace(spans: list[Any], origin_ns: int) -> None:
    by_name = {s.name: s for s in spans}
    assert sorted(by_name) == sorted(["engagement", *CHAIN])
    assert len({s.context.trace_id for s in spans}) == 1
    root = by_name["engagement"]
    assert root.parent is None and root.start_time == origin_ns
    parent = root
    for name in CHAIN:  # each hop is the child of the hop that caused it
        span = by_name[name]
        assert span.parent is not None and span.parent.span_id == parent.context.span_id, name
        assert span.start_time <= span.end_time <= root.end_time, name
        if parent is not root:
            assert span.start_time == parent.end_time, name
        parent = span
    assert by_name["launch"].attributes["mcc.outcome"] == "ORDER_IN_FLIGHT"
    assert by_name["detection"].attributes["mcc.sensor_id"] == "radar-1"


def test_one_engagement_one_trace(exporter: InMemorySpanExporter) -> None:
    provider = tracer_provider(exporter=exporter)
    tracer = ChainTracer(provider.get_tracer("test"))
    s = samples()
    receive = T0 + 20_000_000
    tracer.on_detection(s["batch"], receive)
    tracer.on_track(s["track"], receive)
    tracer.on_threat(s["threat"], receive)
    tracer.on_order(s["order"], T0 + 41_000_000)
    assert tracer.on_outcome(s["order"], T0 + 42_000_000) is False  # ISSUED: not answered yet
    assert tracer.on_outcome(s["outcome"], T0 + 50_000_000) is True
    assert tracer.on_outcome(s["outcome"], T0 + 60_000_000) is False  # one trace per order
    spans = list(exporter.get_finished_spans())
    check_trace(spans, T0)
    by_name = {sp.name: sp for sp in spans}
    assert (by_name["detection"].start_time, by_name["detection"].end_time) == (
        T0,
        T0 + 2_000_000,
    )
    assert by_name["track"].end_time == receive
    assert by_name["threat"].end_time == T0 + 30_000_000
    assert by_name["order"].end_time == T0 + 40_000_000
    assert by_name["launch"].end_time == T0 + 50_000_000
    assert tracer.samples == {
        "DetectionBatch": 1,
        "Track": 1,
        "Threat": 1,
        "EngagementOrder": 1,
        "EngagementOutcome": 3,
    }


def test_a_hop_not_seen_is_left_out(exporter: InMemorySpanExporter) -> None:
    tracer = ChainTracer(tracer_provider(exporter=exporter).get_tracer("test"))
    s = samples()
    tracer.on_detection(s["batch"], T0)
    tracer.on_order(s["order"], T0)  # the track and threat were never seen
    assert tracer.on_outcome(s["outcome"], T0 + 50_000_000)
    by_name = {sp.name: sp for sp in exporter.get_finished_spans()}
    assert sorted(by_name) == ["detection", "engagement", "launch", "order"]
    assert by_name["order"].parent.span_id == by_name["detection"].context.span_id


def test_traces_from_samples_on_the_bus(
    exporter: InMemorySpanExporter, bus_env: dict[str, str], domain_id: int
) -> None:
    origin = time.time_ns()
    s = samples(origin)
    tracer = ChainTracer(tracer_provider(exporter=exporter).get_tracer("test"))
    with Bus(domain_id, name="trace-reader") as reader_bus, Bus(domain_id, name="chain") as bus:
        tracer.attach(reader_bus)
        writers = {
            topic: bus.writer(topic)
            for topic in ("DetectionBatch", "Track", "Threat", "EngagementOrder")
        }
        outcome_writer = bus.writer("EngagementOutcome")
        wait_for(
            lambda: all(w.matched() for w in [*writers.values(), outcome_writer]),
            15,
            "the tracer's readers matched",
        )
        writers["DetectionBatch"].write(s["batch"])
        writers["Track"].write(s["track"])
        writers["Threat"].write(s["threat"])
        writers["EngagementOrder"].write(s["order"])
        wait_for(lambda: tracer.samples["EngagementOrder"] == 1, 15, "the order read")
        outcome_writer.write(s["outcome"])
        wait_for(lambda: tracer.traces == 1, 15, "the engagement's trace")
    check_trace(list(exporter.get_finished_spans()), origin)
