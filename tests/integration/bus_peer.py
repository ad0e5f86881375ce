"""A peer process for the bus tests: ``python -m tests.integration.bus_peer ROLE``.

Prints ``ready`` once its endpoints exist, then does its role until stdin closes.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

import numpy as np

from mcc import types
from mcc.bus import Bus, Replier, topic_spec
from mcc.types.arrays import pack, to_ndarray_msg


# One distinctive sample per catalogue topic; the reading side compares with these.
def sample_for(topic: str) -> object:
    t = types
    arr = pack(np.array([1.5, -2.25, 3.0]), "<f8")
    samples = {
        "DetectionBatch": t.DetectionBatch(
            sensor_id="radar-7",
            scan_id=11,
            origin_ns=123,
            count=3,
            **{f: arr for f in t.PACKED_ARRAYS["DetectionBatch"]},
        ),
        "Truth": t.Truth(
            scenario_id="s1",
            time_ns=5,
            count=3,
            target_id=pack([1, 2, 3], "<u4"),
            target_class=pack([1, 2, 3], "u1"),
            **{f: arr for f in ("x_m", "y_m", "z_m", "vx_mps", "vy_mps", "vz_mps")},
        ),
        "AirPicture": t.AirPicture(
            tracker_id="trk",
            cycle=9,
            count=1,
            track_id=pack([4], "<u4"),
            status=pack([1], "u1"),
            classification=pack([2], "u1"),
            quality=pack([0.9], "<f8"),
            state=pack(np.arange(6.0), "<f8"),
            covariance=pack(np.eye(6), "<f8"),
        ),
        "Track": t.Track(
            track_id=42,
            tracker_id="trk",
            status=t.TrackStatus.TRACK_CONFIRMED,
            classification=t.TargetClass.CLASS_CRUISE_MISSILE,
            x_m=1.0,
            vz_mps=-3.5,
            covariance=[float(i) for i in range(36)],
            quality=0.8,
            hits=5,
        ),
        "Threat": t.Threat(
            track_id=42,
            asset_id="airbase",
            score=0.7,
            rank=1,
            time_to_impact_s=61.5,
            cpa_m=120.0,
            time_to_cpa_s=60.0,
        ),
        "EngagementOrder": t.EngagementOrder(
            order_id=3,
            weapon_id="sam-2",
            track_id=42,
            pk=0.85,
            rounds=2,
            status=t.OrderStatus.ORDER_ISSUED,
        ),
        "EngagementOutcome": t.EngagementOrder(
            order_id=3,
            weapon_id="sam-2",
            track_id=42,
            pk=0.85,
            rounds=2,
            status=t.OrderStatus.ORDER_KILL,
        ),
        "WeaponStatus": t.WeaponStatus(
            weapon_id="sam-2",
            state=t.WeaponState.WEAPON_READY,
            rounds_ready=4,
            rounds_total=8,
            max_range_m=40e3,
        ),
        "Heartbeat": t.Heartbeat(
            system_id="m/radar/0",
            host="h",
            pid=7,
            cpu_percent=12.5,
            state=t.SystemState.SYSTEM_RUNNING,
            rss_bytes=2**20,
        ),
        "Command": t.Command(
            command_id="c-1",
            client_id="x",
            mission="m",
            verb="scale",
            target="mc",
            args_json='{"size": 3}',
        ),
        "CommandReply": t.CommandReply(command_id="c-1", client_id="x", ok=True, message="done"),
        "MissionStatus": t.MissionStatus(
            mission="m",
            phase="engagement",
            domain_id=3,
            systems=[
                t.SystemEntry(system_id="m/radar/0", state=t.SystemState.SYSTEM_RUNNING, pid=9)
            ],
        ),
        "ComputeRequest": t.ComputeRequest(
            request_id="r1",
            client_id="x",
            kernel="kalman",
            args=[to_ndarray_msg(np.eye(3))],
            params_json="{}",
        ),
        "ComputeReply": t.ComputeReply(
            request_id="r1",
            ok=True,
            device="cpu",
            compute_ms=1.5,
            results=[to_ndarray_msg(np.arange(4, dtype=np.int32))],
        ),
        "WorkItem": t.WorkItem(job_id="primes", item_id=3, worker_id="w/1", lo=100, hi=200),
        "WorkResult": t.WorkResult(
            job_id="primes", item_id=3, worker_id="w/1", count=21, value=199
        ),
        "Bulk": t.BulkBlock(transfer=5, index=1, count=3, offset=8, total=20, length=8),
        "BulkReturn": t.BulkBlock(transfer=5, index=0, count=1, offset=0, total=3, length=3),
        "ComputeBulk": t.BulkBlock(transfer=6, index=0, count=1, offset=0, total=2, length=2),
        "ComputeBulkReturn": t.BulkBlock(transfer=7, index=0, count=1, offset=0, total=1, length=1),
        "Checkpoint": t.Checkpoint(
            job_id="primes", worker_id="w/1", items_done=3, last_item_id=3, state=b"\x01\x02"
        ),
        "FarmJournal": t.Checkpoint(
            job_id="primes", worker_id="@lease", items_done=1, state=b'{"master": "m/master/0"}'
        ),
        "PersistRequest": t.PersistRequest(
            request_id="q1", client_id="x", topic="Checkpoint", type_name="mcc.Checkpoint"
        ),
        "PersistReply": t.PersistReply(
            request_id="q1",
            replier_id="persist/0",
            complete=True,
            ok=True,
            topics=[t.PersistTopic(topic="Checkpoint", type_name="mcc.Checkpoint")],
            samples=[t.PersistSample(topic="Checkpoint", writer_seq=2, data=b"\x00\x01")],
        ),
        "PersistAck": t.PersistAck(replica="persist/0", writer_guid="g", topic="Checkpoint"),
        "PerfSample": t.PerfSample(writer_id="p", seq=1, send_ns=2, payload=b"x" * 64),
        "NavSample": t.NavSample(vehicle_id="ac-1", seq=4, origin_ns=10, x_m=1.0, vz_mps=-2.0),
        "GuidanceCommand": t.GuidanceCommand(
            vehicle_id="ac-1", seq=4, origin_ns=10, heading_rate_rps=0.05, accel_mps2=-0.5
        ),
    }
    return samples[topic]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["write-all", "write-state", "write", "read", "reply"])
    parser.add_argument("--topic", default="DetectionBatch")
    parser.add_argument("--profile")
    parser.add_argument("--rate-hz", type=float, default=20.0)
    args = parser.parse_args()
    with Bus(name=f"bus-peer-{args.role}", domain_id=int(os.environ["MCC_DOMAIN"])) as bus:
        if args.role == "write-all":
            from mcc.bus import TOPICS

            writers = {name: bus.writer(name) for name in TOPICS}
            print("ready", flush=True)
            # keep writing until the reader side closes stdin (best-effort topics may drop)
            while sys.stdin.readline():
                for name, writer in writers.items():
                    writer.write(sample_for(name))
                print("wrote", flush=True)
        elif args.role == "write-state":
            writer = bus.writer("Track", profile=args.profile)
            for track_id, x in ((1, 10.0), (2, 20.0), (1, 11.0)):
                writer.write(types.Track(track_id=track_id, x_m=x))
            print("ready", flush=True)
            sys.stdin.read()
        elif args.role == "write":
            writer = bus.writer(args.topic, profile=args.profile)
            print("ready", flush=True)
            seq = 0
            sample = sample_for(args.topic)
            while True:  # until killed
                if hasattr(sample, "origin_ns"):
                    sample.origin_ns = time.time_ns()
                if hasattr(sample, "scan_id"):
                    sample.scan_id = seq
                writer.write(sample)
                seq += 1
                time.sleep(1.0 / args.rate_hz)
        elif args.role == "read":
            reader = bus.reader(args.topic, profile=args.profile)
            closed = threading.Event()  # the test closed stdin: stop
            threading.Thread(target=lambda: (sys.stdin.read(), closed.set()), daemon=True).start()
            print("ready", flush=True)
            while not closed.is_set():  # take everything
                reader.take_wait(256, timeout_s=0.2)
        elif args.role == "reply":

            def handle(cmd: types.Command) -> types.CommandReply:
                if cmd.verb == "fail":
                    raise ValueError("asked to fail")
                return types.CommandReply(ok=True, message=f"{cmd.verb} {cmd.target}".strip())

            with Replier(bus, handle, replier_id="peer/replier/0"):
                print("ready", flush=True)
                sys.stdin.read()
    return 0


if __name__ == "__main__":
    topic_spec("Track")  # fail early if the catalogue is broken
    sys.exit(main())
