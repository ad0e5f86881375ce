"""An app that leaks on purpose (for the soak bench's test): it keeps 200 kB more every 0.1 s,
about 7 GB an hour, the kind of growth `mcc bench soak` must catch."""

from __future__ import annotations

import os

from mcc.orchestrate.appspec import app
from mcc.orchestrate.runtime import AppContext
from mcc.security.mission import Topics


@app(topics=Topics())
def main(ctx: AppContext) -> int:
    hoard: list[bytes] = []
    while not ctx.wait(0.1):
        hoard.append(os.urandom(200_000))  # written, so resident
        ctx.heartbeat.count_out()
    return 0
