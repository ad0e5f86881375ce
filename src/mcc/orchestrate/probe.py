"""A probe app for the orchestrator's tests and deploy benchmark: it beats, reports, misbehaves.

``mcc.orchestrate.probe:idle`` beats until stopped. Options make it report what it was given
(``--report``: identity, pid, CPU affinity, nice, scheduler, environment, to a JSON file in the
run folder), exit (``--exit-after S --exit-code N``) or freeze (``--freeze-after S``: SIGSTOP
itself, a stuck process whose heartbeats stop).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import time

from mcc.files import write_atomic
from mcc.orchestrate.appspec import app
from mcc.orchestrate.runtime import AppContext
from mcc.security.mission import Topics
from mcc.settings import PREFIX, environ


@app(topics=Topics())
def idle(ctx: AppContext) -> int:
    parser = argparse.ArgumentParser(prog="probe")
    parser.add_argument("--report", action="store_true", help="write report-<system>-<index>.json")
    parser.add_argument("--exit-after", type=float, help="exit after this many seconds")
    parser.add_argument("--exit-code", type=int, default=1)
    parser.add_argument("--freeze-after", type=float, help="SIGSTOP itself after this many s")
    opts = parser.parse_args(ctx.args)
    if opts.report:
        report = {
            "id": ctx.identity.id,
            "pid": os.getpid(),
            "affinity": sorted(os.sched_getaffinity(0)),
            "nice": os.getpriority(os.PRIO_PROCESS, 0),
            "scheduler": os.sched_getscheduler(0),
            "rlimit_data": resource.getrlimit(resource.RLIMIT_DATA)[0],
            "device": ctx.device,
            "phase": ctx.phase,
            "env": {k: v for k, v in environ().items() if k.startswith((PREFIX, "CUDA_"))},
            "time_ns": time.time_ns(),
        }
        path = ctx.run_dir / f"report-{ctx.identity.system}-{ctx.identity.index}.json"
        write_atomic(path, json.dumps(report))
    start = time.monotonic()
    while not ctx.wait(0.05):
        elapsed = time.monotonic() - start
        if opts.exit_after is not None and elapsed >= opts.exit_after:
            return int(opts.exit_code)
        if opts.freeze_after is not None and elapsed >= opts.freeze_after:
            os.kill(os.getpid(), signal.SIGSTOP)
    return 0
