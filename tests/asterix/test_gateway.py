"""The gateway on real sockets (loopback unicast and multicast), and as an app beside the
radar simulator: the scans it publishes are the simulator's own, within ASTERIX's resolution."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mcc.asterix.emit import PlotEmitter
from mcc.asterix.gateway import GatewaySettings, RadarGateway, run_gateway
from mcc.bus import Bus
from mcc.types import DetectionBatch
from mcc.types.arrays import float_field, optional_field
from tests.apps.configs import configured
from tests.conftest import app_instance, wait_for

SITE = (0.0, -2000.0, 10.0)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running(settings: GatewaySettings, status: Path) -> Iterator[list[DetectionBatch]]:
    out: list[DetectionBatch] = []
    gateway = RadarGateway(settings, out.append)
    stop, ready = threading.Event(), threading.Event()
    texts: list[str] = []
    thread = threading.Thread(
        target=run_gateway,
        kwargs=dict(
            gateway=gateway,
            stopping=stop.is_set,
            on_status=lambda doc, text: texts.append(text),
            status_path=status,
            on_ready=ready.set,
        ),
        daemon=True,
    )
    thread.start()
    assert ready.wait(10), "the gateway did not open its socket"
    try:
        yield out
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()
    assert texts and "scans" in texts[-1]


def send_scans(emitter: PlotEmitter, scans: int, out: list[DetectionBatch]) -> None:
    rng = np.random.default_rng(5)
    start = time.time_ns()
    for k in range(scans):
        n = 4 + k
        emitter.send_scan(
            start + k * 10**8,
            range_m=rng.uniform(1000, 30_000, n),
            azimuth_rad=rng.uniform(0, 6.2, n),
            height_m=rng.uniform(100, 5000, n),
            iff=None,
            doppler_mps=rng.uniform(-100, 100, n),
            amplitude_db=rng.uniform(5, 30, n),
        )
    wait_for(lambda: len(out) >= scans, 10, f"{scans} batches (got {len(out)})")
    assert [b.count for b in out] == [4 + k for k in range(scans)]
    assert len({b.origin_ns for b in out}) == scans


@pytest.mark.parametrize("group", [None, "239.255.48.9"])
def test_scans_sent_over_udp_come_out_as_batches(group: str | None, tmp_path: Path) -> None:
    port = free_port()
    settings = GatewaySettings(
        sensor_id="radar-1",
        site_m=SITE,
        listen=f"127.0.0.1:{port}",
        group=group,
        interface="127.0.0.1",
        sac=0,
        sic=3,
        status_period_s=0.1,
    )
    status = tmp_path / "status.json"
    with running(settings, status) as out:
        to = f"{group or '127.0.0.1'}:{port}"
        emitter = PlotEmitter(to, sac=0, sic=3, rotation_s=0.1, interface="127.0.0.1")
        try:
            send_scans(emitter, 4, out)
        finally:
            emitter.close()
    doc = json.loads(status.read_text())
    assert doc["batches_published"] == 4 and doc["data_source"] == "0/3"
    assert doc["input"]["records"]["048"] == 4 + 5 + 6 + 7 and doc["input"]["dropped"] == {}
    assert doc["scan_period_s"] == pytest.approx(0.1, abs=1 / 128)


@pytest.mark.slow
def test_the_gateway_app_publishes_the_simulators_scans(
    bus_env: dict[str, str], domain_id: int, tmp_path: Path
) -> None:
    """The simulator publishes each scan itself and sends it as ASTERIX; the gateway app
    publishes what it receives: same scans, same plots within ASTERIX's resolution."""
    port = free_port()
    common = {"scenario": "scenarios/small.yaml", "radar": "radar-1"}
    radar_env = configured(
        bus_env, **common, truth_source="scenario", asterix_to=f"127.0.0.1:{port}", asterix_sic=9
    )
    gateway_env = configured(bus_env, **common, listen=f"127.0.0.1:{port}", sac=0, sic=9)
    by_source: dict[str, dict[int, DetectionBatch]] = {}
    with Bus(domain_id) as bus:
        reader = bus.reader("DetectionBatch")
        with (
            app_instance("mcc.apps.asterix:gateway", env=gateway_env, system="gw", logs=tmp_path),
            app_instance("mcc.apps.radar:radar", env=radar_env, system="sim", logs=tmp_path),
        ):

            def both_saw_scans() -> bool:
                for batch in reader.take(64):
                    source = reader.source_of(batch) or "?"
                    by_source.setdefault(source, {})[batch.origin_ns] = batch
                sim, gw = by_source.get("sim.0", {}), by_source.get("gw.0", {})
                return len(set(sim) & set(gw)) >= 6

            logs = lambda: "\n".join(p.read_text()[-2000:] for p in tmp_path.glob("*.log"))  # noqa: E731
            wait_for(both_saw_scans, 40, f"scans from both: {sorted(by_source)}\n{logs()}")
    sim, gw = by_source["sim.0"], by_source["gw.0"]
    compared = 0
    for origin in sorted(set(sim) & set(gw)):
        a, b = sim[origin], gw[origin]
        assert (b.sensor_id, b.count) == (a.sensor_id, a.count)
        assert (b.sensor_x_m, b.sensor_y_m, b.sensor_z_m) == SITE
        ra, rb = float_field(a, "range_m"), float_field(b, "range_m")
        keep = ra < 256 * 1852  # all of them here
        assert rb == pytest.approx(ra[keep], abs=1852 / 512)
        assert float_field(b, "azimuth_rad") == pytest.approx(
            float_field(a, "azimuth_rad"), abs=5e-5
        )
        # Height in 25 ft steps: z within 3.9 m, elevation accordingly.
        assert float_field(b, "z_m") == pytest.approx(float_field(a, "z_m"), abs=3.9)
        assert optional_field(b, "iff") is None and optional_field(a, "iff") is None
        compared += a.count
    assert compared > 10
    status: dict[str, Any] = json.loads((tmp_path / "asterix-gw-0.json").read_text())
    assert status["input"]["dropped"] == {} and status["scan_period_s"] == pytest.approx(0.5)
