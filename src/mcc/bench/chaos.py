"""``mcc bench chaos``: kill -9 one process of a running mission every few seconds, each kind
at least once, and measure what the mission lost.

The mission runs as an operator would run it: ``mcc up MANIFEST`` twice (an active supervisor
and a standby), its node agent, its instances. The bench watches from its own process with the
mission's ``console`` identity (it reads what the console reads) and kills, in turn: the active
supervisor, the node agent, then one instance of every system of the manifest. Per kill:

- ``detect_s``: the kill → the first sign the mission saw it (a ``MissionStatus`` that no
  longer lists the process as running; for the supervisor, the standby's first beat as active;
  for the node agent, a new agent's record);
- ``recover_s``: the kill → the victim's replacement running (its first heartbeat, stamped
  by the supervisor) or, for the supervisor, the first ``mcc status`` answer by the new one;
- ``restarted``: instances whose pid changed, other than the victim;
- ``picture_gap_s``: the longest silence of ``AirPicture`` around the kill;
- ``id_switches``: tracks of the last picture before the kill that vanish while new ids
  appear within ``SWITCH_WINDOW_S`` of the recovery (a tracker that resumes: 0).

Over the whole run: orders issued by TEWA, orders never answered by a launcher (``lost``),
orders answered with two different outcomes (``duplicated``: fired twice), gaps in the
``EngagementOrder`` ids (samples lost on a reliable topic), and for an HPC job its answer.

``--net netns --loss PCT``: the mission's processes run on three emulated hosts (network
namespaces on a bridge: the supervisors on ``a`` and ``b``, the node agent and every instance
on ``c``) with ``PCT`` % of every host's outgoing packets dropped (tc netem) while killing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from mcc.bench import report
from mcc.bench.anchor_tools import reap
from mcc.bench.chaos_watch import (
    SWITCH_WINDOW_S,
    Watch,
    id_switches,
    picture_gap,
    score_orders,
    wait_for,
)
from mcc.bus import Bus, Transport
from mcc.bus.transport import ScratchDomains
from mcc.errors import MccError
from mcc.lifecycle import Closeable
from mcc.resources import mission_file
from mcc.settings import child_env
from mcc.types import SystemState

COLUMNS = (
    "mission",
    "net",
    "kill",
    "target",
    "detect_s",
    "recover_s",
    "restarted",
    "restarted_ids",
    "picture_gap_s",
    "id_switches",
    "ok",
    "error",
)
#: The targets of the issue, per kill: what ``ok`` checks.
SUPERVISOR_RECOVER_S = 1.0
PICTURE_GAP_S = 1.0
#: Known answers of the HPC jobs the shipped missions run: π(n).
PRIMES = {10**6: 78_498, 10**7: 664_579, 10**8: 5_761_455, 10**9: 50_847_534, 10**10: 455_052_511}


DEFAULT_MANIFESTS = ["missions/sam-toc.yaml", "missions/hpc-primes.yaml"]
#: The single-host rows ``--net lab`` runs beside the lab's: the processes its host faults take.
BESIDE = ["tewa", "launcher", "tracker", "supervisor", "agent"]


def add_parser(bench_subparsers: Any) -> None:
    parser = report.add_bench_parser(
        bench_subparsers,
        "chaos",
        help="kill -9 one process of a mission every few seconds; what the mission lost",
        description="Run MANIFEST with an active and a standby supervisor and kill -9, in "
        "turn, the active supervisor, the node agent and one instance of every system; per "
        "kill: detection and recovery time, instances restarted, picture gap, track-id "
        "switches; over the run: orders lost or duplicated, reliable samples lost, the HPC "
        "answer.",
        func=cmd_chaos,
    )
    parser.add_argument(
        "manifests", nargs="*", metavar="MANIFEST",
        default=DEFAULT_MANIFESTS,
        help="missions to run (default: sam-toc and hpc-primes)",
    )  # fmt: skip
    parser.add_argument("--every", type=float, default=4.0, help="seconds between kills")
    parser.add_argument(
        "--net", default="host", choices=("host", "netns", "lab"),
        help="where the processes run; lab: host-level faults of a secured mission on the Ray "
        "backend over four container hosts (mcc.lab.raychaos: a worker host, the supervisor's "
        "host, the Ray head, a partition; `make images` first), the SAM TOC's worker hosts, and "
        "its raid's summary on the lab against this host's, instead of the manifests",
    )  # fmt: skip
    parser.add_argument(
        "--loss", type=float, default=0.0, help="percent loss on every netns host (--net netns)"
    )
    parser.add_argument("--kinds", help="comma-separated kinds to kill (default: all)")
    parser.add_argument(
        "--hpc-n", type=float, default=1e10,
        help="an HPC job's n (default 1e10: π(1e8) ends before its master has its turn)",
    )  # fmt: skip


def cmd_chaos(args: argparse.Namespace) -> int:
    if args.loss and args.net != "netns":
        raise MccError("--loss needs --net netns (the loss is applied on the emulated hosts)")
    if not 0 <= args.loss < 100:
        raise MccError(f"--loss: a percentage in [0, 100) (got {args.loss:g})")
    kinds = [k for k in (args.kinds or "").split(",") if k] or None
    rows: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    summary: dict[str, Any] | None = None
    if args.net == "lab":
        from mcc.bench.chaos_lab import bench

        if args.manifests != DEFAULT_MANIFESTS or kinds or args.loss:
            raise MccError(
                "--net lab runs its own secured mission and faults (mcc.lab.raychaos): give no "
                "MANIFEST, --kinds or --loss with it"
            )

        rows = bench(f"chaos{os.getpid()}")
        scored = ("orders_issued", "orders_lost", "orders_duplicated", "order_ids_missing")
        for sam in rows[-2:]:  # the SAM TOC's worker hosts: what each run lost
            runs.append(
                {"mission": sam["mission"], "net": "lab", "loss_pct": 0.0, "kills": 1,
                 **{k: sam[k] for k in scored}, "hpc_answer": None, "hpc_exact": None,
                 "ok": not sam["orders_lost"] and not sam["orders_duplicated"]}
            )  # fmt: skip
        # Beside them, the same mission on one host (the local backend): its processes killed
        # one at a time, as the lab's host took TEWA, the launchers and the supervisor.
        local = run_chaos(mission_file("sam-toc-continuous"), every_s=args.every, kinds=BESIDE)
        rows += local["kills"]
        runs.append(local["run"])
        # Last, with no fault: the SAM TOC's 90-s raid on the lab and on this host, its summary.
        # What went wrong there is reported with it: the faults' rows above are kept.
        try:
            summary = summary_rows(f"chaos{os.getpid()}")
        except (MccError, OSError) as exc:
            summary = {"lab": [], "host": [], "compared": {"ok": False}, "error": str(exc)}
            print(f"mcc bench chaos: the summary comparison failed: {exc}", file=sys.stderr)
    for manifest in args.manifests if args.net != "lab" else ():
        result = run_chaos(
            Path(manifest),
            every_s=args.every,
            net=args.net,
            loss_pct=args.loss,
            kinds=kinds,
            hpc_n=int(args.hpc_n),
        )
        rows += result["kills"]
        runs.append(result["run"])
    command = "mcc bench chaos " + " ".join(sys.argv[3:])
    doc = report.document("chaos", rows, command=command.strip())
    doc["runs"] = runs
    report.print_table("kill -9 of one process at a time", rows, COLUMNS)
    if runs:
        report.print_table("what each run lost", runs, RUN_COLUMNS)
    if summary is not None:
        doc["summary"] = summary
        compared, sides = summary["compared"], ("lab", "host", "noise", "within")
        report.print_table(
            "the SAM TOC's raid, no fault: the lab's summary against this host's",
            [
                {"figure": k, **{s: v.get(s) for s in sides}}
                for k, v in compared.items()
                if k != "ok"
            ],
            ["figure", *sides],
        )
    if args.json:
        print(f"wrote {report.write_json(doc, args.json)}")
    if args.record:
        report.record(doc, COLUMNS, notes=NOTES)
    return 0 if all(r["ok"] for r in rows) and all(r["ok"] for r in runs) else 1


RUN_COLUMNS = (
    "mission",
    "net",
    "loss_pct",
    "kills",
    "orders_issued",
    "orders_lost",
    "orders_duplicated",
    "order_ids_missing",
    "hpc_answer",
    "hpc_exact",
    "ok",
)
NOTES = (
    "Per kill: detect_s kill → the mission saw it; recover_s kill → the replacement's first "
    "heartbeat (the supervisor: the first `mcc status` answered by the standby); restarted: "
    "other instances the supervisor restarted meanwhile; picture_gap_s: longest AirPicture "
    "silence around the kill; id_switches: tracks lost while new ids appear within 3 s of the "
    "recovery. ok: "
    f"supervisor recovered ≤ {SUPERVISOR_RECOVER_S:g} s with 0 restarted, picture gap ≤ "
    f"{PICTURE_GAP_S:g} s, 0 id switches for the tracker. Per run: orders never answered, "
    "answered twice, gaps in order ids (reliable samples lost), the HPC job's answer."
)


# -- the run -----------------------------------------------------------------------------------


class BenchMission(Closeable):
    """The mission's processes: supervisors (`mcc up`), its node agent, where they run."""

    def __init__(
        self, manifest: Path, tmp: Path, *, net: str, loss_pct: float, hpc_n: int = 10**10
    ) -> None:
        from mcc.orchestrate.manifest import load_manifest

        self.tmp = tmp
        self.net = net
        self.domain = next(ScratchDomains())
        data = yaml.safe_load(manifest.read_text())
        data["domain"] = self.domain
        master = (data.get("systems") or {}).get("master")
        if isinstance(master, dict) and "--n" in (master.get("args") or []):
            args = list(master["args"])  # a job that outlives the kills (π(10⁸) takes ~10 s)
            args[args.index("--n") + 1] = str(hpc_n)
            master["args"] = args
        self.name = str(data["mission"])
        self.manifest = tmp / manifest.name
        self.manifest.write_text(yaml.safe_dump(data, sort_keys=False))
        self.mission = load_manifest(self.manifest)
        self.home = tmp / "home"
        self.home.mkdir(mode=0o700)
        # A discovery tag of this run's own: a scratch domain is picked per process, and two
        # benches of one host (a soak beside a CI run) drew the same one and each tried to
        # shake hands with the other's participants.
        self.tag = f"mcc-bench-{os.getpid()}-{time.monotonic_ns() % 10**9}"
        self.env = child_env(home=self.home, agent_orphan_s=20, discovery_tag=self.tag)
        self.lab: Any = None
        self.logs: list[Any] = []
        self.supervisors: list[subprocess.Popen[str]] = []
        self.bench_transport: Transport | None = None
        if net == "netns":
            from mcc.netlab import LAB_IFACE, NetLab, pick_subnet

            lab = NetLab(["a", "b", "c"], name=f"ch{os.getpid() % 10000}", subnet=pick_subnet(),
                         root_address=True)  # fmt: skip
            self.lab = lab.up()
            self.env.pop("CYCLONEDDS_URI", None)  # Cyclone's own variable, not a setting
            self.env = child_env(self.env, transport=None)
            # A lost participant announcement is repeated after 1 s, not Cyclone's 30 s.
            spdp = "<Discovery><SPDPInterval>1s</SPDPInterval></Discovery>"
            inside, self.bench_transport = (
                Transport(
                    kind="udp", multicast=True, interface=i, extra_xml=spdp, discovery_tag=self.tag
                )
                for i in (LAB_IFACE, lab.bridge)  # the hosts' link, the bench's bridge
            )
            self.env.update(inside.apply_to_env({}))
            if loss_pct:
                for host in ("a", "b", "c"):
                    lab.netem(host, loss_pct=loss_pct)
            self._start_agent_on_c()

    def _start_agent_on_c(self) -> None:
        from mcc.orchestrate.agent import AgentPaths

        paths = AgentPaths.for_mission(self.home, self.name, self.domain)
        (self.home / "agents").mkdir(mode=0o700, exist_ok=True)
        argv = paths.argv(orphan_s=20)
        with paths.log.open("w") as log:
            subprocess.run(
                self.lab.exec_argv("c", argv),
                env=child_env(self.env, agent_socket=paths.socket),
                stdout=log,
                stderr=subprocess.STDOUT,
                check=True,
                timeout=60,
            )
        wait_for(paths.socket.exists, 30, "the node agent on host c")

    def up(self, *, phase: str | None = None) -> subprocess.Popen[str]:
        """One more `mcc up` (the first is active, the others stand by), in ``phase``."""
        index = len(self.supervisors)
        out = (self.tmp / f"up-{index}.log").open("w")
        self.logs.append(out)
        argv = [sys.executable, "-m", "mcc.cli", "up", str(self.manifest), "--quiet"]
        argv += ["--phase", phase] if phase else []
        kwargs: dict[str, Any] = {"env": self.env, "stdout": out, "stderr": subprocess.STDOUT}
        if self.lab is not None:
            proc = self.lab.popen("ab"[index % 2], argv, text=True, **kwargs)
        else:
            proc = subprocess.Popen(argv, text=True, **kwargs)
        self.supervisors.append(proc)
        return proc

    def agent_record(self) -> dict[str, Any]:
        from mcc.orchestrate.agent import AgentPaths

        paths = AgentPaths.for_mission(self.home, self.name, self.domain)
        try:
            return dict(json.loads(paths.state.read_text()))
        except (OSError, ValueError):
            return {}

    def close(self) -> None:
        for proc in self.supervisors:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in self.supervisors:
            reap(proc, 30)
        record = self.agent_record()  # whatever the agent still owns: gone with the bench
        for pid in [record.get("agent_pid", 0), *(i["pid"] for i in record.get("instances", []))]:
            if isinstance(pid, int) and pid > 1:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for out in self.logs:
            out.close()
        if self.lab is not None:
            self.lab.down()

    def run_dirs(self) -> list[Path]:
        """The mission's run folders under its home (one per `mcc up` that made one)."""
        return sorted((self.home / "runs").glob(f"{self.name}-*"))


