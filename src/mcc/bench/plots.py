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


def _size_axes(ax: Any, ylabel: str, *, ylog: bool = True) -> None:
    """Size (bytes, log2) across, ``ylabel`` up (log unless ``ylog`` is false), a grid."""
    ax.set_xscale("log", base=2)
    if ylog:
        ax.set_yscale("log")
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)


def plot_latency(rows: Rows, out_dir: Path) -> list[Path]:
    """p50 (line) and p99 (dashed) one-way latency vs size, one panel per send interval;
    and the CDF of each MCC row, one panel per interval."""
    plt = pyplot()
    intervals = sorted({r["interval_ms"] for r in rows})
    fig, axes = plt.subplots(1, len(intervals), figsize=(5 * len(intervals), 4), squeeze=False)
    for ax, interval in zip(axes[0], intervals, strict=True):
        measured = [r for r in rows if r["interval_ms"] == interval and r.get("p50_us")]
        for (impl, net), xs, p50, p99 in _by_size(rows, measured, _impl_net, "p50_us", "p99_us"):
            name = _series_name(impl, net, rows)
            (line,) = ax.plot(xs, p50, marker="o", label=f"{name} p50")
            ax.plot(xs, p99, ls="--", color=line.get_color(), label=f"{name} p99")
        _size_axes(ax, "one-way latency (µs)")
        ax.set_title(_interval_label(interval))
    axes[0][0].legend(fontsize=7)
    paths = [save_figure(fig, out_dir / "latency_vs_size.png")]
    cdf_rows = [r for r in rows if r.get("cdf_us")]
    if cdf_rows:
        fig, axes = plt.subplots(1, len(intervals), figsize=(5 * len(intervals), 4), squeeze=False)
        for ax, interval in zip(axes[0], intervals, strict=True):
            for r in (r for r in cdf_rows if r["interval_ms"] == interval):
                pct, us = zip(*r["cdf_us"], strict=True)
                name = _series_name(*_impl_net(r), rows)
                ax.plot(us, [p / 100 for p in pct], label=f"{name} {r['size_bytes']} B")
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


def _impl_net(row: dict[str, Any]) -> tuple[str, str | None]:
    return row["impl"], row.get("net")


def _by_size(
    rows: Rows, chosen: Rows, key: Callable[[dict[str, Any]], Any], *fields: str
) -> list[tuple[Any, ...]]:
    """(key, sizes, one column per field) for each series of ``rows`` (by ``key``, in the
    order they first appear there) that has ``chosen`` rows, which give the points by size."""
    out = []
    for k in dict.fromkeys(map(key, rows)):
        pts = sorted((r["size_bytes"], *(r[f] for f in fields)) for r in chosen if key(r) == k)
        if pts:
            out.append((k, *map(list, zip(*pts, strict=True))))
    return out


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

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return r["impl"], r.get("interval_ms"), r.get("batching")

    for (impl, interval, batching), xs, ys in _by_size(eff, eff, key, "efficiency_vs_host"):
        label = impl
        if interval is not None:
            label += f", {_interval_label(interval)}"
        if batching not in (None, "none"):
            label += f", {batching} batching"
        ax.plot(xs, ys, marker="o", label=label)
    ax.axhline(1.0, color="grey", lw=0.8)
    _size_axes(ax, f"efficiency ({what})", ylog=False)
    ax.set_title("virtualisation efficiency: netns bridge vs loopback")
    ax.legend(fontsize=6)
    return [save_figure(fig, out_dir / f"{bench}_efficiency.png")]


def plot_throughput(rows: Rows, out_dir: Path) -> list[Path]:
    """Samples/s and MB/s at the subscriber vs size, one line per implementation/batching."""
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return r["impl"], r.get("batching", "none"), r.get("net")

    measured = [r for r in rows if r.get("samples_per_s")]
    for (impl, batching, net), xs, per_s, mb in _by_size(
        rows, measured, key, "samples_per_s", "mb_per_s"
    ):
        name = _series_name(impl, net, rows)
        label = name if batching == "none" else f"{name}, {batching} batching"
        ax1.plot(xs, per_s, marker="o", label=label)
        ax2.plot(xs, mb, marker="o", label=label)
    _size_axes(ax1, "samples/s")
    _size_axes(ax2, "MB/s")
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
    _size_axes(ax1, "blocked writes", ylog=False)
    _size_axes(ax2, "longest write (ms)")
    ax1.legend(fontsize=7)
    ax1.set_title("writes that blocked (full send queue)")
    return [save_figure(fig, out_dir / "blocked_writes.png")]


def plot_load(rows: Rows, out_dir: Path) -> list[Path]:
    """p50 and p99 latency per load condition, MCC beside ddsperf; one panel per size."""
    plt = pyplot()
    loads = list(dict.fromkeys(r["load"] for r in rows))
    sizes = sorted({r["size_bytes"] for r in rows})
    series = list(dict.fromkeys(map(_impl_net, rows)))
    fig, axes = plt.subplots(1, len(sizes), figsize=(7 * len(sizes), 4), squeeze=False)
    width = 0.8 / max(1, 2 * len(series))
    # the first row of each implementation, network, load and size
    cell = {(r["impl"], r.get("net"), r["load"], r["size_bytes"]): r for r in reversed(rows)}
    for ax, size in zip(axes[0], sizes, strict=True):
        for i, (impl, net) in enumerate(series):
            for j, (field, hatch) in enumerate((("p50_us", ""), ("p99_us", "//"))):
                values = [cell.get((impl, net, load, size), {}).get(field) or 0 for load in loads]
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
