"""`mcc demo` (`make demo`): the SAM TOC mission on the local backend, live, then a summary.

The mission (``missions/sam-toc.yaml``) starts in *surveillance*: the simulation, two radars,
the tracker and the assessor. When the tracker holds confirmed tracks the demo switches to
*engagement*, which starts TEWA and the three launchers (weapon systems hold no CPU before).
Progress is printed every few seconds from the assessor's ``summary.json``; at the end the
run folder has every log, ``supervisor.json`` and the final ``summary.json``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from mcc.bus import Transport
from mcc.orchestrate.backends.local import LocalBackend
from mcc.orchestrate.commands import default_run_dir
from mcc.orchestrate.manifest import load_manifest
from mcc.orchestrate.supervisor import Supervisor

DEFAULT_MISSION = Path(__file__).resolve().parents[2] / "missions" / "sam-toc.yaml"


def run_demo(
    *,
    duration_s: float = 60.0,
    mission_file: str | Path = DEFAULT_MISSION,
    domain_id: int | None = None,
    engage_after_s: float = 20.0,
) -> int:
    """Run the mission for ``duration_s``; 0 when it ran and produced its summary."""
    from rich.console import Console

    console = Console()
    mission = load_manifest(mission_file)
    if domain_id is not None:
        mission = mission.model_copy(update={"domain": domain_id})
    # One loopback transport and discovery tag for every process of this demo: it neither
    # hears nor disturbs other missions on this host.
    tag = os.environ.get("MCC_DISCOVERY_TAG") or f"mcc-demo-{os.getpid()}"
    os.environ.update(Transport.loopback(tag).apply_to_env({}))
    os.environ["MCC_DISCOVERY_TAG"] = tag
    run_dir = default_run_dir(mission)
    supervisor = Supervisor(
        mission, backend=LocalBackend(mission.nodes, mission=mission.mission), run_dir=run_dir
    )
    console.print(
        f"[bold]MCC demo[/bold]: mission [cyan]{mission.mission}[/cyan] on the local backend "
        f"for {duration_s:g} s, domain {mission.domain}; run folder {run_dir}"
    )
    start = time.monotonic()
    engaged = "engagement" not in mission.phases
    with supervisor:
        last_print = 0.0
        while time.monotonic() - start < duration_s:
            time.sleep(0.2)
            elapsed = time.monotonic() - start
            summary = _read(run_dir / "summary.json")
            if not engaged and ((summary.get("tracks_now") or 0) > 0 or elapsed >= engage_after_s):
                engaged = True
                console.print(
                    f"[bold yellow]t={elapsed:4.1f} s: {summary.get('tracks_now', 0)} tracks "
                    "confirmed → phase engagement (TEWA and launchers start)[/bold yellow]"
                )
                supervisor.set_phase("engagement")
            if elapsed - last_print >= 5.0:
                last_print = elapsed
                console.print(_progress(elapsed, supervisor.status(), summary))
    final = _finish(run_dir, supervisor.status())
    console.print(_summary_table(final))
    console.print(f"run folder: {run_dir} (summary.json, supervisor.json, logs/)")
    return 0 if final.get("pictures") else 1


def _read(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def _progress(elapsed: float, status: dict[str, Any], summary: dict[str, Any]) -> str:
    states = [i["state"] for i in status["instances"]]
    restarts = sum(i["restarts"] for i in status["instances"])
    latency = summary.get("detection_to_order_ms", {}) or {}
    gospa = summary.get("gospa_mean_m")
    return (
        f"t={elapsed:3.0f} s  phase {status['phase']} · {states.count('running')}/{len(states)} "
        f"systems running · {restarts} restarts\n"
        f"         tracks {summary.get('tracks_now', 0)} / targets {summary.get('targets_now', 0)}"
        f" · GOSPA {'-' if gospa is None else f'{gospa:.0f}'} m · threats "
        f"{summary.get('threats_seen', 0)} · orders {summary.get('orders', 0)} · kills "
        f"{summary.get('kills', 0)} · leakers {summary.get('leakers', 0)} · det→order p50 "
        f"{latency.get('p50', '-')} ms"
    )


def _finish(run_dir: Path, status: dict[str, Any]) -> dict[str, Any]:
    """Merge the assessor's figures, the simulation's kills/impacts and the supervisor's view."""
    summary = _read(run_dir / "summary.json")
    truth = _read(run_dir / "truth-summary.json")
    if truth:
        summary["leakers"] = truth.get("leakers", len(truth.get("impacts", [])))
        summary["targets_killed"] = len(truth.get("kills", []))
        summary["targets_total"] = truth.get("targets")
    summary["mission"] = status["mission"]
    summary["phase"] = status["phase"]
    summary["restarts"] = sum(i["restarts"] for i in status["instances"])
    summary["failed"] = [i["id"] for i in status["instances"] if i["state"] == "failed"]
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def _summary_table(summary: dict[str, Any]) -> Any:
    from rich.table import Table

    table = Table(title="SAM TOC mission summary", title_justify="left")
    table.add_column("measure")
    table.add_column("value", justify="right")
    latency = summary.get("detection_to_order_ms") or {}
    picture = summary.get("picture_latency_ms") or {}
    rows = [
        ("air pictures", summary.get("pictures")),
        ("tracks at the end", summary.get("tracks_now")),
        (f"GOSPA mean (c={summary.get('gospa_cutoff_m')} m)", summary.get("gospa_mean_m")),
        ("  localisation / missed / false (mean)", _parts(summary)),
        ("threats engaged (orders)", summary.get("orders")),
        ("kills (launcher outcomes)", summary.get("kills")),
        ("targets killed (simulation)", summary.get("targets_killed")),
        ("leakers (impacts on an asset)", summary.get("leakers")),
        ("targets in the raid", summary.get("targets_total")),
        ("detection→order latency p50 / p99 (ms)", f"{latency.get('p50')} / {latency.get('p99')}"),
        ("air picture latency p50 / p99 (ms)", f"{picture.get('p50')} / {picture.get('p99')}"),
        ("instance restarts", summary.get("restarts")),
        ("failed systems", ", ".join(summary.get("failed", [])) or "none"),
    ]
    for name, value in rows:
        table.add_row(name, "-" if value is None else str(value))
    return table


def _parts(summary: dict[str, Any]) -> str:
    keys = ("gospa_localisation_mean", "gospa_missed_mean", "gospa_false_mean")
    return " / ".join(str(summary.get(k)) for k in keys)
