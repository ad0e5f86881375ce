"""missions/sam-toc-foreign.yaml (the fire-control radar on Fast DDS) against the all-MCC
missions/sam-toc.yaml, both running at once: the air picture is as good (GOSPA within 5 %).

The two are paired on scenario time: each assessor keeps GOSPA per second of its scenario
(``gospa_by_scenario_s``), and the means compared are over the same seconds of both, after
each mission's start-up. Comparing whole-run means compared different stretches of the raid
(the missions start seconds apart and are read at one instant)."""

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
#: Seconds after a mission's first scored picture that are left out (tracks starting up).
WARM_UP_S = 10


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
    seconds = _common_seconds(mcc, foreign)
    assert len(seconds) >= DURATION_S / 3, f"{len(seconds)} common seconds: {report}\n{logs}"
    means = [sum(_per_second(s)[k] for k in seconds) / len(seconds) for s in (mcc, foreign)]
    print(
        f"\nGOSPA over the same {len(seconds)} s of scenario ({min(seconds)}..{max(seconds)}), "
        f"same run: all-MCC {means[0]:.1f} m, foreign {means[1]:.1f} m; whole runs: "
        f"{json.dumps(report)}"
    )
    ratio = means[1] / means[0]
    assert abs(ratio - 1) <= GOSPA_TOLERANCE, f"GOSPA foreign/all-MCC = {ratio:.3f}: {report}"


def _per_second(summary: dict[str, Any]) -> dict[int, float]:
    return {int(k): float(v) for k, v in (summary.get("gospa_by_scenario_s") or {}).items()}


def _common_seconds(*summaries: dict[str, Any]) -> list[int]:
    """Scenario seconds scored by every run, after each run's warm-up."""
    kept = []
    for summary in summaries:
        series = _per_second(summary)
        start = min(series, default=0) + WARM_UP_S
        kept.append({s for s in series if s >= start})
    return sorted(set.intersection(*kept))
