"""An app with a ``config`` model (for the config tests): it writes what ``ctx.config`` is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

from pydantic import Field

from mcc.orchestrate.appconfig import AppConfig, loaded_by
from mcc.orchestrate.appspec import app
from mcc.orchestrate.runtime import AppContext


def _read_text(path: Path) -> str:
    return Path(path).read_text()


class ProbeConfig(AppConfig):
    rate_hz: float = Field(default=1.0, gt=0)
    names: tuple[str, ...] = ()
    notes: Annotated[Path, loaded_by(_read_text)] | None = None


@app(config=ProbeConfig)
def main(ctx: AppContext) -> int:
    config: ProbeConfig = ctx.config
    seen = {"type": type(config).__name__, **config.model_dump(mode="json")}
    (ctx.run_dir / f"config-{ctx.identity.index}.json").write_text(json.dumps(seen))
    ctx.stop.wait()
    return 0
