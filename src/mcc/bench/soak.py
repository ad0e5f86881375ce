"""``mcc bench soak``: run a mission under continuous load for a long time and judge whether it
stays flat.

The mission runs as an operator runs it (`mcc up`, its node agent, its instances: the chaos
bench's `BenchMission`), by default ``missions/sam-toc-continuous.yaml``, whose raids never stop.
Every ``--every`` seconds the bench samples, from ``/proc`` (psutil) of each process the
mission's ``MissionStatus`` names (and the supervisor and node agent): resident memory, open
file descriptors, threads and CPU; the size of what the mission keeps on disk (its run folder's
state records, summaries and SQLite stores; the logs apart); its own bus statistics (samples
lost, rejected or dropped on its readers). From the bus it takes the air-picture latency
(``AirPicture.publish_ns − origin_ns``) and the sensor-to-shooter latency
(``EngagementOrder.issue_ns − origin_ns``: detection → order) and keeps their percentiles per
``--window``.

After ``--warmup`` it fits a least-squares line (numpy) to each series and reports the growth
per hour; the targets (docs/benchmarks.md, issue "hours, not minutes") are judged met or missed:
RSS growth ≤ 1 MB/h per process, file descriptors and threads flat, the store bounded, the p99
sensor-to-shooter latency of the last window within 10 % of the first window's, and no restart
the bench did not cause. ``--kill-every S`` kills -9 one instance every S seconds (the chaos
bench's kills, in turn over the systems); the restarts they cause are not counted against it.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mcc.bench import report
from mcc.bench.chaos import BenchMission, engage_all, observer
from mcc.bench.chaos_watch import enum_value
from mcc.errors import MccError
from mcc.types import OrderStatus, SystemState

__all__ = ["SoakPlan", "analyse", "parse_duration", "run_soak"]

DEFAULT_MANIFEST = "missions/sam-toc-continuous.yaml"
#: The targets: growth per hour after the warm-up, flatness, latency drift.
RSS_MB_PER_H = 1.0
FLAT_COUNT = 2  # fds or threads may move by this much after the warm-up (a socket, a timer)
P99_DRIFT = 0.10
STORE_LIMIT_MB = 256.0  # mcc.persist's default max_store_bytes: what a day may reach
PROJECT_H = 24.0
INSTANCE_COLUMNS = (
    "process",
    "samples",
    "rss_mb_first",
    "rss_mb_last",
    "rss_mb_per_h",
    "fds_first",
    "fds_last",
    "fds_per_h",
    "threads_first",
    "threads_last",
    "cpu_pct_mean",
    "ok",
)
WINDOW_COLUMNS = (
    "window",
    "from_s",
    "to_s",
    "orders",
    "s2s_p50_ms",
    "s2s_p99_ms",
    "pictures",
    "picture_p50_ms",
    "picture_p99_ms",
    "store_kb",
)
TARGET_COLUMNS = ("target", "measured", "limit", "status")


def parse_duration(option: str, text: str, *, zero: bool = False) -> float:
    """``"90"``, ``"90s"``, ``"30m"``, ``"2h"`` → seconds (> 0, or >= 0 with ``zero``);
    MccError otherwise."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([smh]?)\s*", str(text))
    if not match or (float(match.group(1)) <= 0 and not zero):
        least = ">= 0" if zero else "> 0"
        raise MccError(f"{option}: a duration {least} such as 90, 90s, 30m or 2h (got {text!r})")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]


