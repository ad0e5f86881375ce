"""A stream peer for the link-fault tests: ``python -m tests.netns.stream_peer send|recv ...``.

``send`` writes ``--count`` PerfSample with seq 1..count at ``--rate-hz`` once a reader matched;
``recv`` prints ``ready``, then one JSON line: the seqs received and the largest gap between two
arrivals (seconds), after ``--count`` samples or ``--idle-s`` without any.
Both use the profile named by ``--profile`` ("command": reliable, keep-all; "sensor_stream":
best effort) and multicast discovery on the lab interface.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from mcc.bus import Bus, Transport
from mcc.netlab import LAB_IFACE
from mcc.types import PerfSample

TOPIC = "NetFaultStream"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=("send", "recv"))
    parser.add_argument("--domain", type=int, required=True)
    parser.add_argument("--tag", required=True)
    parser.add_argument("--profile", required=True)
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--rate-hz", type=float, default=100.0)
    parser.add_argument("--idle-s", type=float, default=5.0)
    opts = parser.parse_args()
    transport = Transport(
        multicast=True,
        interface=LAB_IFACE,
        discovery_tag=opts.tag,
        # a lost participant announcement is repeated after 1 s, not Cyclone's default 30 s
        extra_xml="<Discovery><SPDPInterval>1s</SPDPInterval></Discovery>",
    )
    with Bus(opts.domain, transport=transport, name=f"stream {opts.role}") as bus:
        if opts.role == "send":
            writer = bus.writer(TOPIC, type=PerfSample, profile=opts.profile, validate=False)
            if not writer.wait_for_readers(1, timeout_s=30):
                print("no reader within 30 s", file=sys.stderr)
                return 1
            start = time.monotonic()
            for seq in range(1, opts.count + 1):
                sample = PerfSample(writer_id="s", seq=seq, send_ns=0, payload=b"x" * 64)
                if opts.profile == "command":  # reliable: wait while the lossy link holds back
                    writer.write_blocking(sample, timeout_s=30)
                else:
                    writer.write(sample)
                pause = start + seq / opts.rate_hz - time.monotonic()
                if pause > 0:
                    time.sleep(pause)  # pacing the stream, not synchronisation
            # let a reliable writer finish its repairs before the process (and history) goes
            writer.dds.wait_for_acks(_duration_s(10.0))
            return 0
        reader = bus.reader(TOPIC, type=PerfSample, profile=opts.profile)
        print("ready", flush=True)
        if not reader.wait_for_writers(1, timeout_s=30):  # idle time counts from the match
            print("no writer within 30 s", file=sys.stderr)
            return 1
        seqs: list[int] = []
        last = time.monotonic()
        max_gap_s = 0.0
        while len(seqs) < opts.count and time.monotonic() - last < opts.idle_s:
            got = reader.take_wait(64, timeout_s=0.2)
            if got:
                now = time.monotonic()
                if seqs:
                    max_gap_s = max(max_gap_s, now - last)
                last = now
                seqs.extend(int(s.seq) for s in got)
        print(json.dumps({"seqs": seqs, "max_gap_s": max_gap_s}), flush=True)
    return 0


def _duration_s(seconds: float) -> int:
    from cyclonedds.util import duration

    return int(duration(seconds=seconds))


if __name__ == "__main__":
    sys.exit(main())