@contextlib.contextmanager
def observer(m: BenchMission, watch: Watch) -> Iterator[tuple[Bus, Any]]:
    """The bench's bus, as the mission's console (its identity when secured), and a client."""
    from mcc.orchestrate.client import ControlClient, operator_transport
    from mcc.security.mission import CONSOLE

    record = wait_for(lambda: _record(m), 120, "mcc up")
    base = m.bench_transport or record.transport or Transport.from_env()
    transport = (
        operator_transport(record.keystore, m.name, CONSOLE, base=base) if record.keystore else base
    )
    with Bus(m.domain, transport=transport, discovery_tag=m.tag, name="mcc bench chaos") as bus:
        bus.reader("MissionStatus", on_data=watch.on_status)
        bus.reader("Heartbeat", on_data=watch.on_beat)
        topics = {t for s in m.mission.all_systems().values() for t in _topics_of(s)}
        if "AirPicture" in topics:
            bus.reader("AirPicture", on_data=watch.on_picture)
        if "EngagementOrder" in topics:
            bus.reader("EngagementOrder", on_data=watch.on_order)
            bus.reader("EngagementOutcome", on_data=watch.on_outcome)
        client = ControlClient(bus, m.name, timeout_s=5.0, principal=CONSOLE)
        try:
            yield bus, client
        finally:
            client.close()


