"""ASTERIX on the bus: ``gateway`` (one radar's CAT048/CAT034 stream in, ``DetectionBatch``
out) and ``track_output`` (the ``AirPicture`` out as CAT062 with CAT065 status).

The work is `mcc.asterix` (`RadarGateway`, `TrackOutput`); this module is their settings (the
systems' ``config:`` blocks, `GatewayConfig` and `TrackOutputConfig`) and their wiring to the
bus. docs/asterix.md says how to connect a real radar and a neighbouring centre::

    gateway: {app: mcc.apps.asterix:gateway,
              config: {scenario: scenarios/sam-toc.yaml, radar: search, listen: "0.0.0.0:30048",
                       group: 239.255.48.1, sac: 0, sic: 1}}
    track-out: {app: mcc.apps.asterix:track_output, config: {to: "10.0.0.9:30062", sic: 100}}
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from mcc.apps.args import DEFAULT_SCENARIO, ScenarioFile
from mcc.apps.scenario import RadarModel, Scenario, load_scenario
from mcc.asterix.gateway import GatewaySettings, RadarGateway, run_gateway
from mcc.asterix.output import OutputSettings, TrackOutput
from mcc.asterix.udp import check_address, check_ipv4, is_multicast, open_sender
from mcc.errors import MccError
from mcc.files import write_atomic
from mcc.orchestrate.appconfig import AppConfig, Positive, app_config
from mcc.orchestrate.appspec import app
from mcc.orchestrate.runtime import AppContext
from mcc.security.mission import Topics

__all__ = ["GatewayConfig", "TrackOutputConfig", "gateway", "track_output"]


Octet = Annotated[int, Field(ge=0, le=255)]


class GatewayConfig(AppConfig):
    """A radar gateway's ``config:`` block (every field optional)."""

    scenario: ScenarioFile = Field(
        default=Path(DEFAULT_SCENARIO), description="scenario YAML: the radar's site and scan"
    )
    radar: str | None = Field(
        default=None, description="scenario radar id (default: the instance index's radar)"
    )
    listen: str = Field(default="0.0.0.0:30048", description="UDP HOST:PORT to receive on")
    group: str | None = Field(default=None, description="multicast group to join (none: unicast)")
    interface: str = Field(default="0.0.0.0", description="interface address joining the group")
    sac: Octet | None = Field(
        default=None, description="the radar's SAC (none: the first data source heard)"
    )
    sic: Octet | None = Field(default=None, description="the radar's SIC (with sac)")
    allow_from: tuple[str, ...] = Field(
        default=(), description="sender IPv4 addresses taken (empty: any)"
    )
    per: Literal["scan", "sector"] = Field(
        default="scan", description="a DetectionBatch per scan (north marker) or per sector"
    )
    max_scan_s: Positive | None = Field(
        default=None,
        description="a scan is closed this long after its first plot, s "
        "(default: 1.5 scenario scan periods)",  # fmt: skip
    )
    max_range_m: Positive | None = Field(
        default=None, description="plots further are dropped, m (default: 1.25 x coverage)"
    )
    max_time_offset_s: Positive = Field(
        default=30.0, description="plots stamped further from this clock are dropped, s"
    )
    max_datagrams_per_s: Positive = Field(default=5000.0, description="datagrams taken per s")
    max_bytes_per_s: float = Field(
        default=20e6, ge=65535, allow_inf_nan=False, description="octets taken per s"
    )
    max_plots_per_scan: int = Field(default=20_000, ge=1, description="larger scans are dropped")
    status_period_s: Positive = Field(default=1.0, description="status file period, s")
    status: Path | None = Field(
        default=None, description="status JSON (default RUN_DIR/asterix-SYSTEM-INDEX.json)"
    )

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        return check_address(value)

    @field_validator("group")
    @classmethod
    def _group(cls, value: str | None) -> str | None:
        if value is not None:
            check_ipv4(value)
            if not is_multicast(value):
                raise ValueError("expected a multicast group, 224.0.0.0-239.255.255.255")
        return value

    @field_validator("interface")
    @classmethod
    def _interface(cls, value: str) -> str:
        return check_ipv4(value)

    @field_validator("allow_from")
    @classmethod
    def _senders(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for address in value:
            check_ipv4(address)
        return value

    @model_validator(mode="after")
    def _sac_with_sic(self) -> GatewayConfig:
        if (self.sac is None) != (self.sic is None):
            raise ValueError("give both sac and sic, or neither")
        return self


class TrackOutputConfig(AppConfig):
    """The track output's ``config:`` block (``to`` is required)."""

    to: str = Field(description="UDP HOST:PORT (a unicast address or a multicast group)")
    interface: str | None = Field(
        default=None, description="interface address to send multicast on (none: the route's)"
    )
    ttl: int = Field(default=1, ge=1, le=255, description="multicast hops")
    rate_hz: Positive = Field(default=1.0, description="CAT062 updates per second")
    sac: Octet = Field(default=0, description="this centre's SAC (I062/010, I065/010)")
    sic: Octet = Field(default=1, description="this centre's SIC")
    service_id: Octet = Field(default=1, description="I062/015 and I065/015")
    tracker_id: str | None = Field(
        default=None, description="the tracker whose picture goes out (none: the first heard)"
    )
    origin_lat_deg: float | None = Field(
        default=None, ge=-90, le=90, description="WGS-84 latitude of the mission's ENU origin"
    )
    origin_lon_deg: float | None = Field(
        default=None, ge=-180, le=180, description="its longitude (with the latitude: I062/105)"
    )
    origin_height_m: float = Field(
        default=0.0, ge=-1000, le=10_000, description="its ellipsoid height, m"
    )
    status_period_s: Positive = Field(default=1.0, description="CAT065 SDPS status period, s")
    max_picture_age_s: Positive = Field(
        default=5.0, description="an older picture is not sent (SDPS degraded), s"
    )
    max_datagram_octets: int = Field(default=1400, ge=64, le=65507, description="UDP payload")
    max_tracks: int = Field(default=20_000, ge=1, description="larger pictures are dropped")
    status: Path | None = Field(
        default=None, description="status JSON (default RUN_DIR/asterix-SYSTEM-INDEX.json)"
    )

    @field_validator("to")
    @classmethod
    def _to(cls, value: str) -> str:
        return check_address(value)

    @field_validator("interface")
    @classmethod
    def _interface(cls, value: str | None) -> str | None:
        return value if value is None else check_ipv4(value)

    @model_validator(mode="after")
    def _origin_whole(self) -> TrackOutputConfig:
        if (self.origin_lat_deg is None) != (self.origin_lon_deg is None):
            raise ValueError("give both origin_lat_deg and origin_lon_deg, or neither")
        return self


def _radar_of(scenario: Scenario, radar_id: str | None, index: int) -> RadarModel:
    if not scenario.radars:
        raise MccError(f"scenario {scenario.id!r} has no radars; add one under 'radars:'")
    if radar_id is None:
        return scenario.radars[index % len(scenario.radars)]
    return scenario.radar(radar_id)


def _status_writer(ctx: AppContext, path: Path | None) -> Path:
    ident = ctx.identity
    return path or ctx.run_dir / f"asterix-{ident.system}-{ident.index}.json"


@app(topics=Topics(publish=("DetectionBatch",)), config=GatewayConfig)
def gateway(ctx: AppContext) -> int:
    """Receive one radar's ASTERIX stream and publish its scans as ``DetectionBatch``es.

    Settings: `GatewayConfig` (``ctx.config``). The radar's site, scan period and coverage come
    from the scenario (``radar``, default the instance index's); the stream from ``listen``
    (and ``group``). The heartbeat counts datagrams in and batches out, records each batch's
    publish − origin, and carries the gateway's figures as its message.
    """
    try:
        opts = app_config(ctx, GatewayConfig)
        model = _radar_of(load_scenario(opts.scenario), opts.radar, ctx.identity.index)
    except MccError as exc:
        print(f"mcc: error: {exc}", file=sys.stderr)
        return 2
    settings = GatewaySettings(
        sensor_id=model.id,
        site_m=tuple(float(v) for v in model.position_m),  # type: ignore[arg-type]
        listen=opts.listen,
        group=opts.group,
        interface=opts.interface,
        sac=opts.sac,
        sic=opts.sic,
        allow_from=tuple(opts.allow_from),
        per=opts.per,
        max_scan_s=opts.max_scan_s or 1.5 * model.scan_period_s,
        max_range_m=opts.max_range_m or 1.25 * model.max_range_m,
        max_time_offset_s=opts.max_time_offset_s,
        max_datagrams_per_s=opts.max_datagrams_per_s,
        max_bytes_per_s=opts.max_bytes_per_s,
        max_plots_per_scan=opts.max_plots_per_scan,
        status_period_s=opts.status_period_s,
        scenario_period_s=model.scan_period_s,
    )
    writer = ctx.bus.writer("DetectionBatch")
    heartbeat = ctx.heartbeat

    def publish(msg: Any) -> None:
        writer.write(msg)
        heartbeat.count_out()
        heartbeat.record_latency_ns(msg.publish_ns - msg.origin_ns)

    def on_status(doc: dict[str, Any], text: str) -> None:
        heartbeat.message = text[:240]

    radar = RadarGateway(settings, publish, log=ctx.log)
    ctx.log.info(
        "gateway of radar %s at %s: ASTERIX on %s%s, a batch per %s",
        model.id,
        settings.site_m,
        opts.listen,
        f" (group {opts.group} on {opts.interface})" if opts.group else "",
        opts.per,
    )
    try:
        run_gateway(
            radar,
            stopping=lambda: ctx.stopping,
            on_status=on_status,
            status_path=_status_writer(ctx, opts.status),
            count_in=heartbeat.count_in,
        )
    except OSError as exc:
        print(f"mcc: error: cannot receive ASTERIX on {opts.listen}: {exc}", file=sys.stderr)
        return 1
    return 0


@app(topics=Topics(subscribe=("AirPicture",)), config=TrackOutputConfig)
def track_output(ctx: AppContext) -> int:
    """Send the air picture to ``to`` as CAT062 system tracks, with CAT065 status.

    Settings: `TrackOutputConfig` (``ctx.config``). The heartbeat counts pictures in and
    datagrams out and carries the output's figures as its message.
    """
    try:
        opts = app_config(ctx, TrackOutputConfig)
    except MccError as exc:
        print(f"mcc: error: {exc}", file=sys.stderr)
        return 2
    origin = None
    if opts.origin_lat_deg is not None and opts.origin_lon_deg is not None:
        origin = (opts.origin_lat_deg, opts.origin_lon_deg, opts.origin_height_m)
    settings = OutputSettings(
        to=opts.to,
        sac=opts.sac,
        sic=opts.sic,
        service_id=opts.service_id,
        rate_hz=opts.rate_hz,
        tracker_id=opts.tracker_id,
        origin=origin,
        status_period_s=opts.status_period_s,
        max_picture_age_s=opts.max_picture_age_s,
        max_datagram_octets=opts.max_datagram_octets,
        max_tracks=opts.max_tracks,
        interface=opts.interface,
        ttl=opts.ttl,
    )
    try:
        sock = open_sender(opts.to, interface=opts.interface, ttl=opts.ttl)
    except OSError as exc:
        print(f"mcc: error: cannot send ASTERIX to {opts.to}: {exc}", file=sys.stderr)
        return 1
    out = TrackOutput(settings, sock.send, log=ctx.log)
    reader = ctx.bus.reader("AirPicture")
    status_path = _status_writer(ctx, opts.status)
    ctx.log.info("track output to %s: CAT062 at %.3g Hz, SAC/SIC %d/%d", opts.to, opts.rate_hz,
                 opts.sac, opts.sic)  # fmt: skip
    next_status = time.monotonic()
    with sock:
        while not ctx.wait(0.02):
            for msg in reader.take(64):
                ctx.heartbeat.count_in()
                out.on_picture(msg, time.time_ns())
            before = out.datagrams
            out.tick(time.time_ns())
            ctx.heartbeat.count_out(out.datagrams - before)
            if time.monotonic() >= next_status:
                next_status += opts.status_period_s
                _write_status(ctx, status_path, out.status())
        _write_status(ctx, status_path, out.status())
    return 0


def _write_status(ctx: AppContext, path: Path, doc: dict[str, Any]) -> None:
    ctx.heartbeat.message = (
        f"{doc['updates']} updates, {doc['records']} CAT062 records, {doc['tracks_now']} tracks now"
    )
    try:
        write_atomic(path, json.dumps(doc, indent=1) + "\n")
    except OSError as exc:
        ctx.log.debug("cannot write %s: %s", path, exc)
