"""`mcc demo`: a small live exchange on the bus, until the SAM TOC mission apps exist.

A simulated radar runs in its own process: it publishes a ``DetectionBatch`` per scan
(10 Hz, three aircraft plus clutter), a ``Heartbeat`` per second, and answers ``Command``
requests. This process prints each scan with its end-to-end latency (from ``origin_ns``),
asks the radar for its status over request/reply, and ends with a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np

from mcc.bus import Bus, HeartbeatPublisher, Replier, Requester
from mcc.types import Command, CommandReply, DetectionBatch
from mcc.types.arrays import pack, packed_field

SCAN_PERIOD_S = 0.1


def _scan(rng: np.random.Generator, scan_id: int, t_s: float) -> DetectionBatch:
    """Three aircraft on straight legs plus Poisson clutter, seen from a radar at the origin."""
    heading = np.array([0.3, 2.0, 4.1])
    speed = np.array([220.0, 250.0, 180.0])
    start = np.array([[-40e3, 30e3], [35e3, 20e3], [10e3, -45e3]])
    xy = start + (speed[:, None] * t_s) * np.stack([np.sin(heading), np.cos(heading)], axis=1)
    z = np.array([6000.0, 9000.0, 300.0])
    clutter = rng.poisson(2)
    xy = np.vstack([xy, rng.uniform(-50e3, 50e3, size=(clutter, 2))])
    z = np.concatenate([z, rng.uniform(0, 2000, clutter)])
    rng_m = np.sqrt((xy**2).sum(axis=1) + z**2)
    now = time.time_ns()
    return DetectionBatch(
        sensor_id="radar-1",
        scan_id=scan_id,
        origin_ns=now,
        publish_ns=now,
        count=len(z),
        range_m=pack(rng_m, "<f8"),
        azimuth_rad=pack(np.arctan2(xy[:, 0], xy[:, 1]), "<f8"),
        elevation_rad=pack(np.arcsin(z / rng_m), "<f8"),
        radial_velocity_mps=pack(rng.normal(0, 100, len(z)), "<f8"),
        snr_db=pack(rng.uniform(8, 30, len(z)), "<f8"),
        x_m=pack(xy[:, 0], "<f8"),
        y_m=pack(xy[:, 1], "<f8"),
        z_m=pack(z, "<f8"),
    )


def run_radar(domain_id: int, duration_s: float) -> int:
    """The radar side: publish scans, beat, answer commands."""
    rng = np.random.default_rng(7)
    scans = 0
    with Bus(domain_id, name="demo-radar") as bus:
        writer = bus.writer("DetectionBatch")

        def on_command(cmd: Command) -> CommandReply:
            return CommandReply(
                ok=True,
                message=f"radar-1 {cmd.verb}: {scans} scans published",
                result_json=json.dumps({"scans": scans, "pid": os.getpid()}),
            )

        with (
            HeartbeatPublisher(bus, "demo/radar/0") as heartbeat,
            Replier(bus, on_command, replier_id="demo/radar/0"),
        ):
            writer.wait_for_readers(1, timeout_s=5.0)
            start = time.monotonic()
            while time.monotonic() - start < duration_s:
                writer.write(_scan(rng, scans, time.monotonic() - start))
                scans += 1
                heartbeat.count_out()
                time.sleep(max(0.0, start + scans * SCAN_PERIOD_S - time.monotonic()))
    return 0


def run_demo(*, duration_s: float = 5.0, domain_id: int = 42) -> int:
    """Start the radar process and show what arrives."""
    from rich.console import Console

    console = Console()
    tag = f"mcc-demo-{os.getpid()}"
    env = {**os.environ, "MCC_DISCOVERY_TAG": tag}
    console.print(
        f"[bold]MCC demo[/bold]: a radar process publishes DetectionBatch at "
        f"{1 / SCAN_PERIOD_S:g} Hz on domain {domain_id} for {duration_s:g} s"
    )
    radar = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mcc.demo",
            "radar",
            "--domain",
            str(domain_id),
            "--duration",
            str(duration_s),
        ],
        env=env,
    )
    latencies_ms: list[float] = []
    try:
        with Bus(domain_id, discovery_tag=tag, name="demo-console") as bus:
            scans = bus.reader("DetectionBatch")
            beats = bus.reader("Heartbeat")
            status: list[str] = []
            deadline = time.monotonic() + duration_s + 10.0
            asked = False
            while radar.poll() is None and time.monotonic() < deadline:
                for batch in scans.take_wait(64, timeout_s=0.5):
                    latency_ms = (time.time_ns() - batch.origin_ns) / 1e6
                    latencies_ms.append(latency_ms)
                    x, y = packed_field(batch, "x_m")[0], packed_field(batch, "y_m")[0]
                    if batch.scan_id % 5 == 0:
                        console.print(
                            f"scan {batch.scan_id:3d}  {batch.count:2d} detections  "
                            f"first at ({x / 1e3:7.2f}, {y / 1e3:7.2f}) km  "
                            f"latency {latency_ms:6.3f} ms"
                        )
                for hb in beats.take():
                    console.print(
                        f"[dim]heartbeat {hb.system_id} {hb.state.name} "
                        f"cpu {hb.cpu_percent:.1f}% rss {hb.rss_bytes / 2**20:.1f} MiB "
                        f"out {hb.msgs_out_per_s:.1f} msg/s[/dim]"
                    )
                if not asked and len(latencies_ms) >= 10:
                    asked = True
                    threading.Thread(target=_ask_status, args=(bus, status), daemon=True).start()
            if status:
                console.print(f"request/reply: {status[0]}")
    finally:
        if radar.poll() is None:
            radar.terminate()
        radar.wait(10)
    if not latencies_ms:
        console.print("[red]no scan received: the bus is not working on this machine[/red]")
        return 1
    p50, p99 = np.percentile(latencies_ms, [50, 99])
    console.print(
        f"[bold green]received {len(latencies_ms)} scans[/bold green]; end-to-end "
        f"latency p50 {p50:.3f} ms, p99 {p99:.3f} ms (radar exit code {radar.returncode})"
    )
    return 0 if radar.returncode == 0 else 1


def _ask_status(bus: Bus, out: list[str]) -> None:
    requester: Requester[Command, CommandReply] = Requester(bus, "Command", "CommandReply")
    with requester:
        start = time.perf_counter()
        reply = requester.request(Command(mission="demo", verb="status"), timeout_s=5.0)
        rtt_ms = (time.perf_counter() - start) * 1e3
        out.append(f"{reply.message!r} from {reply.replier_id} in {rtt_ms:.2f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m mcc.demo")
    parser.add_argument("role", choices=["radar"])
    parser.add_argument("--domain", type=int, default=42)
    parser.add_argument("--duration", type=float, default=5.0)
    args = parser.parse_args()
    return run_radar(args.domain, args.duration)


if __name__ == "__main__":
    sys.exit(main())