def _record(m: BenchMission) -> Any:
    """The mission's registry record in its own home once `mcc up` wrote it, else None (read
    from the file: the registry's `active()` would look in this process's MCC_HOME)."""
    from mcc.orchestrate import registry

    path = m.home / "active" / f"{m.name}.json"
    return registry.load(path) if path.exists() else None


def _topics_of(system: Any) -> set[str]:
    from mcc.orchestrate.appspec import spec_of

    spec = spec_of(system.app) if system.app else None
    topics = spec.topics if spec is not None else None
    declared = set(getattr(system, "publish", None) or ()) | set(
        getattr(system, "subscribe", None) or ()
    )
    return declared | (set(topics.publish) | set(topics.subscribe) if topics else set())


def host_summary() -> dict[str, Any]:
    """`mcc.bench.chaos_lab.sam_toc`'s ``sam-toc`` mission on this host (the local backend, `mcc up
    --phase engagement`, a scratch home and domain); its figures once the raid is over."""
    from mcc.bench.chaos_lab import SUMMARY_AFTER_S, figures, past_the_raid

    def read(home: Path, name: str) -> dict[str, Any] | None:
        for path in home.glob(f"runs/*/{name}"):
            try:
                return dict(json.loads(path.read_text()))
            except (OSError, ValueError):
                return None
        return None

    with (
        tempfile.TemporaryDirectory(prefix="mcc-summary-") as tmp,
        BenchMission(mission_file("sam-toc"), Path(tmp), net="host", loss_pct=0.0) as m,
    ):
        m.up(phase="engagement")
        found = wait_for(
            lambda: (
                past_the_raid(
                    truth := read(m.home, "truth-summary.json"),
                    summary := read(m.home, "summary.json"),
                )
                and (summary, truth)
            ),
            SUMMARY_AFTER_S + 240,
            "the host's raid over",
        )
    return figures(*found)


