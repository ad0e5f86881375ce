"""An app (for the hostile tests) that tries to write a topic its system was not granted and
records what the bus said."""

from __future__ import annotations

from mcc.errors import MccError
from mcc.orchestrate.appspec import app
from mcc.orchestrate.runtime import AppContext
from mcc.security.mission import Topics


@app(topics=Topics())
def main(ctx: AppContext) -> int:
    try:
        ctx.bus.writer("EngagementOrder")
        outcome = "granted"
    except MccError as exc:
        outcome = str(exc)
    (ctx.run_dir / f"rogue-{ctx.identity.index}.txt").write_text(outcome)
    ctx.stop.wait()
    return 0
