"""`mcc demo` (`make demo`): the SAM TOC mission on the local backend, live, then a summary.

The mission (``missions/sam-toc.yaml``) starts in *surveillance*: the simulation, two radars,
the tracker and the assessor. When the tracker holds confirmed tracks the demo switches to
*engagement*, which starts TEWA and the three launchers (weapon systems hold no CPU before).
Progress is printed every few seconds from the assessor's ``summary.json``; at the end the
run folder has every log, ``supervisor.json`` and the final ``summary.json``.

The tactical console (`mcc console`) runs beside it as a subprocess on http://127.0.0.1:8080/
(another free port when 8080 is taken), with a one-time ``commander`` account whose generated
password is printed (only its scrypt hash is stored, in ``<run>/console/users.json``); it
stops with the demo. Its log is ``<run>/logs/console.log``, its audit log
``<run>/console/audit.jsonl``.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from mcc.bus import Transport
from mcc.orchestrate.manifest import load_manifest
from mcc.orchestrate.supervisor import Supervisor, open_mission
from mcc.resources import mission_file
from mcc.settings import child_env, current

DEFAULT_MISSION = mission_file("sam-toc")


def run_demo(
    *,
    duration_s: float = 60.0,
    mission_file: str | Path = DEFAULT_MISSION,
    domain_id: int | None = None,
    engage_after_s: float = 20.0,
    console: bool = True,
    console_port: int = 8080,
    transport: str | None = None,
) -> int:
    """Run the mission for ``duration_s`` (with the web console unless ``console`` is False);
    0 when it ran and produced its summary."""
    from rich.console import Console

    out = Console()
    mission = load_manifest(mission_file)
    if domain_id is not None:
        mission = mission.model_copy(update={"domain": domain_id})
    if transport is not None:
        kind = mission.transport.model_copy(update={"kind": transport})
        mission = mission.model_copy(update={"transport": kind})
    mission = _assess_fratricide(mission)
    # One loopback transport and discovery tag for every process of this demo: it neither
    # hears nor disturbs other missions on this host.
    # Passed down, not put in os.environ: the supervisor hands it to every instance and client.
    tag = current().discovery_tag or f"mcc-demo-{os.getpid()}"
    supervisor = open_mission(mission, transport=Transport.loopback(tag))
    run_dir = supervisor.run_dir
    if mission.security == "on":
        supervisor.secure()  # the console's identity exists before the console starts
    out.print(
        f"[bold]MCC demo[/bold]: mission [cyan]{mission.mission}[/cyan] on the local backend "
        f"for {duration_s:g} s, domain {mission.domain}, transport {mission.transport.kind}, "
        f"security {mission.security}; "
        f"run folder {run_dir}"
    )
    web = (
        DemoConsole.start(
            mission_file,
            mission.domain,
            run_dir,
            console_port,
            env=supervisor.console_env,  # the console joins as the mission's console
        )
        if console
        else None
    )
    start = time.monotonic()
    engaged = "engagement" not in mission.phases
    try:
        with supervisor:
            _run(supervisor, run_dir, out, web, start, duration_s, engage_after_s, engaged)
    finally:
        if web is not None:
            web.stop()
    final = _finish(run_dir, supervisor.status())
    out.print(_summary_table(final))
    out.print(f"run folder: {run_dir} (summary.json, supervisor.json, logs/)")
    return 0 if final.get("pictures") else 1


def _run(
    supervisor: Supervisor,
    run_dir: Path,
    out: Any,
    web: DemoConsole | None,
    start: float,
    duration_s: float,
    engage_after_s: float,
    engaged: bool,
) -> None:
    """The demo's loop: progress lines, the switch to engagement, the console's address."""
    last_print = 0.0
    while time.monotonic() - start < duration_s:
        time.sleep(0.2)
        if web is not None and web.poll():
            out.print(web.banner())
        elapsed = time.monotonic() - start
        summary = _read(run_dir / "summary.json")
        if not engaged and ((summary.get("tracks_now") or 0) > 0 or elapsed >= engage_after_s):
            engaged = True
            out.print(
                f"[bold yellow]t={elapsed:4.1f} s: {summary.get('tracks_now', 0)} tracks "
                "confirmed → phase engagement (TEWA and launchers start)[/bold yellow]"
            )
            supervisor.set_phase("engagement")
        if elapsed - last_print >= 5.0:
            last_print = elapsed
            out.print(_progress(elapsed, supervisor.status(), summary))


@dataclass
class DemoConsole:
    """`mcc console` as a subprocess of the demo, with a one-time commander password."""

    proc: subprocess.Popen[bytes]
    log_path: Path
    log: IO[bytes]
    password: str
    url: str | None = None
    failed: str | None = None
    unsecured: bool = False  # its ready line says the bus is not secured
    ready_by: float = 0.0

    @classmethod
    def start(
        cls, mission_file: str | Path, domain: int, run_dir: Path, port: int, *, env: dict[str, str]
    ) -> DemoConsole:
        """``env``: what the console needs beside this process's environment (its transport,
        its identity in a secured mission)."""
        from mcc.console.auth import UserStore

        folder = run_dir / "console"
        (run_dir / "logs").mkdir(parents=True, exist_ok=True)
        password = secrets.token_urlsafe(12)
        UserStore(folder / "users.json").add("commander", password, "commander")
        cmd = [
            sys.executable,
            "-m",
            "mcc.console",  # = `mcc console`, without importing every other sub-command
            "--manifest",
            str(mission_file),
            "--domain",
            str(domain),
            "--port",
            str(port if _port_free(port) else 0),
            "--users",
            str(folder / "users.json"),
            "--audit",
            str(folder / "audit.jsonl"),
        ]
        log_path = run_dir / "logs" / "console.log"
        log = log_path.open("wb")
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env={**child_env(), **env}
        )
        return cls(proc, log_path, log, password, ready_by=time.monotonic() + 30.0)

    def poll(self) -> bool:
        """True once, when the console has just become ready (or has just failed)."""
        if self.url is not None or self.failed is not None:
            return False
        text = self.log_path.read_text(errors="replace")
        for line in text.splitlines():
            if line.startswith("mcc console: http"):
                self.url = line.split()[2]
                self.unsecured = "NOT SECURED" in line
                return True
        if self.proc.poll() is not None or time.monotonic() > self.ready_by:
            self.failed = text.strip().splitlines()[-1] if text.strip() else "no output"
            return True
        return False

    def banner(self) -> str:
        if self.url is None:
            return f"[red]console did not start ({self.failed}); see {self.log_path}[/red]"
        return (
            f"[bold green]console[/bold green]: {self.url}\n"
            f"  operator [bold]commander[/bold], password [bold]{self.password}[/bold]\n"
            "  (a one-time password: valid for this demo only)"
            + (
                "\n  [bold red]bus NOT SECURED (security: none)[/bold red]"
                if self.unsecured
                else ""
            )
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


def _assess_fratricide(mission: Any) -> Any:
    """``mission`` with its assessor given the truth system's scenario when its ``config:``
    names none, so that the summary counts orders against friends (fratricide) rather than
    leave them unknown."""
    assessor, truth = mission.systems.get("assessor"), mission.systems.get("truth")
    if assessor is None or truth is None or (assessor.config or {}).get("scenario"):
        return mission
    scenario = (truth.config or {}).get("scenario")
    if scenario is None and "--scenario" in truth.args[:-1]:  # a truth app given args:
        scenario = truth.args[truth.args.index("--scenario") + 1]
    if scenario is None:
        return mission
    config = {**(assessor.config or {}), "scenario": str(scenario)}
    systems = {**mission.systems, "assessor": assessor.model_copy(update={"config": config})}
    return mission.model_copy(update={"systems": systems})


def _port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


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
        summary["targets_killed"] = truth.get("kills_total", len(truth.get("kills", [])))
        summary["targets_total"] = truth.get("targets")
        if "friends_killed" in truth:
            summary["friends_killed"] = len(truth["friends_killed"])
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
        ("friends engaged / killed (fratricide)", _fratricide(summary)),
        ("detection→order latency p50 / p99 (ms)", f"{latency.get('p50')} / {latency.get('p99')}"),
        ("air picture latency p50 / p99 (ms)", f"{picture.get('p50')} / {picture.get('p99')}"),
        ("instance restarts", summary.get("restarts")),
        ("failed systems", ", ".join(summary.get("failed", [])) or "none"),
    ]
    for name, value in rows:
        table.add_row(name, "-" if value is None else str(value))
    return table


def _fratricide(summary: dict[str, Any]) -> str:
    """Orders against friendly targets / friends killed; ``-`` where not known."""
    engaged, killed = summary.get("friends_engaged"), summary.get("friends_killed")
    return f"{'-' if engaged is None else engaged} / {'-' if killed is None else killed}"


def _parts(summary: dict[str, Any]) -> str:
    keys = ("gospa_localisation_mean", "gospa_missed_mean", "gospa_false_mean")
    return " / ".join(str(summary.get(k)) for k in keys)
