"""A writer process for the persistence tests: ``python -m tests.persist.peer [options]``.

Writes ``items_done = 1..N`` for each ``--worker NAME:N`` of job ``--job`` (round robin), the
last sample of each worker with ``write_stored`` (so all are stored once it returns), prints
``stored`` and then waits for stdin to close (or to be killed).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from mcc import types
from mcc.bus import Bus


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--topic", default="Checkpoint")
    parser.add_argument("--profile")
    parser.add_argument("--job", default="job")
    parser.add_argument("--worker", action="append", default=[], help="NAME:N")
    parser.add_argument("--replicas", type=int, default=1)
    args = parser.parse_args()
    counts = {name: int(n) for name, n in (w.split(":") for w in args.worker)}
    with Bus(int(os.environ["MCC_DOMAIN"]), name="persist-test-writer") as bus:
        writer = bus.writer(args.topic, profile=args.profile, type=types.Checkpoint)
        print("ready", flush=True)
        if not writer.wait_for_replicas(args.replicas, timeout_s=30.0):
            print("no persistence replica subscribed", flush=True)
            return 1
        for i in range(1, max(counts.values()) + 1):
            for name, n in counts.items():
                if i > n:
                    continue
                sample = types.Checkpoint(
                    job_id=args.job, worker_id=name, items_done=i, time_ns=time.time_ns()
                )
                if i == n:
                    writer.write_stored(sample, timeout_s=30.0, replicas=args.replicas)
                else:
                    writer.write(sample)
        print("stored", flush=True)
        sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(main())
