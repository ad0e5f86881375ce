"""Host-level faults of a secured mission on the Ray backend, on a container lab (``mcc bench
chaos --net lab``, tests/lab/test_ray_lab.py).

Four hosts of ``localhost/mcc-ray`` (`RayLab`: Redis and the head with no CPUs on h1, workers
on h2 and h3, h4 a node with no CPUs for the supervisor); the mission's supervisor runs on h4
(``mcc up --backend ray``), an operator (alice, exported on h4, imported on h2) watches from
h2. `run_host_faults` then, in turn:

1. ``worker-host``: kills h3's container (SIGKILL to all of it): detection is the supervisor's
   ``Ray node h3 lost`` log line, recovery its last ``moved by Ray from h3`` line (the instances
   running on h2), restarted the instances whose pid changed (those of h3);
2. ``supervisor-host``: starts a standby ``mcc up`` on h2 (a copy of the mission's keystore: a
   supervisor host issues identities), kills h4's container (the active supervisor's host;
   Redis and the head are elsewhere): recovery is the standby's ``adopted N running
   instances`` line, restarted must be 0. (With the supervisor on the head's host, a lab
   without a driver host, the fault is ``supervisor``: kill -9 of its process.)
3. ``ray-head``: ``ray stop --force`` and ``ray start --head`` on h1 with the same Redis:
   recovery is the head back, then the supervisor on h2 must still command (a scale-up) with 0
   instances restarted.
4. ``partition``: a standby ``mcc up`` on h1, then h1 (the standby, the Ray head and Redis) cut
   off from the lab for `PARTITION_S` (every packet in and out of its link dropped:
   `ContainerLab.partition`, nftables) and joined again. Counted: the statuses the workstation
   (h2) got answered while it was cut off, the most supervisors that said ``active`` in one
   status, the claims and adoptions the cut-off standby logged (split brain: must be none),
   fencings, instances restarted (0), and the time from the join to the standby heard again.

Times are wall-clock differences between the kill (this machine) and the supervisors' JSON log
lines (the containers share its clock).
"""

from __future__ import annotations

import datetime as dt
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcc.lab.hosts import ContainerLab
from mcc.lab.raycluster import RayLab
from mcc.waiting import wait_for

__all__ = [
    "IDS", "MANIFEST", "MISSION", "PROBE", "LabMission", "RayMissionLab", "run_host_faults",
    "worker_host_fault",
]  # fmt: skip

DOMAIN = 8
MISSION = "lab-ray"
HOME = "/var/lib/mcc"
_HEALTH = "health: {timeout_s: 20, startup_s: 90}"  # longer than a move between hosts
MANIFEST = f"""
mission: {MISSION}
domain: {DOMAIN}
security: on
systems:
  truth:
    app: mcc.apps.radar:truth
    config: {{scenario: scenarios/small.yaml}}
    resources: {{cpus: 0.2}}
    {_HEALTH}
  radar:
    app: mcc.apps.radar:radar
    config: {{scenario: scenarios/small.yaml}}
    resources: {{cpus: 0.2}}
    {_HEALTH}
clusters:
  w:
    app: mcc.orchestrate.probe:idle
    size: 2
    placement: spread
    resources: {{cpus: 0.25}}
    {_HEALTH}
"""
IDS = frozenset({f"{MISSION}/truth/0", f"{MISSION}/radar/0", f"{MISSION}/w/0", f"{MISSION}/w/1"})


@dataclass(frozen=True)
class LabMission:
    """What the lab runs: a manifest (mission `MISSION`, domain `DOMAIN`), the ids of its
    instances, the phase ``mcc up`` starts it in."""

    manifest: str
    ids: frozenset[str]
    phase: str | None = None


#: The host faults' mission: two systems and an idle cluster.
PROBE = LabMission(MANIFEST, IDS)


#: The issue's targets: a worker host's instances running elsewhere, a standby commanding.
WORKER_RECOVER_S = 5.0
SUPERVISOR_RECOVER_S = 1.0
#: How long the partition lasts: many supervisor leases (0.8 s), well under Ray's 60 s before a
#: raylet cut off from its GCS gives up.
PARTITION_S = 15.0
POLL_S = 1.0  # a status or a log line read on a container host: once a second
#: A new standby claims nothing for its first 3 s (`STANDBY_GRACE_S` of the supervisor); a
#: fault is measured against a standby past that, as one that has been running for a while.
STANDBY_SETTLE_S = 4.0


