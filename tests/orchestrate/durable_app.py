"""An app that declares a durable topic (for the services tests): it stores one Checkpoint."""

from __future__ import annotations

from mcc.orchestrate.appspec import app
from mcc.orchestrate.runtime import AppContext
from mcc.security.mission import Topics
from mcc.types import Checkpoint


@app(topics=Topics(publish=("Checkpoint",)), durable=("Checkpoint",))
def main(ctx: AppContext) -> int:
    writer = ctx.bus.writer("Checkpoint")
    checkpoint = Checkpoint(
        job_id="services-test", worker_id=ctx.identity.id, items_done=7, last_item_id=6, state=b""
    )
    writer.write_stored(checkpoint, timeout_s=30.0)
    (ctx.run_dir / "stored").write_text("ok")
    ctx.stop.wait()
    return 0
