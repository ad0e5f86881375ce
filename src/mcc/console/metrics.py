"""``/metrics``: the console's view of the mission in the Prometheus text format (0.0.4), written
by prometheus-client. The families are those of `mcc.observe.families`, the mission's and its
instances' filled as the observer fills them (`mcc.observe.metrics`), here from one snapshot of
the console's state; the rest are the air picture and engagements, their end-to-end latencies
measured on the bus, and the console's own figures.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from mcc.observe import families
from mcc.observe.metrics import heartbeat_metrics, status_metrics

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4


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
    scrape = _Scrape(
        _mission(snapshot),
        _engagements(snapshot),
        _latencies(snapshot, server),
        _server(server),
        _bus_samples(snapshot, samples, dropped or {}, left_out or {}),
    )
    return generate_latest(scrape).decode()


class _Scrape(Collector):
    def __init__(self, *metrics: Iterable[Metric]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return itertools.chain(*self._metrics)


def _mission(snapshot: Mapping[str, Any]) -> Iterator[Metric]:
    """The mission and its instances (``MissionStatus`` and heartbeats), as the observer has
    them."""
    mission = snapshot.get("mission") or {}
    health = snapshot.get("health", [])
    yield from status_metrics(mission | {"mission": mission.get("name"), "instances": health})
    yield from heartbeat_metrics(health)


def _engagements(snapshot: Mapping[str, Any]) -> Iterator[Metric]:
    """The air picture and what came of the engagements."""
    stats = snapshot.get("stats", {})
    yield families.TRACKS.one(stats.get("tracks", 0))
    yield families.THREATS.one(stats.get("threats", 0))
    yield families.AIR_PICTURES.one(stats.get("pictures", 0))
    outcomes = (("kill", "kills"), ("miss", "misses"), ("aborted", "aborted"))
    yield families.ENGAGEMENT_OUTCOMES.metric(((o,), stats.get(key, 0)) for o, key in outcomes)


def _latencies(snapshot: Mapping[str, Any], server: ServerFigures) -> Iterator[Metric]:
    """End to end, from the ``origin_ns`` of the detections to an order, to an air picture,
    and from an air picture to the browsers."""
    series = snapshot.get("series", {})
    yield families.DETECTION_TO_ORDER_LATENCY.summary(
        [ms / 1e3 for _, ms in series.get("det_to_order_ms", [])]
    )
    yield families.AIR_PICTURE_LATENCY.summary(
        [ms / 1e3 for _, ms in series.get("picture_latency_ms", [])]
    )
    yield families.CONSOLE_BUS_TO_CLIENT.summary([ms / 1e3 for ms in server.bus_to_client_ms])


def _server(server: ServerFigures) -> Iterator[Metric]:
    """The web side: browsers, updates, requests and logins, whether the bus is secured."""
    secured = None if server.bus_secured is None else int(server.bus_secured)
    yield families.CONSOLE_BUS_SECURED.one(secured)
    yield families.CONSOLE_CLIENTS.one(server.clients)
    yield families.CONSOLE_UPDATES_SENT.one(server.updates_sent)
    yield families.CONSOLE_UPDATE_BYTES.one(server.snapshot_bytes)
    yield families.CONSOLE_COMMANDS.metric(((r,), n) for r, n in sorted(server.commands.items()))
    yield families.CONSOLE_LOGINS.metric(((r,), n) for r, n in sorted(server.logins.items()))


def _bus_samples(
    snapshot: Mapping[str, Any],
    samples: Mapping[str, int],
    dropped: Mapping[tuple[str, str], int],
    left_out: Mapping[str, int],
) -> Iterator[Metric]:
    """The bus samples the console took, dropped, showed in part or left out."""
    yield families.CONSOLE_BUS_SAMPLES.metric(((t,), n) for t, n in samples.items())
    yield families.CONSOLE_SAMPLES_DROPPED.metric(sorted(dropped.items()))
    errors = snapshot.get("identity_errors") or {}
    yield families.CONSOLE_IDENTITY_ERRORS.metric(
        ((t, r), n) for t, reasons in sorted(errors.items()) for r, n in sorted(reasons.items())
    )
    yield families.CONSOLE_LEFT_OUT.metric(((k,), n) for k, n in sorted(left_out.items()))