def running(st: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The running instances of a status, by id."""
    if st is None:
        return {}
    return {i["id"]: i for i in st["instances"] if i["state"] == "running"}


class RayMissionLab:
    """The lab's ``mission`` on ``ray``: started on the first driver host (the head's without
    one), watched from ``watcher`` (default the first worker)."""

    def __init__(
        self, ray: RayLab, mission: LabMission = PROBE, *, watcher: str | None = None
    ) -> None:
        self.ray = ray
        self.mission = mission
        self.ids = mission.ids
        self.lab: ContainerLab = ray.lab
        self.head = ray.head
        self.home = ray.drivers[0] if ray.drivers else ray.head  # the first supervisor's host
        self.watcher = watcher or ray.workers[0]  # the operator's view, the standby's host
        self.keystore = f"{HOME}/keystores/{MISSION}"

    def up(self, host: str) -> None:
        """``mcc up --backend ray`` on ``host``, logging JSON lines to ``$HOME/up.log``."""
        phase = f"--phase {self.mission.phase} " if self.mission.phase else ""
        self.lab.exec(
            host,
            [
                "sh", "-c",
                f"exec mcc up {HOME}/mission.yaml --backend ray --address {self.ray.address} "
                f"{phase}--quiet > {HOME}/up.log 2>&1",
            ],
            env={"MCC_LOG_FORMAT": "json", "MCC_AGENT_ORPHAN_S": "60"},
            detach=True,
        )  # fmt: skip

    def start(self) -> dict[str, dict[str, Any]]:
        """The mission up on the head host, operator alice on the watcher; every instance
        running (returned)."""
        lab = self.lab
        with tempfile.TemporaryDirectory(prefix="mcc-raychaos-") as tmp:
            manifest = Path(tmp) / "mission.yaml"
            manifest.write_text(self.mission.manifest)
            for host in {self.home, self.head, self.watcher}:
                lab.copy_in(host, manifest, f"{HOME}/mission.yaml")
            self.up(self.home)
            wait_for(
                lambda: (
                    lab.exec(
                        self.home, ["test", "-f", f"{self.keystore}/governance.p7s"], check=False
                    ).returncode
                    == 0
                ),
                90,
                f"the mission's keystore on {self.home}",
                period_s=POLL_S,
            )
            lab.exec(
                self.home,
                ["mcc", "security", "identity", self.keystore, f"{MISSION}/alice", "--domain",
                 str(DOMAIN), "--operator"],
            )  # fmt: skip
            lab.exec(
                self.home,
                ["mcc", "security", "export", self.keystore, f"{MISSION}/alice", "--out",
                 f"{HOME}/alice.mcc-identity"],
            )  # fmt: skip
            identity = Path(tmp) / "alice.mcc-identity"
            lab.copy_out(self.home, f"{HOME}/alice.mcc-identity", identity)
            lab.copy_in(self.watcher, identity, f"{HOME}/alice.mcc-identity")
        lab.exec(self.watcher, ["mcc", "security", "import", f"{HOME}/alice.mcc-identity"])
        return dict(
            wait_for(
                lambda: (now := running(self.status())) and set(now) == self.ids and now,
                240,
                "the mission running on the Ray workers",
                period_s=POLL_S,
            )
        )

    def status(self) -> dict[str, Any] | None:
        """The mission's status as operator alice on the watcher (a workstation's view)."""
        proc = self.lab.exec(
            self.watcher,
            [
                "mcc", "status", "--mission", MISSION, "--domain", str(DOMAIN), "--json",
                "--timeout", "10", "--as", "alice",
            ],
            check=False,
            timeout_s=60,
        )  # fmt: skip
        return json.loads(proc.stdout) if proc.returncode == 0 else None

    def log(self, host: str) -> str:
        return self.lab.exec(host, ["cat", f"{HOME}/up.log"]).stdout

    def log_times(self, host: str, text: str) -> list[float]:
        """When ``host``'s supervisor logged a line holding ``text`` (epoch seconds)."""
        found = []
        for line in self.log(host).splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and text in str(entry.get("message", "")):
                found.append(dt.datetime.fromisoformat(entry["time"]).timestamp())
        return found

    def settle(self, host: str) -> None:
        """Wait until the standby on ``host`` is past the grace of a new one (it claims
        nothing in its first seconds, before it has discovered everyone): a fault measured
        against a standby started a moment before would measure that grace."""
        since = wait_for(
            lambda: self.log_times(host, "this one stands by"),
            60,
            f"the standby on {host} in its log",
            period_s=POLL_S,
        )[-1]
        time.sleep(max(0.0, since + STANDBY_SETTLE_S - time.time()))

    def copy_keystore(self, source: str, host: str) -> None:
        """The mission's keystore from ``source`` to ``host``, a supervisor host too."""
        with tempfile.TemporaryDirectory(prefix="mcc-raychaos-") as tmp:
            local = Path(tmp) / MISSION
            self.lab.copy_out(source, self.keystore, local)
            self.lab.exec(host, ["mkdir", "-p", str(Path(self.keystore).parent)])
            self.lab.copy_in(host, local, self.keystore)
            self.lab.exec(host, ["chown", "-R", "10001", self.keystore], user="root")