def summary_rows(name: str, runs: int = 2) -> dict[str, Any]:
    """The mission's summary on the lab (``runs`` fresh labs) against this host's (as many
    runs): `compare`'s verdict with every run's figures."""
    from mcc.bench.chaos_lab import compare, lab_summary, ray_lab

    lab_runs, host_runs = [], []
    for i in range(runs):
        with ray_lab(f"{name}s{i}") as ray:
            lab_runs.append(lab_summary(ray))
        host_runs.append(host_summary())
    return {"lab": lab_runs, "host": host_runs, "compared": compare(lab_runs, host_runs)}


def run_chaos(
    manifest: Path,
    *,
    every_s: float = 4.0,
    net: str = "host",
    loss_pct: float = 0.0,
    kinds: list[str] | None = None,
    hpc_n: int = 10**10,
) -> dict[str, Any]:
    """Run ``manifest``, kill each kind once, return ``{"kills": rows, "run": summary}``."""
    with (
        tempfile.TemporaryDirectory(prefix="mcc-chaos-") as tmp_name,
        BenchMission(manifest, Path(tmp_name), net=net, loss_pct=loss_pct, hpc_n=hpc_n) as m,
    ):
        watch = Watch(m.name)
        m.up()
        with observer(m, watch) as (_, client):
            systems = m.mission.all_systems()
            engage_all(m, watch, client)
            m.up()  # the standby
            wait_for(lambda: _standby_seen(client), 60, "the standby")
            # the systems first: a job (HPC) may end before the control plane has had its turn
            first = [k for k in ("master", "worker") if k in systems]  # while the job runs
            rest = [n for n in systems if n not in (*first, "truth", "assessor")]
            plan = [*first, *rest, "supervisor", "agent"]
            plan = [k for k in plan if kinds is None or k in kinds]
            label = {"mission": m.name, "net": net + (f" {loss_pct:g}%" if loss_pct else "")}
            # The anchor row: the same window with no kill (what the picture does on its own).
            start = time.monotonic()
            time.sleep(every_s + SWITCH_WINDOW_S)
            gap = picture_gap(watch, start, time.monotonic())
            rows = [
                {**label, "kill": "none (anchor)", "restarted": 0, "picture_gap_s": gap, "ok": True}
            ]
            for kind in plan:
                time.sleep(every_s)
                try:
                    rows.append({**label, **_kill(kind, m, watch, client)})
                except (MccError, OSError) as exc:
                    rows.append({**label, "kill": kind, "error": str(exc)[:200], "ok": False})
            time.sleep(every_s)
            scored = score_orders(watch, time.monotonic())
            answer, exact = _hpc_answer(m)
    issued = scored["orders_issued"] if scored["orders_issued"] or "tewa" in systems else None
    run = {
        "mission": m.name,
        "net": net,
        "loss_pct": loss_pct,
        "kills": len(rows),
        **scored,
        "orders_issued": issued,
        "hpc_answer": answer,
        "hpc_exact": exact,
    }
    lost = ("orders_lost", "orders_duplicated", "order_ids_missing")
    run["ok"] = not any(scored[k] for k in lost) and exact is not False
    return {"kills": rows, "run": run}


