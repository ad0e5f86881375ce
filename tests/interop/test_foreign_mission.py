"""missions/sam-toc-foreign.yaml (the fire-control radar on Fast DDS) against the all-MCC
missions/sam-toc.yaml, both running at once: the air picture is as good (GOSPA within 5 %)."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from mcc.bus.transport import ScratchDomains
from tests.conftest import REPO, mcc_up, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.tool]

#: Seconds of surveillance each mission runs (the raid comes within the first minute).
DURATION_S = float(os.environ.get("MCC_FOREIGN_GOSPA_S", "90"))
GOSPA_TOLERANCE = 0.05


def _manifest(source: str, domain: int, tmp: Path) -> Path:
    """A shipped mission on ``domain``, unsecured (the Fast DDS peer joins unsecured, so both
    run alike)."""
    data = yaml.safe_load((REPO / "missions" / source).read_text())
    data.update(domain=domain, security="none")
    path = tmp / source
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _summary(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "summary.json"
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def test_foreign_radar_gives_as_good_an_air_picture(
    fastdds_peer: Path, foreign_env: dict[str, str], tmp_path: Path
) -> None:
    domains = ScratchDomains(avoid={int(foreign_env["MCC_DOMAIN"])})
    runs: dict[str, Path] = {}
    with contextlib.ExitStack() as stack:
        for name in ("sam-toc.yaml", "sam-toc-foreign.yaml"):
            manifest = _manifest(name, next(domains), tmp_path)
            home = tmp_path / f"home-{name}"
            env = {**foreign_env, "MCC_HOME": str(home)}
            stack.enter_context(mcc_up(manifest, env=env, log=tmp_path / f"{name}.log"))
            runs[name] = home
        start = time.monotonic()

        def run_dir(home: Path) -> Path | None:
            found = sorted((home / "runs").glob("*/"))
            return found[-1] if found else None

        wait_for(lambda: all(run_dir(h) for h in runs.values()), 60, "both run folders")
        while time.monotonic() - start < DURATION_S:
            time.sleep(1)
        summaries = {name: _summary(run_dir(home) or home) for name, home in runs.items()}
    logs = "\n".join((tmp_path / f"{n}.log").read_text()[-1500:] for n in runs)
    mcc, foreign = summaries["sam-toc.yaml"], summaries["sam-toc-foreign.yaml"]
    report = {
        name: {k: s.get(k) for k in ("gospa_mean_m", "gospa_missed_mean", "gospa_false_mean")}
        for name, s in summaries.items()
    }
    print(f"\nGOSPA after {DURATION_S:g} s, same run: {json.dumps(report)}")
    assert mcc.get("gospa_mean_m") and foreign.get("gospa_mean_m"), f"{report}\n{logs}"
    ratio = foreign["gospa_mean_m"] / mcc["gospa_mean_m"]
    assert abs(ratio - 1) <= GOSPA_TOLERANCE, f"GOSPA foreign/all-MCC = {ratio:.3f}: {report}"