def _row(kill: str, target: str, **fields: Any) -> dict[str, Any]:
    return {
        "mission": MISSION, "net": "lab", "kill": kill, "target": target, "detect_s": None,
        "recover_s": None, "restarted": 0, "restarted_ids": [], "killed_after_move": [],
        "picture_gap_s": None,
        "id_switches": None, "ok": False, "error": "", **fields,
    }  # fmt: skip


def worker_host_fault(
    m: RayMissionLab, first: dict[str, dict[str, Any]], victim: str, survivor: str
) -> tuple[dict[str, Any], dict[str, dict[str, Any]], float]:
    """Fault 1 of the module's docstring: ``victim``'s container killed, its instances running
    again on ``survivor``; the row, the instances after, and when the kill was (wall clock)."""
    lost = {k for k, v in first.items() if v["node"] == victim}
    killed = time.time()
    m.lab.kill(victim)
    after = wait_for(
        lambda: (
            (now := running(m.status()))
            and set(now) == m.ids
            and all(now[k]["node"] == survivor for k in lost)
            and now
        ),
        120,
        f"{victim}'s instances running on {survivor}",
        period_s=POLL_S,
    )
    losses = m.log_times(m.home, f"Ray node {victim} lost")
    moves = m.log_times(m.home, f"moved by Ray from {victim}")
    restarted = sorted(k for k in m.ids if after[k]["pid"] != first[k]["pid"])
    # Moved by Ray, not restarted by the supervisor: a kill for the silence of the lost
    # process must not reach the one Ray started in its place.
    killed_moved = sorted(k for k in lost if after[k]["restarts"] > first[k]["restarts"])
    recover = (max(moves) - killed) if len(moves) >= len(lost) else None
    row = _row(
        "worker-host", victim,
        detect_s=round(losses[0] - killed, 2) if losses else None,
        recover_s=round(recover, 2) if recover is not None else None,
        restarted=len(restarted), restarted_ids=restarted, killed_after_move=killed_moved,
        ok=recover is not None and recover <= WORKER_RECOVER_S and set(restarted) == lost
        and not killed_moved,
        error="" if losses and recover is not None else m.log(m.home)[-2000:],
    )  # fmt: skip
    return row, after, killed


def run_host_faults(m: RayMissionLab, first: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The four faults of the module's docstring on the running mission (``first``: its
    instances); one row per fault, in ``mcc bench chaos``'s columns."""
    lab = m.lab
    survivor = m.watcher
    row, _, _ = worker_host_fault(m, first, m.ray.workers[-1], survivor)
    rows = [row]

    m.copy_keystore(m.home, survivor)
    m.up(survivor)
    st = wait_for(
        lambda: (
            (s := m.status()) is not None
            and [x["role"] for x in s["supervisors"]] == ["active", "standby"]
            and s
        ),
        180,
        f"the standby on {survivor}",
        period_s=POLL_S,
    )
    active_pid = st["supervisors"][0]["pid"]
    before = running(st)
    m.settle(survivor)
    killed = time.time()
    if m.home != m.head:
        lab.kill(m.home)  # the whole host: its raylet and the driver with it
        kill, target = "supervisor-host", f"{m.home} (the active supervisor's host)"
    else:
        lab.exec(m.head, ["sh", "-c", f"kill -9 {active_pid}"])  # the shell's kill: no procps
        kill, target = "supervisor", f"{m.head} mcc up"
    adopted = wait_for(
        lambda: m.log_times(survivor, f"adopted {len(m.ids)} running instances"),
        60,
        "the standby's adoption",
        period_s=POLL_S,
    )
    st2 = wait_for(
        lambda: (s := m.status()) is not None and s["supervisors"][0]["pid"] != active_pid and s,
        60,
        "the status from the new active supervisor",
        period_s=POLL_S,
    )
    now = running(st2)
    restarted = sorted(k for k in before if now.get(k, {}).get("pid") != before[k]["pid"])
    recover = adopted[0] - killed
    rows.append(
        _row(
            kill, target,
            recover_s=round(recover, 2), restarted=len(restarted), restarted_ids=restarted,
            ok=recover <= SUPERVISOR_RECOVER_S and not restarted,
        )
    )  # fmt: skip

    started = time.time()
    m.ray.restart_head()
    head_s = time.time() - started
    wait_for(
        lambda: (
            (s := m.status()) is not None
            and set(running(s)) == m.ids
            and s["supervisors"][0]["pid"] == st2["supervisors"][0]["pid"]
        ),
        120,
        "the mission after the head's restart",
        period_s=POLL_S,
    )
    scale = [
        "mcc", "scale", "w", "3", "--mission", MISSION, "--domain", str(DOMAIN), "--as", "alice",
    ]  # fmt: skip
    lab.exec(survivor, scale, timeout_s=60)
    st4 = wait_for(
        lambda: (s := m.status()) is not None and len(running(s)) == len(m.ids) + 1 and s,
        120,
        "a third worker after the head's restart",
        period_s=POLL_S,
    )
    now = running(st4)
    restarted = sorted(k for k in before if now.get(k, {}).get("pid") != before[k]["pid"])
    rows.append(
        _row(
            "ray-head", f"{m.head} ray stop/start",
            recover_s=round(head_s, 1), restarted=len(restarted), restarted_ids=restarted,
            ok=not restarted,
        )
    )  # fmt: skip
    rows.append(_partition(m, active_pid=st2["supervisors"][0]["pid"]))
    return rows


