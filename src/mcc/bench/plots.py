"""PNG plots of perftest rows (matplotlib, no display needed).

One function per bench; :func:`plot_bench` picks it. Every plot is drawn from the rows of one
run, so anchors and MCC share the axes: latency vs size per send interval and latency CDFs,
throughput vs size, latency and throughput vs publishers × subscribers, blocked writes, and
latency with and without load.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["plot_bench"]

Rows = Sequence[dict[str, Any]]


def plot_bench(bench: str, rows: Rows, out_dir: Path) -> list[Path]:
    """Write the plots of ``bench`` from ``rows`` into ``out_dir``; the files written."""
    plotter: dict[str, Callable[[Rows, Path], list[Path]]] = {
        "latency": plot_latency,
        "throughput": plot_throughput,
        "scale": plot_scale,
        "blocked": plot_blocked,
        "load": plot_load,
    }
    if bench not in plotter:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    ok = [r for r in rows if not r.get("error")]
    return plotter[bench](ok, out_dir) if ok else []


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return path


def _interval_label(interval_ms: float) -> str:
    return "as fast as possible" if not interval_ms else f"every {interval_ms:g} ms"


def plot_latency(rows: Rows, out_dir: Path) -> list[Path]:
    """p50 (line) and p99 (dashed) one-way latency vs size, one panel per send interval;
    and the CDF of each MCC row, one panel per interval."""
    plt = pyplot()
    intervals = sorted({r["interval_ms"] for r in rows})
    series = list(dict.fromkeys((r["impl"], r.get("net")) for r in rows))
    fig, axes = plt.subplots(1, len(intervals), figsize=(5 * len(intervals), 4), squeeze=False)
    for ax, interval in zip(axes[0], intervals, strict=True):
        for impl, net in series:
            pts = sorted(
                (r["size_bytes"], r["p50_us"], r["p99_us"])
                for r in rows
                if (r["impl"], r.get("net")) == (impl, net)
                and r["interval_ms"] == interval
                and r.get("p50_us")
            )
            if not pts:
                continue
            name = _series_name(impl, net, rows)
            xs = [p[0] for p in pts]
            (line,) = ax.plot(xs, [p[1] for p in pts], marker="o", label=f"{name} p50")
            ax.plot(xs, [p[2] for p in pts], ls="--", color=line.get_color(), label=f"{name} p99")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel("one-way latency (µs)")
        ax.set_title(_interval_label(interval))
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    paths = [save_figure(fig, out_dir / "latency_vs_size.png")]
    cdf_rows = [r for r in rows if r.get("cdf_us")]
    if cdf_rows:
        fig, axes = plt.subplots(1, len(intervals), figsize=(5 * len(intervals), 4), squeeze=False)
        for ax, interval in zip(axes[0], intervals, strict=True):
            for r in cdf_rows:
                if r["interval_ms"] != interval:
                    continue
                pts = r["cdf_us"]
                ax.plot(
                    [p[1] for p in pts],
                    [p[0] / 100 for p in pts],
                    label=f"{_series_name(r['impl'], r.get('net'), rows)} {r['size_bytes']} B",
                )
            ax.set_xscale("log")
            ax.set_xlabel("one-way latency (µs)")
            ax.set_ylabel("fraction of samples")
            ax.set_title(f"CDF, {_interval_label(interval)}")
            ax.grid(True, which="both", alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=6)
        paths.append(save_figure(fig, out_dir / "latency_cdf.png"))
    paths += _plot_efficiency(rows, out_dir, "latency", "p50 latency host / netns")
    return paths


def _series_name(impl: str, net: str | None, rows: Rows) -> str:
    """The implementation, with its network when the rows hold more than one."""
    return f"{impl} ({net})" if len({r.get("net") for r in rows}) > 1 else impl


def _plot_efficiency(rows: Rows, out_dir: Path, bench: str, what: str) -> list[Path]:
    """Virtualisation efficiency (netns relative to host) vs size, per implementation."""
    eff = [r for r in rows if r.get("efficiency_vs_host")]
    if not eff:
        return []
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    keys = list(dict.fromkeys((r["impl"], r.get("interval_ms"), r.get("batching")) for r in eff))
    for impl, interval, batching in keys:
        pts = sorted(
            (r["size_bytes"], r["efficiency_vs_host"])
            for r in eff
            if (r["impl"], r.get("interval_ms"), r.get("batching")) == (impl, interval, batching)
        )
        label = impl
        if interval is not None:
            label += f", {_interval_label(interval)}"
        if batching not in (None, "none"):
            label += f", {batching} batching"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel(f"efficiency ({what})")
    ax.set_title("virtualisation efficiency: netns bridge vs loopback")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6)
    return [save_figure(fig, out_dir / f"{bench}_efficiency.png")]


def plot_throughput(rows: Rows, out_dir: Path) -> list[Path]:
    """Samples/s and MB/s at the subscriber vs size, one line per implementation/batching."""
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    series = list(dict.fromkeys((r["impl"], r.get("batching", "none"), r.get("net")) for r in rows))
    for impl, batching, net in series:
        pts = sorted(
            (r["size_bytes"], r["samples_per_s"], r["mb_per_s"])
            for r in rows
            if (r["impl"], r.get("batching", "none"), r.get("net")) == (impl, batching, net)
            and r.get("samples_per_s")
        )
        if not pts:
            continue
        name = _series_name(impl, net, rows)
        label = name if batching == "none" else f"{name}, {batching} batching"
        xs = [p[0] for p in pts]
        ax1.plot(xs, [p[1] for p in pts], marker="o", label=label)
        ax2.plot(xs, [p[2] for p in pts], marker="o", label=label)
    for ax, what in ((ax1, "samples/s"), (ax2, "MB/s")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel(what)
        ax.grid(True, which="both", alpha=0.3)
    ax1.legend(fontsize=7)
    ax1.set_title("throughput at the subscriber")
    paths = [save_figure(fig, out_dir / "throughput_vs_size.png")]
    return paths + _plot_efficiency(rows, out_dir, "throughput", "samples/s netns / host")


def plot_scale(rows: Rows, out_dir: Path) -> list[Path]:
    """Per-subscriber p50/p99 latency and samples/s vs publishers × subscribers."""
    plt = pyplot()
    mcc = [r for r in rows if r["impl"] == "mcc" and r.get("p50_us")]
    if not mcc:
        return []
    labels = list(dict.fromkeys(f"{r['publishers']}x{r['subscribers']}" for r in mcc))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for label_i, label in enumerate(labels):
        group = [r for r in mcc if f"{r['publishers']}x{r['subscribers']}" == label]
        xs = [label_i] * len(group)
        first = label_i == 0
        ax1.scatter(xs, [r["p50_us"] for r in group], color="C0", label="p50" if first else None)
        ax1.scatter(
            xs, [r["p99_us"] for r in group], color="C1", marker="x", label="p99" if first else None
        )
        ax2.scatter(xs, [r["samples_per_s"] for r in group], color="C2")
    for ax in (ax1, ax2):
        ax.set_xticks(range(len(labels)), labels)
        ax.set_xlabel("publishers x subscribers (processes)")
        ax.grid(True, alpha=0.3)
    ax1.set_ylabel("one-way latency per subscriber (µs)")
    ax1.set_yscale("log")
    ax1.legend(fontsize=7)
    ax2.set_ylabel("samples/s per subscriber")
    ax1.set_title("latency vs N x M")
    ax2.set_title("throughput per subscriber vs N x M")
    return [save_figure(fig, out_dir / "scale_latency_vs_nxm.png")]


def plot_blocked(rows: Rows, out_dir: Path) -> list[Path]:
    """Blocked writes and the longest write vs size, one line per send interval."""
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for interval in sorted({r["interval_ms"] for r in rows}):
        pts = sorted(
            (r["size_bytes"], r["blocked"], r.get("write_max_us") or 0)
            for r in rows
            if r["interval_ms"] == interval and r.get("writes")
        )
        if not pts:
            continue
        xs = [p[0] for p in pts]
        ax1.plot(xs, [p[1] for p in pts], marker="o", label=_interval_label(interval))
        ax2.plot(xs, [p[2] / 1000 for p in pts], marker="o", label=_interval_label(interval))
    ax1.set_ylabel("blocked writes")
    ax2.set_ylabel("longest write (ms)")
    ax2.set_yscale("log")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("size (bytes)")
        ax.grid(True, which="both", alpha=0.3)
    ax1.legend(fontsize=7)
    ax1.set_title("writes that blocked (full send queue)")
    return [save_figure(fig, out_dir / "blocked_writes.png")]


def plot_load(rows: Rows, out_dir: Path) -> list[Path]:
    """p50 and p99 latency per load condition, MCC beside ddsperf; one panel per size."""
    plt = pyplot()
    loads = list(dict.fromkeys(r["load"] for r in rows))
    sizes = sorted({r["size_bytes"] for r in rows})
    series = list(dict.fromkeys((r["impl"], r.get("net")) for r in rows))
    fig, axes = plt.subplots(1, len(sizes), figsize=(7 * len(sizes), 4), squeeze=False)
    width = 0.8 / max(1, 2 * len(series))
    for ax, size in zip(axes[0], sizes, strict=True):
        for i, (impl, net) in enumerate(series):
            for j, (field, hatch) in enumerate((("p50_us", ""), ("p99_us", "//"))):
                values = [
                    next(
                        (
                            r.get(field) or 0
                            for r in rows
                            if (r["impl"], r.get("net"), r["load"], r["size_bytes"])
                            == (impl, net, load, size)
                        ),
                        0,
                    )
                    for load in loads
                ]
                ax.bar(
                    [k + (2 * i + j) * width for k in range(len(loads))],
                    values,
                    width,
                    hatch=hatch,
                    color=f"C{i}",
                    label=f"{_series_name(impl, net, rows)} {field[:-3]}",
                )
        ax.set_xticks([k + 0.4 - width / 2 for k in range(len(loads))], loads)
        ax.set_yscale("log")
        ax.set_ylabel("one-way latency (µs)")
        ax.set_title(f"latency unloaded vs loaded, {size} B")
        ax.grid(True, axis="y", which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    return [save_figure(fig, out_dir / "load_latency.png")]
