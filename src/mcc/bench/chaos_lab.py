"""The lab's SAM TOC fault for ``mcc bench chaos --net lab``: a worker host lost under a raid,
scored as on one host (picture gap, id switches, orders lost or duplicated).

`sam_worker_host` runs the SAM TOC under a raid that never ends (`sam_toc`,
secured, on Ray) on the container lab of `mcc.lab.raychaos` (Redis and the head on h1, workers
h2 and h3, the supervisor on h4), records on h4 what a workstation hears (``python -m
mcc.bench.chaos_lab``, the mission's ``console`` identity exported there), kills the worker host
that runs TEWA and most launchers, and scores the recording with the chaos bench's own code
(`mcc.bench.chaos_watch`): the longest ``AirPicture`` silence around the kill, tracks of the
last picture before it lost while new ids appear, and over the run the orders never answered
(issued more than ``ORDER_DRAIN_S`` before the end) or answered with two final outcomes; and
which moved instances started from the state their app had kept on the lost host (their log
says ``restored from``, the tracker's ``resumed``: the Ray backend carries it through the GCS).

Run as a module it is that recorder: what a workstation of a secured mission hears of its
picture and its engagements, one JSON line each, stamped with the host's wall clock (the lab's
containers share the machine's); `load` reads the lines back into a `Watch`.

    python -m mcc.bench.chaos_lab --domain 8 --identity console.mcc-identity --out watch.jsonl
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from mcc.bench.chaos_watch import (
    ORDER_DRAIN_S,
    Watch,
    enum_value,
    id_switches,
    picture_gap,
    score_orders,
)
from mcc.bus import Bus
from mcc.bus.transport import Transport
from mcc.errors import MccError
from mcc.lab.raychaos import DOMAIN, MISSION, LabMission
from mcc.lab.raycluster import RayLab
from mcc.resources import mission_file
from mcc.waiting import WaitTimeoutError, wait_for

__all__ = [
    "bench",
    "compare",
    "figures",
    "lab_summary",
    "load",
    "main",
    "past_the_raid",
    "ray_lab",
    "sam_toc",
    "sam_worker_host",
]

#: After the kill, how long the run goes on before it is scored: every order issued before
#: the kill is answered or counted lost (`ORDER_DRAIN_S`), and the picture has settled.
AFTER_KILL_S = ORDER_DRAIN_S + 10.0
#: The picture's silence is looked for from a second before the kill to this long after the
#: instances run again.
GAP_AFTER_S = 5.0
WATCH_FILE = "watch.jsonl"


class _Recorder:
    """The bus handlers: one line per sample, flushed as it comes (the host may be lost)."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.lock = threading.Lock()
        self.lines = 0

    def _line(self, record: dict[str, Any]) -> None:
        with self.lock:
            self.out.write(json.dumps({"t": round(time.time(), 4), **record}) + "\n")
            self.out.flush()
            self.lines += 1

    def picture(self, reader: Any) -> None:
        for msg in reader.take():
            ids = np.frombuffer(bytes(msg.track_id), dtype="<u4")
            self._line({"kind": "picture", "ids": [int(i) for i in ids]})

    def order(self, reader: Any) -> None:
        for msg in reader.take():
            self._line({"kind": "order", "id": msg.order_id, "status": enum_value(msg.status)})

    def outcome(self, reader: Any) -> None:
        for msg in reader.take():
            status, rounds = enum_value(msg.status), int(msg.rounds)
            self._line({"kind": "outcome", "id": msg.order_id, "status": status, "rounds": rounds})


def load(path: Path, mission: str) -> Watch:
    """The lines of a watch file as a `Watch`, its times the wall clock's (seconds)."""
    from mcc.types import OrderStatus

    watch = Watch(mission)
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # the last line of a host lost mid-write
        t, kind = float(rec["t"]), rec["kind"]
        if kind == "picture":
            watch.pictures.append((t, frozenset(rec["ids"])))
        elif kind == "order":
            watch.order_ids.add(rec["id"])
            if rec["status"] == OrderStatus.ORDER_ISSUED.value:
                watch.orders.setdefault(rec["id"], t)
        elif kind == "outcome":
            watch.outcomes.setdefault(rec["id"], set()).add((rec["status"], rec["rounds"]))
    return watch


def sam_toc(name: str = "sam-toc-continuous") -> LabMission:
    """Shipped SAM TOC mission ``name`` renamed and moved to the lab's mission and domain,
    started in its engagement phase: by default under a raid that never ends
    (``missions/sam-toc-continuous.yaml``), orders and outcomes to count across a fault;
    ``"sam-toc"``: against its 90-s raid, what its summary says is compared with one host's."""
    text = mission_file(name).read_text()
    text = text.replace(f"mission: {name}", f"mission: {MISSION}", 1)
    text = text.replace("domain: 10", f"domain: {DOMAIN}", 1)
    systems = {"truth": 1, "radar": 2, "tracker": 1, "tewa": 1, "launcher": 3, "assessor": 1}
    ids = frozenset(f"{MISSION}/{s}/{i}" for s, n in systems.items() for i in range(n))
    return LabMission(text, ids, phase="engagement")