def _partition(m: RayMissionLab, *, active_pid: int) -> dict[str, Any]:
    """Fault 4 of the module's docstring: the head host, a standby on it, cut off and joined."""
    cut_host, lab = m.head, m.lab
    if m.home != m.head:
        m.copy_keystore(m.watcher, cut_host)
    m.up(cut_host)
    st = wait_for(
        lambda: (
            (s := m.status()) is not None
            and [x["role"] for x in s["supervisors"]] == ["active", "standby"]
            and s["supervisors"][0]["pid"] == active_pid
            and s
        ),
        180,
        f"a standby on {cut_host}",
        period_s=POLL_S,
    )
    before = running(st)
    m.settle(cut_host)
    claims_before = len(m.log_times(cut_host, "claiming"))
    cut = time.time()
    lab.partition(cut_host)
    polls = answered = actives_max = 0
    try:
        while time.time() - cut < PARTITION_S:
            polls += 1
            s = m.status()
            if s is not None:
                answered += 1
                roles = [x["role"] for x in s["supervisors"]]
                actives_max = max(actives_max, roles.count("active"))
            time.sleep(POLL_S)
    finally:
        lab.heal(cut_host)  # joined again
    joined = time.time()
    after = wait_for(
        lambda: (
            (s := m.status()) is not None
            and [x["role"] for x in s["supervisors"]] == ["active", "standby"]
            and set(running(s)) >= set(before)
            and s
        ),
        120,
        f"the standby on {cut_host} heard again",
        period_s=POLL_S,
    )
    rejoined_s = time.time() - joined
    actives_max = max(actives_max, [x["role"] for x in after["supervisors"]].count("active"))
    now = running(after)
    restarted = sorted(k for k in before if now.get(k, {}).get("pid") != before[k]["pid"])
    claims = len(m.log_times(cut_host, "claiming")) - claims_before
    adoptions = len(m.log_times(cut_host, "running instances"))  # "adopted N running …"
    fenced = len(m.log_times(m.watcher, "this one is fenced"))
    still_active = after["supervisors"][0]["pid"] == active_pid
    return _row(
        "partition", f"{cut_host} (standby, Ray head, Redis) cut off {PARTITION_S:g} s",
        recover_s=round(rejoined_s, 2), restarted=len(restarted), restarted_ids=restarted,
        statuses_answered=f"{answered}/{polls}", actives_max=actives_max, claims=claims,
        adoptions=adoptions, fenced=fenced, same_active=still_active,
        ok=not restarted and actives_max == 1 and claims == 0 and adoptions == 0
        and still_active and answered > 0,
    )  # fmt: skip


def bench(name: str = "chaos") -> list[dict[str, Any]]:
    """``mcc bench chaos --net lab``: a lab of four ``localhost/mcc-ray`` hosts (built by
    ``make images``), the mission, the four faults; the rows. The lab is removed after."""
    from mcc.lab.podman import PodmanError, podman
    from mcc.lab.raycluster import RAY_IMAGE

    if podman(["image", "exists", RAY_IMAGE], check=False).returncode != 0:
        raise PodmanError(f"image {RAY_IMAGE} is not built: run `make images`")
    with ContainerLab(4, name=name, image=RAY_IMAGE) as lab:
        m = RayMissionLab(RayLab(lab, head="h1", workers=("h2", "h3"), drivers=("h4",)).start())
        return run_host_faults(m, m.start())