@dataclass(frozen=True)
class SoakPlan:
    """What one soak run does."""

    manifest: Path = Path(DEFAULT_MANIFEST)
    duration_s: float = 1800.0
    every_s: float = 10.0
    warmup_s: float = 300.0
    window_s: float = 600.0
    kill_every_s: float = 0.0  # 0: no kill
    net: str = "host"  # or "netns": three emulated hosts (the chaos bench's)
    loss_pct: float = 0.0  # tc netem loss on every emulated host's packets
    rss_mb_per_h: float = RSS_MB_PER_H
    flat_count: int = FLAT_COUNT
    p99_drift: float = P99_DRIFT
    store_limit_mb: float = STORE_LIMIT_MB

    def check(self) -> None:
        if not self.manifest.exists():
            raise MccError(f"{self.manifest}: no such mission manifest")
        for name in ("duration_s", "every_s", "window_s", "rss_mb_per_h", "store_limit_mb"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise MccError(f"--{name.split('_')[0]}: must be > 0 (got {value:g})")
        if not 0 <= self.warmup_s < self.duration_s:
            raise MccError(
                f"--warmup: must be >= 0 and shorter than --duration {self.duration_s:g} s "
                f"(got {self.warmup_s:g})"
            )
        if self.every_s * 3 > self.duration_s - self.warmup_s:
            raise MccError(
                f"--every {self.every_s:g}: at least three samples after the warm-up are needed "
                f"({self.duration_s - self.warmup_s:g} s)"
            )
        if self.kill_every_s < 0:
            raise MccError(f"--kill-every: must be >= 0 (got {self.kill_every_s:g})")
        if self.net not in ("host", "netns"):
            raise MccError(f"--net: must be host or netns (got {self.net!r})")
        if not (math.isfinite(self.loss_pct) and 0 <= self.loss_pct < 100):
            raise MccError(f"--loss: a percentage in [0, 100) (got {self.loss_pct:g})")
        if self.loss_pct and self.net != "netns":
            raise MccError("--loss needs --net netns (the loss is applied on the emulated hosts)")


# -- what the bench hears ---------------------------------------------------------------------


@dataclass
class SoakWatch:
    """What the bench hears on the bus, bounded: the latest status, the latencies of the
    current window (moved out at each window's end)."""

    mission: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    latest: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # id → state, pid, n
    pictures_ms: list[float] = field(default_factory=list)
    orders_ms: list[float] = field(default_factory=list)

    def on_status(self, reader: Any) -> None:
        for msg in reader.take():
            if msg.mission != self.mission:
                continue
            entries = {e.system_id: (enum_value(e.state), e.pid, e.restarts) for e in msg.systems}
            with self.lock:
                self.latest = entries

    def on_picture(self, reader: Any) -> None:
        for msg in reader.take():
            if msg.publish_ns and msg.origin_ns:
                with self.lock:
                    self.pictures_ms.append((msg.publish_ns - msg.origin_ns) / 1e6)

    def on_order(self, reader: Any) -> None:
        issued = OrderStatus.ORDER_ISSUED.value
        for order in reader.take():
            if enum_value(order.status) == issued and order.issue_ns and order.origin_ns:
                with self.lock:
                    self.orders_ms.append((order.issue_ns - order.origin_ns) / 1e6)

    def on_beat(self, reader: Any) -> None:  # heard, not kept
        reader.take()

    on_outcome = on_beat

    def running(self) -> dict[str, tuple[int, int, int]]:
        running = SystemState.SYSTEM_RUNNING.value
        with self.lock:
            return {k: v for k, v in self.latest.items() if v[0] == running}

    def restarts(self) -> dict[str, int]:
        with self.lock:
            return {k: v[2] for k, v in self.latest.items()}

    def take_window(self) -> tuple[list[float], list[float]]:
        with self.lock:
            out = self.orders_ms, self.pictures_ms
            self.orders_ms, self.pictures_ms = [], []
        return out


# -- sampling ---------------------------------------------------------------------------------


class ProcSampler:
    """Per process (by pid): RSS, fds, threads and CPU % since its previous sample."""

    def __init__(self) -> None:
        self._cpu: dict[int, tuple[float, float]] = {}  # pid → (cpu seconds, monotonic)

    def sample(self, pid: int) -> dict[str, float] | None:
        import psutil

        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                rss = proc.memory_info().rss
                fds = proc.num_fds()
                threads = proc.num_threads()
                times = proc.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return None
        now, cpu_s = time.monotonic(), times.user + times.system
        before = self._cpu.get(pid)
        self._cpu[pid] = (cpu_s, now)
        cpu_pct = (
            100.0 * (cpu_s - before[0]) / (now - before[1])
            if before and now > before[1]
            else math.nan
        )
        return {"rss_mb": rss / 1e6, "fds": fds, "threads": threads, "cpu_pct": cpu_pct}

    def forget(self, live: set[int]) -> None:
        self._cpu = {pid: v for pid, v in self._cpu.items() if pid in live}


def store_bytes(run_dirs: Sequence[Path], *, logs: bool = False) -> int:
    """What a mission keeps on disk besides its logs: state records, summaries, SQLite stores
    (with their -wal/-shm), anything under the run folder but ``logs/``; with ``logs``, what
    is under ``logs/`` only."""
    total = 0
    for run_dir in run_dirs:
        for path in run_dir.rglob("*"):
            if ("logs" in path.relative_to(run_dir).parts[:1]) != logs:
                continue
            with contextlib.suppress(OSError):
                if path.is_file():
                    total += path.stat().st_size
    return total


# -- analysis ---------------------------------------------------------------------------------


def slope_per_h(t_s: Sequence[float], values: Sequence[float]) -> float | None:
    """The least-squares slope of ``values`` against ``t_s``, per hour (None: < 3 points)."""
    t = np.asarray(t_s, dtype=float)
    v = np.asarray(values, dtype=float)
    keep = np.isfinite(v)
    if keep.sum() < 3 or np.ptp(t[keep]) <= 0:
        return None
    return float(np.polyfit(t[keep] / 3600.0, v[keep], 1)[0])


def _p(values: Sequence[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 2) if len(values) else None


def analyse(
    samples: Sequence[dict[str, Any]],
    windows: Sequence[dict[str, Any]],
    *,
    plan: SoakPlan,
    restarts_unexplained: int,
    stores: Sequence[tuple[float, int]],
) -> dict[str, Any]:
    """Per process growth rates after the warm-up and the targets, met or missed.

    ``samples``: one dict per process and sampling instant (``t_s`` from the start, ``process``,
    ``pid``, ``rss_mb``, ``fds``, ``threads``, ``cpu_pct``). A process whose pid changed (a kill,
    a restart) is fitted on its last pid only, from ``warmup_s`` after that pid's first sample.
    """
    rows = []
    for name, series in _by_process(samples):
        last_pid = series[-1]["pid"]
        own = [s for s in series if s["pid"] == last_pid]
        # a process replaced during the run (a kill) warms up again from its first sample
        replaced = len(own) < len(series)
        start = own[0]["t_s"] + plan.warmup_s if replaced else plan.warmup_s
        kept = [s for s in own if s["t_s"] >= start]
        t = [s["t_s"] for s in kept]
        rss = slope_per_h(t, [s["rss_mb"] for s in kept])
        fds = slope_per_h(t, [s["fds"] for s in kept])
        row: dict[str, Any] = {
            "process": name,
            "pid": last_pid,
            "samples": len(kept),
            "rss_mb_first": round(kept[0]["rss_mb"], 1) if kept else None,
            "rss_mb_last": round(kept[-1]["rss_mb"], 1) if kept else None,
            "rss_mb_per_h": None if rss is None else round(rss, 2),
            "fds_first": kept[0]["fds"] if kept else None,
            "fds_last": kept[-1]["fds"] if kept else None,
            "fds_max": max((s["fds"] for s in kept), default=None),
            "fds_per_h": None if fds is None else round(fds, 2),
            "threads_first": kept[0]["threads"] if kept else None,
            "threads_last": kept[-1]["threads"] if kept else None,
            "threads_max": max((s["threads"] for s in kept), default=None),
            "cpu_pct_mean": _mean([s["cpu_pct"] for s in kept]),
        }
        row["rss_ok"] = rss is not None and rss <= plan.rss_mb_per_h
        row["fds_ok"] = bool(kept) and row["fds_max"] - row["fds_first"] <= plan.flat_count
        row["threads_ok"] = (
            bool(kept) and row["threads_max"] - row["threads_first"] <= plan.flat_count
        )
        row["ok"] = row["rss_ok"] and row["fds_ok"] and row["threads_ok"]
        rows.append(row)
    targets = _targets(rows, windows, plan, restarts_unexplained, stores)
    return {"processes": rows, "targets": targets}


def _by_process(samples: Sequence[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The samples per process, by name."""
    by_process: dict[str, list[dict[str, Any]]] = {}
    for s in samples:
        by_process.setdefault(s["process"], []).append(s)
    return sorted(by_process.items())


def _mean(values: Sequence[float]) -> float | None:
    finite = [v for v in values if math.isfinite(v)]
    return round(float(np.mean(finite)), 1) if finite else None


def _targets(
    rows: list[dict[str, Any]],
    windows: Sequence[dict[str, Any]],
    plan: SoakPlan,
    restarts: int,
    stores: Sequence[tuple[float, int]],
) -> list[dict[str, Any]]:
    def target(name: str, measured: Any, limit: str, ok: bool) -> dict[str, Any]:
        status = "met" if ok else "MISSED"
        return {"target": name, "measured": measured, "limit": limit, "status": status}

    worst_rss = max(rows, key=lambda r: r["rss_mb_per_h"] or -math.inf, default=None)
    out = [
        target(
            "RSS growth after warm-up, worst process (MB/h)",
            f"{worst_rss['rss_mb_per_h']} ({worst_rss['process']})" if worst_rss else None,
            f"≤ {plan.rss_mb_per_h:g} per process",
            bool(rows) and all(r["rss_ok"] for r in rows),
        ),
    ]
    flat = f"each within {plan.flat_count} of its first count"
    for key, what in (("fds", "file descriptors"), ("threads", "threads")):
        grew = [r["process"] for r in rows if not r[f"{key}_ok"]]
        name = f"{what} flat after warm-up (processes that grew)"
        out.append(target(name, ", ".join(grew) or "none", flat, bool(rows) and not grew))
    after = [(t, b) for t, b in stores if t >= plan.warmup_s]
    growth = slope_per_h([t for t, _ in after], [b / 1e6 for _, b in after])
    if after and growth is not None:
        elapsed_h = (after[-1][0]) / 3600.0
        projected = after[-1][1] / 1e6 + max(growth, 0.0) * max(PROJECT_H - elapsed_h, 0.0)
        out.append(
            target(
                f"store on disk, projected to {PROJECT_H:g} h at its growth (MB)",
                f"{projected:.2f} (now {after[-1][1] / 1e6:.2f}, {growth:+.3f} MB/h)",
                f"≤ {plan.store_limit_mb:g}",
                projected <= plan.store_limit_mb,
            )
        )
    judged = [
        w
        for w in windows
        if w["from_s"] >= plan.warmup_s
        and w["to_s"] - w["from_s"] >= 0.9 * plan.window_s  # a whole window, not the tail
        and w["s2s_p99_ms"] is not None
    ]
    drift = "sensor-to-shooter p99, last window / first window after warm-up"
    if len(judged) >= 2:
        first, last = judged[0]["s2s_p99_ms"], judged[-1]["s2s_p99_ms"]
        ratio, limit = (last / first if first else math.inf), 1 + plan.p99_drift
        measured = f"{ratio:.2f} ({last:g} / {first:g} ms)"
        out.append(target(drift, measured, f"≤ {limit:.2f}", ratio <= limit))
    else:
        measured = f"{len(judged)} window(s) with orders after warm-up"
        out.append(target(drift, measured, "two windows needed", False))
    out.append(target("restarts the bench did not cause", restarts, "0", restarts == 0))
    return out


# -- the run ----------------------------------------------------------------------------------


def run_soak(
    plan: SoakPlan,
    *,
    progress: Callable[[str], None] | None = None,
    keep_logs: Path | None = None,
) -> dict[str, Any]:
    """Run ``plan.manifest`` for ``plan.duration_s``; the samples, windows and their analysis.
    ``keep_logs``: a folder to copy the mission's logs into at the end."""
    plan.check()
    say = progress or (lambda text: None)
    with (
        tempfile.TemporaryDirectory(prefix="mcc-soak-") as tmp_name,
        BenchMission(plan.manifest, Path(tmp_name), net=plan.net, loss_pct=plan.loss_pct) as m,
    ):
        return _run(m, plan, say, keep_logs)


def _run(
    m: BenchMission, plan: SoakPlan, say: Callable[[str], None], keep_logs: Path | None
) -> dict[str, Any]:
    watch = SoakWatch(m.name)
    m.up()
    with observer(m, watch) as (bus, client):  # type: ignore[arg-type]
        systems = m.mission.all_systems()
        wanted = engage_all(m, watch, client)  # type: ignore[arg-type]
        say(f"{len(wanted)} instances running; soaking for {plan.duration_s:g} s")
        restarts_at_start = watch.restarts()
        sampler = ProcSampler()
        samples: list[dict[str, Any]] = []
        windows: list[dict[str, Any]] = []
        stores: list[tuple[float, int]] = []
        kills: list[dict[str, Any]] = []
        victims = [n for n in systems if n not in ("truth", "assessor")]
        start = time.monotonic()
        watch.take_window()  # latencies of the start-up are not the soak's
        next_sample, next_window, next_kill = 0.0, plan.window_s, plan.kill_every_s or math.inf
        window_start = 0.0
        while True:
            now = time.monotonic() - start
            if now >= next_sample:
                t_s = round(now, 3)
                pids = _pids(m, watch)
                for name, pid in pids.items():
                    row = sampler.sample(pid)
                    if row is not None:
                        samples.append({"t_s": t_s, "process": name, "pid": pid, **row})
                sampler.forget(set(pids.values()))
                stores.append((t_s, store_bytes(m.run_dirs())))
                next_sample += plan.every_s
            if now >= next_window or now >= plan.duration_s:
                windows.append(_window(len(windows), window_start, now, watch, stores))
                w = windows[-1]
                say(
                    f"t={now:.0f} s: window {w['window']}: {w['orders']} orders, s2s p99 "
                    f"{w['s2s_p99_ms']} ms, picture p99 {w['picture_p99_ms']} ms"
                )
                window_start, next_window = now, next_window + plan.window_s
            if now >= next_kill and victims:
                kills.append(_kill(m, watch, victims[len(kills) % len(victims)], now))
                next_kill += plan.kill_every_s
            if now >= plan.duration_s:
                break
            time.sleep(max(0.05, min(next_sample, next_window, next_kill) - now))
        lost = ("samples_lost", "samples_rejected", "samples_dropped")
        bus_stats = {k: getattr(bus.stats, k) for k in lost}
        restarts_at_end = watch.restarts()
        if keep_logs is not None:
            for run_dir in m.run_dirs():
                shutil.copytree(run_dir / "logs", keep_logs / run_dir.name, dirs_exist_ok=True)
            for up_log in m.tmp.glob("up-*.log"):  # the supervisors': why an instance restarted
                shutil.copy2(up_log, keep_logs / up_log.name)
    restarted = {
        k.removeprefix(f"{m.name}/"): n - restarts_at_start.get(k, 0)
        for k, n in restarts_at_end.items()
        if n > restarts_at_start.get(k, 0)
    }
    restarts = sum(restarted.values())
    unexplained = max(0, restarts - len(kills))  # an instance the bench killed restarts once
    return {
        **analyse(samples, windows, plan=plan, restarts_unexplained=unexplained, stores=stores),
        "mission": m.name,
        "plan": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(plan).items()},
        "samples": samples,
        "windows": windows,
        "stores": [{"t_s": t, "bytes": b} for t, b in stores],
        "logs_bytes": store_bytes(m.run_dirs(), logs=True),
        "kills": kills,
        "restarts": restarts,
        "restarted": restarted,
        "bench_bus": bus_stats,
    }


def _pids(m: BenchMission, watch: SoakWatch) -> dict[str, int]:
    """Process name → pid: every running instance, the supervisors and the node agent."""
    prefix = f"{m.name}/"
    out = {k.removeprefix(prefix): v[1] for k, v in watch.running().items() if v[1] > 0}
    for i, proc in enumerate(m.supervisors):
        if proc.poll() is None:
            out[f"supervisor/{i}"] = proc.pid
    agent = int(m.agent_record().get("agent_pid") or 0)
    if agent > 1:
        out["agent"] = agent
    return out


def _window(
    index: int, start: float, end: float, watch: SoakWatch, stores: list[tuple[float, int]]
) -> dict[str, Any]:
    orders, pictures = watch.take_window()
    return {
        "window": index,
        "from_s": round(start, 1),
        "to_s": round(end, 1),
        "orders": len(orders),
        "s2s_p50_ms": _p(orders, 50),
        "s2s_p99_ms": _p(orders, 99),
        "pictures": len(pictures),
        "picture_p50_ms": _p(pictures, 50),
        "picture_p99_ms": _p(pictures, 99),
        "store_kb": round(stores[-1][1] / 1e3, 1) if stores else None,
    }


def _kill(m: BenchMission, watch: SoakWatch, system: str, now: float) -> dict[str, Any]:
    victim = f"{m.name}/{system}/0"
    entry = watch.running().get(victim)
    if entry is None:
        return {"t_s": round(now, 1), "victim": victim, "error": "not running"}
    with contextlib.suppress(ProcessLookupError):
        os.kill(entry[1], signal.SIGKILL)
    return {"t_s": round(now, 1), "victim": victim, "pid": entry[1]}


# -- plots ------------------------------------------------------------------------------------


def plot_soak(result: dict[str, Any], out_dir: Path) -> list[Path]:
    """RSS, fds and threads per process over time; latency percentiles and store size per
    window. The files written."""
    from mcc.bench.plots import pyplot, save_figure

    plt = pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    warmup = result["plan"]["warmup_s"]
    written = []
    fig, axes = plt.subplots(3, 1, figsize=(9, 10), sharex=True)
    for name, series in _by_process(result["samples"]):
        t = [s["t_s"] / 60 for s in series]
        for ax, key in zip(axes, ("rss_mb", "fds", "threads"), strict=True):
            ax.plot(t, [s[key] for s in series], label=name, linewidth=1)
    for ax, label in zip(axes, ("RSS (MB)", "open fds", "threads"), strict=True):
        ax.set_ylabel(label)
        ax.axvline(warmup / 60, color="grey", linestyle=":", linewidth=1)
        ax.grid(alpha=0.3)
    axes[0].set_title(f"mcc bench soak: {result['mission']}, per process (dotted: warm-up end)")
    axes[0].legend(fontsize=7, ncol=3)
    axes[-1].set_xlabel("minutes")
    written.append(save_figure(fig, out_dir / "soak-processes.png"))

    windows = result["windows"]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    mid = [(w["from_s"] + w["to_s"]) / 120 for w in windows]
    for key, what in (("s2s", "sensor-to-shooter"), ("picture", "air picture")):
        for q in ("p50", "p99"):
            ax1.plot(mid, [w[f"{key}_{q}_ms"] for w in windows], marker="o", label=f"{what} {q}")
    ax1.set_ylabel("latency per window (ms)")
    ax1.legend(fontsize=8)
    ax1.grid(alpha=0.3)
    stores = result["stores"]
    ax2.plot([s["t_s"] / 60 for s in stores], [s["bytes"] / 1e3 for s in stores])
    ax2.set_ylabel("store on disk (kB)")
    ax2.set_xlabel("minutes")
    ax2.grid(alpha=0.3)
    for ax in (ax1, ax2):
        ax.axvline(warmup / 60, color="grey", linestyle=":", linewidth=1)
    written.append(save_figure(fig, out_dir / "soak-latency-store.png"))
    return written


# -- the command ------------------------------------------------------------------------------

NOTES = (
    "Per process (the mission's instances, its supervisor and node agent, from /proc via "
    "psutil): RSS, open file descriptors and threads, fitted by least squares after the "
    "warm-up (per hour); per window: the sensor-to-shooter latency (EngagementOrder issue_ns − "
    "origin_ns: detection → order) and the air-picture latency (publish_ns − origin_ns) heard "
    "by the bench, and the run folder's size without its logs (state records, summaries, "
    "SQLite stores)."
)


def add_parser(bench_subparsers: Any) -> None:
    parser = report.add_bench_parser(
        bench_subparsers,
        "soak",
        help="run a mission under continuous load for a long time: does it stay flat?",
        description="Run MANIFEST (default the SAM TOC under a raid that never ends) for "
        "--duration, sample each process's RSS, fds, threads and CPU, the store on disk and "
        "the latencies per window; fit the growth per hour after --warmup and judge the "
        "targets (RSS ≤ 1 MB/h per process, fds and threads flat, the store bounded, p99 "
        "sensor-to-shooter of the last window within 10 %% of the first, no restart).",
        func=cmd_soak,
        plot=True,
    )
    parser.add_argument("manifest", nargs="?", default=DEFAULT_MANIFEST, metavar="MANIFEST")
    parser.add_argument("--duration", default="30m", help="how long: 1800, 30m, 2h (default 30m)")
    parser.add_argument("--every", default="10s", help="sampling period (default 10s)")
    parser.add_argument("--warmup", default="5m", help="not fitted (default 5m)")
    parser.add_argument("--window", default="10m", help="latency window (default 10m)")
    parser.add_argument(
        "--kill-every", default="0", help="kill -9 one instance this often (default 0: never)"
    )
    parser.add_argument(
        "--net", default="host", choices=("host", "netns"),
        help="where the processes run; netns: three emulated hosts on a bridge (supervisors on "
        "a and b, the node agent and every instance on c), as the chaos bench's",
    )  # fmt: skip
    parser.add_argument(
        "--loss", type=float, default=0.0,
        help="percent of every emulated host's packets dropped (tc netem; --net netns)",
    )  # fmt: skip
    parser.add_argument("--keep-logs", metavar="DIR", help="copy the mission's logs into DIR")
    parser.add_argument(
        "--rss-limit",
        type=float,
        default=RSS_MB_PER_H,
        help="RSS growth allowed per process, MB/h (default %(default)s)",
    )


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(report.REPO_ROOT))
    except ValueError:
        return str(path)


def cmd_soak(args: argparse.Namespace) -> int:
    plan = SoakPlan(
        manifest=Path(args.manifest),
        duration_s=parse_duration("--duration", args.duration),
        every_s=parse_duration("--every", args.every),
        warmup_s=parse_duration("--warmup", args.warmup, zero=True),
        window_s=parse_duration("--window", args.window),
        kill_every_s=parse_duration("--kill-every", args.kill_every, zero=True),
        net=args.net,
        loss_pct=args.loss,
        rss_mb_per_h=args.rss_limit,
    )
    plan.check()
    result = run_soak(
        plan,
        progress=lambda text: print(f"soak: {text}", file=sys.stderr),
        keep_logs=Path(args.keep_logs) if args.keep_logs else None,
    )
    if result["restarted"]:
        print(f"soak: restarted: {result['restarted']}", file=sys.stderr)
    command = ("mcc bench soak " + " ".join(sys.argv[3:])).strip()
    doc = report.document("soak", result["processes"], command=command)
    doc.update({k: v for k, v in result.items() if k != "processes"})
    report.print_table("per process, after the warm-up", result["processes"], INSTANCE_COLUMNS)
    report.print_table("latency per window", result["windows"], WINDOW_COLUMNS)
    report.print_table("soak: targets (this run)", result["targets"], TARGET_COLUMNS)
    if args.json:
        print(f"wrote {report.write_json(doc, args.json)}")
    plots: list[Path] = []
    if args.plot:
        plots = plot_soak(result, Path(args.plot))
        for path in plots:
            print(f"wrote {path}")
    if args.record:
        shown = [_relative(p) for p in plots]
        notes = (
            NOTES
            + (" Plots: " + ", ".join(f"`{p}`" for p in shown) + "." if shown else "")
            + f" Logs grew to {result['logs_bytes'] / 1e6:.1f} MB (not in the store)."
            + "\n\n"
            + report.markdown_table(result["windows"], WINDOW_COLUMNS)
            + "\n\n"
            + report.markdown_table(result["targets"], TARGET_COLUMNS)
        )
        report.record(doc, INSTANCE_COLUMNS, notes=notes)
    return 0 if all(t["status"] == "met" for t in result["targets"]) else 1