def sam_worker_host(ray: RayLab, systems: tuple[str, ...] = ("tewa", "launcher")) -> dict[str, Any]:
    """The SAM TOC on ``ray`` (a started `RayLab` with a driver host), the worker host that
    runs most instances of ``systems`` killed under its raid; the row (the module's
    docstring). With ``("tracker",)`` the air picture's host: its id switches are counted."""
    from mcc.lab.raychaos import HOME, RayMissionLab, worker_host_fault

    home = ray.drivers[0]
    m = RayMissionLab(ray, sam_toc(), watcher=home)
    first = m.start()
    lab, keystore = m.lab, m.keystore
    identity, out = f"{HOME}/console.mcc-identity", f"{HOME}/{WATCH_FILE}"
    lab.exec(home, ["mcc", "security", "export", keystore, f"{MISSION}/console", "--out", identity])
    lab.exec(
        home,
        ["sh", "-c", f"exec /opt/mcc/bin/python -m mcc.bench.chaos_lab --domain {DOMAIN} "
         f"--identity {identity} --out {out} > {HOME}/watch.log 2>&1"],
        detach=True,
    )  # fmt: skip

    def outcomes() -> int:
        proc = lab.exec(home, ["sh", "-c", f"grep -c outcome {out} || true"], check=False)
        return int(proc.stdout.strip() or 0)

    wait_for(outcomes, 240, "the raid's first outcomes at the workstation", period_s=2.0)
    engaged = Counter(v["node"] for k, v in first.items() if k.split("/")[1] in systems)
    victim = engaged.most_common(1)[0][0]
    survivor = next(w for w in ray.workers if w != victim)
    row, _, killed = worker_host_fault(m, first, victim, survivor)
    time.sleep(AFTER_KILL_S)
    with tempfile.TemporaryDirectory(prefix="mcc-chaos-lab-") as tmp:
        local = Path(tmp) / WATCH_FILE
        lab.copy_out(home, out, local)
        watch = load(local, MISSION)
    found = lab.exec(
        survivor,
        ["sh", "-c", f"grep -lE 'restored from|: resumed ' {HOME}/runs/*/logs/*.log || true"],
        check=False,
    ).stdout.split()
    restored = sorted(Path(f).stem for f in found)  # "launcher-0": its state came along
    recovered = killed + (row["recover_s"] if row["recover_s"] is not None else AFTER_KILL_S)
    before = sum(1 for t, _ in watch.pictures if t < killed)
    scored = score_orders(watch, time.time())
    moved = sorted({k.split("/")[1] for k in row["restarted_ids"]})
    row.update(
        mission="sam-toc-continuous",
        target=f"{victim} ({', '.join(moved)})",
        picture_gap_s=picture_gap(watch, killed - 1.0, recovered + GAP_AFTER_S),
        id_switches=id_switches(watch, before, recovered) if "tracker" in moved else None,
        state_restored=restored,
        **scored,
    )
    row["ok"] = bool(row["ok"]) and not scored["orders_lost"] and not scored["orders_duplicated"]
    return row


#: ``missions/sam-toc.yaml``'s raid is 90 s of scenario time: its summary is read once the
#: simulation is past this (the last interceptors of the raid have flown).
SUMMARY_AFTER_S = 100.0
#: The raid's own span (``scenarios/sam-toc.yaml``'s ``duration_s``): the picture's GOSPA is
#: averaged over it (the assessor's running mean goes on falling over the empty sky after).
RAID_S = 90
#: What the mission's summary is compared on, lab against one host (`mcc.bench.chaos.summary_rows`).
SUMMARY_FIGURES = (
    "orders", "kills", "misses", "targets_killed", "leakers", "friends_killed", "gospa_mean_m",
)  # fmt: skip


def figures(summary: dict[str, Any], truth: dict[str, Any]) -> dict[str, Any]:
    """The compared figures of a run: the assessor's ``summary.json`` (orders and their
    outcomes, the picture's GOSPA over the raid's seconds) and the truth's
    ``truth-summary.json`` (targets killed, leakers, friends killed)."""
    return {
        "orders": summary.get("orders"),
        "kills": summary.get("kills"),
        "misses": summary.get("misses"),
        "targets_killed": truth.get("kills_total"),
        "leakers": truth.get("leakers"),
        "friends_killed": len(truth.get("friends_killed") or []),
        "gospa_mean_m": _raid_gospa(summary.get("gospa_by_scenario_s") or {}),
    }


def _raid_gospa(by_second: dict[str, float]) -> float | None:
    """The mean of the assessor's per-second GOSPA over the raid's seconds."""
    kept = [float(v) for k, v in by_second.items() if 0 <= int(k) < RAID_S]
    return round(float(np.mean(kept)), 2) if kept else None


def past_the_raid(truth: dict[str, Any] | None, summary: dict[str, Any] | None) -> bool:
    return bool(truth and summary and float(truth.get("end_s", 0.0)) >= SUMMARY_AFTER_S)


