"""A ``gpu: shared`` app for the services tests: one HotSpot call through open_compute()."""

from __future__ import annotations

import json

import numpy as np

from mcc.compute import open_compute
from mcc.orchestrate.runtime import AppContext


def inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    return rng.uniform(320, 340, (64, 64)), rng.uniform(0, 1e-3, (64, 64))


def main(ctx: AppContext) -> int:
    temp, power = inputs()
    with open_compute(timeout_s=30) as kernels:
        out = kernels.hotspot(temp, power, iterations=10).temp
    np.save(ctx.run_dir / "hotspot.npy", out)
    (ctx.run_dir / "device.json").write_text(json.dumps({"device": ctx.device}))
    ctx.stop.wait()
    return 0