def engage_all(m: BenchMission, watch: Watch, client: Any) -> set[str]:
    """Switch the mission to its engagement phase (when it has one) and wait until every
    instance of every system runs; their ids."""
    if "engagement" in m.mission.phases:
        wait_for(lambda: attempt(lambda: client.call("phase", "engagement") or True), 60, "phase")
    sizes = {name: getattr(s, "size", s.replicas) for name, s in m.mission.all_systems().items()}
    wanted = {f"{m.name}/{name}/{i}" for name, n in sizes.items() for i in range(n)}
    wait_for(lambda: set(watch.running()) >= wanted, 180, "all running")
    return wanted


def attempt(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except MccError:
        return None


def _standby_seen(client: Any) -> bool:
    status = attempt(lambda: client.status())
    return bool(
        status and [s["role"] for s in status.get("supervisors", [])][:2] == ["active", "standby"]
    )


def _kill(kind: str, m: BenchMission, watch: Watch, client: Any) -> dict[str, Any]:
    before = watch.running()
    if kind == "supervisor":
        return _kill_supervisor(m, watch, client, before)
    if kind == "agent":
        return _kill_agent(m, watch, before)
    victim = f"{m.name}/{kind}/0"
    if victim not in before:
        raise MccError(f"{victim} is not running")
    pid = before[victim][1]
    pictures_before = len(watch.pictures)
    killed_wall, killed = time.time_ns(), time.monotonic()
    os.kill(pid, signal.SIGKILL)
    running = SystemState.SYSTEM_RUNNING.value

    def seen_dead() -> float | None:
        for t, entries in list(watch.statuses):
            state, now_pid, _, _ = entries.get(victim, (running, pid, 0, 0))
            if t > killed and (now_pid != pid or state != running):
                return t
        return None

    detected = wait_for(seen_dead, 30, f"{victim}'s death seen")
    replaced = wait_for(
        lambda: (e := watch.running().get(victim)) and e[1] != pid and e, 60, f"{victim} back"
    )
    recovered = (replaced[2] - killed_wall) / 1e9
    row = _settled(watch, before, killed, kind, f"{kind}/0 pid {pid}", victim=victim)
    switches = (
        id_switches(watch, pictures_before, killed + recovered) if kind == "tracker" else None
    )
    return {
        **row,
        "detect_s": round(detected - killed, 3),
        "recover_s": round(recovered, 3),
        "id_switches": switches,
        "ok": row["ok"] and switches in (None, 0),
    }


def _settled(
    watch: Watch,
    before: dict[str, tuple[int, int, int, int]],
    killed: float,
    kind: str,
    target: str,
    *,
    victim: str | None = None,
) -> dict[str, Any]:
    """A kill's row once `SWITCH_WINDOW_S` has passed: the instances running before, other
    than ``victim``, that the supervisor has restarted since (their restart count grew; one
    that ended on its own, a job done, is not one) and the picture's gap from a second before
    the kill; ``ok`` when the gap is in target."""
    time.sleep(SWITCH_WINDOW_S)
    with watch.lock:
        now = watch.statuses[-1][1] if watch.statuses else {}
    restarted = sorted(
        k.split("/", 1)[1]
        for k, (_, _, _, restarts) in before.items()
        if k != victim and k in now and now[k][3] > restarts
    )
    gap = picture_gap(watch, killed - 1.0, time.monotonic())
    return {
        "kill": kind,
        "target": target,
        "detect_s": None,
        "recover_s": None,
        "restarted": len(restarted),
        "restarted_ids": " ".join(restarted) or None,
        "picture_gap_s": gap,
        "id_switches": None,
        "ok": gap is None or gap <= PICTURE_GAP_S,
    }


def _kill_supervisor(
    m: BenchMission, watch: Watch, client: Any, before: dict[str, tuple[int, int, int, int]]
) -> dict[str, Any]:
    from mcc.orchestrate.client import ControlClient
    from mcc.security.mission import CONSOLE

    status = client.status()
    active_pid = status["supervisors"][0]["pid"]
    standby = next(s["pid"] for s in status["supervisors"] if s["role"] == "standby")
    # An operator's `mcc status` right after the kill: a request the dead supervisor's reader
    # took goes unanswered, so ask with a short timeout and again, as a client would.
    quick = ControlClient(client.bus, m.name, timeout_s=0.2, principal=CONSOLE)
    wait_for(lambda: attempt(quick.status), 30, "a status answer")  # matched before the kill
    killed = time.monotonic()
    os.kill(active_pid, signal.SIGKILL)
    answered = None
    try:
        while time.monotonic() - killed < 30:
            reply = attempt(quick.status)
            if reply and reply["supervisors"][0]["pid"] == standby:
                answered = time.monotonic()
                break
    finally:
        quick.close()
    if answered is None:
        raise MccError("the standby never answered as the active supervisor")
    detected = watch.active_beats.get(standby)
    row = _settled(watch, before, killed, "supervisor", f"active pid {active_pid}")
    m.up()  # a new standby, as systemd would restart the dead one
    wait_for(lambda: _standby_seen(client), 60, "a new standby")
    recover = answered - killed
    return {
        **row,
        "detect_s": round(detected - killed, 3) if detected else None,
        "recover_s": round(recover, 3),
        "ok": row["ok"] and recover <= SUPERVISOR_RECOVER_S and not row["restarted"],
    }


def _kill_agent(
    m: BenchMission, watch: Watch, before: dict[str, tuple[int, int, int, int]]
) -> dict[str, Any]:
    old = int(m.agent_record().get("agent_pid") or 0)
    if old <= 1:
        raise MccError("no node agent record")
    killed = time.monotonic()
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: int(m.agent_record().get("agent_pid") or 0) not in (0, old), 60, "a new agent")
    detected = time.monotonic()
    wait_for(lambda: set(watch.running()) >= set(before), 60, "every instance running again")
    recovered = time.monotonic()
    row = _settled(watch, before, killed, "agent", f"pid {old}")
    return {
        **row,
        "detect_s": round(detected - killed, 3),
        "recover_s": round(recovered - killed, 3),
    }


def _hpc_answer(m: BenchMission) -> tuple[int | None, bool | None]:
    master = m.mission.all_systems().get("master")
    if master is None:
        return None, None
    args = list(master.args)
    n = int(float(args[args.index("--n") + 1])) if "--n" in args else None
    run_dirs = m.run_dirs()
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        for run_dir in run_dirs or m.run_dirs():
            for path in run_dir.glob("hpc-*.json"):
                with contextlib.suppress(OSError, ValueError, KeyError):
                    count = int(json.loads(path.read_text())["count"])
                    return count, (PRIMES.get(n) == count if n in PRIMES else None)
        time.sleep(0.5)
    return None, False