def lab_summary(ray: RayLab) -> dict[str, Any]:
    """``sam_toc("sam-toc")`` on ``ray`` (its supervisor on the first driver host); its figures
    once the raid is over, read from the worker hosts where the truth and the assessor ran."""
    from mcc.lab.raychaos import HOME, RayMissionLab

    m = RayMissionLab(ray, sam_toc("sam-toc"), watcher=ray.drivers[0])
    m.start()

    seen: dict[str, Any] = {}

    def read(name: str) -> dict[str, Any] | None:
        """``name`` from whichever worker host ran its app (the other has no such file)."""
        for host in ray.workers:
            proc = m.lab.exec(
                host, ["sh", "-c", f"cat {HOME}/runs/*/{name} 2>/dev/null || true"], check=False
            )
            if not proc.stdout.strip():
                continue  # not this host's
            try:
                seen[name] = (host, dict(json.loads(proc.stdout)))
                return dict(seen[name][1])
            except ValueError:
                continue  # two run folders, or a file being replaced: read again
        return None

    try:
        found = wait_for(
            lambda: (
                past_the_raid(truth := read("truth-summary.json"), summary := read("summary.json"))
                and (summary, truth)
            ),
            SUMMARY_AFTER_S + 240,
            "the lab's raid over",
            period_s=2.0,
        )
    except WaitTimeoutError as exc:
        where = {name: host for name, (host, _) in seen.items()}
        end_s = seen.get("truth-summary.json", (None, {}))[1].get("end_s")
        raise WaitTimeoutError(
            f"{exc} (files found: {where or 'none'}, truth at {end_s} s)"
        ) from None
    return figures(*found)


def compare(lab: Sequence[dict[str, Any]], host: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Lab runs against one host's: per figure, each side's values, the spread of the host's
    own runs (the noise) and whether every lab value lies within the host's range widened by
    that spread (at least 1 for counts); fratricide must be 0 everywhere, and a figure a run
    did not give fails."""
    out: dict[str, Any] = {}
    ok = True
    for key in SUMMARY_FIGURES:
        ours = [r[key] for r in lab if r.get(key) is not None]
        base = [r[key] for r in host if r.get(key) is not None]
        if len(ours) < len(lab) or len(base) < len(host):
            out[key] = {"lab": ours, "host": base, "within": None}  # a run did not say
            ok = False
            continue
        noise = max(base) - min(base)
        slack = max(noise, 1.0 if key != "gospa_mean_m" else 0.05 * max(base))
        within = all(min(base) - slack <= v <= max(base) + slack for v in ours)
        if key == "friends_killed":
            within = not any(ours) and not any(base)
        out[key] = {"lab": ours, "host": base, "noise": noise, "within": within}
        ok = ok and within
    out["ok"] = ok
    return out


def bench(name: str = "chaos") -> list[dict[str, Any]]:
    """``mcc bench chaos --net lab``: the four host faults of `mcc.lab.raychaos` on its probe
    mission, then, each on a fresh lab, the SAM TOC's worker host (`sam_worker_host`) that
    runs TEWA and the launchers, and the one that runs the tracker; the rows."""
    from mcc.lab.raychaos import bench as host_faults

    rows = host_faults(name)
    for systems in (("tewa", "launcher"), ("tracker",)):
        with ray_lab(f"{name}{systems[0][:2]}") as ray:
            rows.append(sam_worker_host(ray, systems))
    return rows


@contextlib.contextmanager
def ray_lab(name: str) -> Iterator[RayLab]:
    """A fresh lab of four container hosts, Ray started: its head on h1, workers on h2 and h3,
    the driver (the supervisor's host) h4."""
    from mcc.lab.hosts import ContainerLab
    from mcc.lab.raycluster import RAY_IMAGE

    with ContainerLab(4, name=name, image=RAY_IMAGE) as lab:
        yield RayLab(lab, head="h1", workers=("h2", "h3"), drivers=("h4",)).start()


def main(argv: Sequence[str] | None = None) -> int:
    from mcc.security.bundle import import_identity, read_bundle

    parser = argparse.ArgumentParser(prog="python -m mcc.bench.chaos_lab", description=__doc__)
    parser.add_argument("--domain", type=int, required=True, help="the mission's DDS domain")
    parser.add_argument("--identity", type=Path, required=True, help="mcc security export file")
    parser.add_argument("--out", type=Path, required=True, help="the JSON lines file written")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="mcc-watch-"))  # 0700, removed on exit
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        found = import_identity(read_bundle(args.identity), folder)
        base = Transport.from_env()
        transport = dataclasses.replace(
            base, extra_xml=base.extra_xml + found.identity.security_xml()
        )
        with args.out.open("a") as out, Bus(args.domain, transport=transport, name="watch") as bus:
            rec = _Recorder(out)
            bus.reader("AirPicture", on_data=rec.picture)
            bus.reader("EngagementOrder", on_data=rec.order)
            bus.reader("EngagementOutcome", on_data=rec.outcome)
            while not stop.wait(0.5):
                pass
    except MccError as exc:
        print(f"python -m mcc.bench.chaos_lab: {exc}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
