"""An app that says which process imported its module (for the fork server's preload test)."""

from __future__ import annotations

import os

from mcc.orchestrate.appspec import app
from mcc.orchestrate.runtime import AppContext

IMPORTED_BY = os.getpid()


@app()
def main(ctx: AppContext) -> int:
    seen = f"{IMPORTED_BY} {os.getpid()} {os.getppid()}"
    (ctx.run_dir / f"imported-{ctx.identity.index}").write_text(seen)
    ctx.stop.wait()
    return 0
