"""``mcc bench compute``: every kernel run locally and on the compute service, same device.

Method
------
For each device (the CPU, and every GPU CuPy sees) one compute service runs as a separate
process (``mcc compute serve``); this process holds a local executor (``open_compute(device)``)
and a client (``open_compute("remote:…")``) side by side. For each kernel of the registry and
each of its sizes (`KernelSpec.bench_sizes`, ``--quick``: `KernelSpec.quick_sizes`) the inputs
come from the kernel's seeded example generator; one untimed call each warms up (first-touch
allocation, CuPy compilation), then local and remote calls alternate ``--reps`` times, so load
on this shared machine hits both alike. Both sides start from host arrays and end with host
arrays, so a GPU's host↔device copies count on both.

* ``ms``: median wall time of a call as the caller sees it (checks included).
* ``compute_ms``: median time of the kernel itself; for a remote row, as the service measured
  it (``ComputeReply.compute_ms``).
* ``overhead_ratio`` (remote rows): median remote ``ms`` / median local ``ms`` − 1: what the
  remote API costs, like the papers' rCUDA figures (+7 % for most Rodinia programs, +128 % for
  the copy-bound Needleman–Wunsch).
* ``api_overhead_ratio`` (remote rows): median over calls of (remote ``ms`` − ``compute_ms``)
  / median local ``ms``: the same overhead without the difference between the kernel's speed in
  the two processes. On a machine shared with other work the two processes do not get the same
  CPU time, and ``overhead_ratio`` carries that noise; on an idle machine the two agree.
* ``copy_share`` (remote rows): median over calls of (remote ``ms`` − ``compute_ms``) /
  remote ``ms``: the share of the remote call spent getting the data there and back —
  serialising, the wire, deserialising — plus the fixed cost of a call (two bus hops; the
  caller takes its reply itself and an idle service takes the request in the thread that runs
  it, so no thread hands a call to another; ~0.4 ms on the 2-core VM, see the small call).
* ``overhead_ms``/``overhead_p90_ms`` (remote rows): median and 90th percentile over calls of
  remote ``ms`` − ``compute_ms``: what a remote call adds to its kernel, in milliseconds.
* ``request_mb``/``reply_mb``: array data each way.

The small call: for each device, the kernel and size with the shortest local call of the run is
called `SMALL_CALL_REPS` more times, local and remote alternating, and its remote overhead
(``overhead_ms`` p50, beside the local kernel call as the anchor) is checked against
`TARGET_SMALL_OVERHEAD_MS`: the fixed cost of one remote call on one host.

Every remote result is compared with the local one (bit-identical on the same device, else
within the kernel's tolerance); a mismatch makes the row an error and the bench exit 1. The
target: ``overhead_ratio`` ≤ 0.10 for the compute-bound kernels (``bound`` = compute) at their
largest size; the notes say which met it.

Transport: ``--transport bulk`` (default) runs both processes on loopback with 64 KB UDP
messages (`BULK_EXTRA_XML`): Cyclone's defaults (14.7 KB messages, 1.3 KB fragments) moved
65 MB/s of 4 MB samples here, these settings 350–460 MB/s. ``--transport default`` measures
the defaults. ``--transport shm`` is ``bulk`` on the shared-memory transport (iceoryx; the
bench starts RouDi when none runs): arrays of `mcc.compute.channel.BULK_MIN_BYTES` or more
cross as loans of shared memory (`mcc.bus.bulk`), the requests and replies that name them
over UDP.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import selectors
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mcc.bench import report, runner
from mcc.bench.anchor_tools import reap
from mcc.bus import Transport
from mcc.bus.bulk import BLOCK_CDR_BYTES
from mcc.bus.transport import ScratchDomains
from mcc.compute import KERNELS, Kernels, open_compute
from mcc.compute.backend import available_devices, device_kind
from mcc.compute.registry import CallTiming, KernelSpec
from mcc.errors import MccError
from mcc.settings import child_env, environ

__all__ = [
    "BULK_EXTRA_XML",
    "COLUMNS",
    "add_parser",
    "bulk_transport",
    "cmd_compute",
    "plot_compute",
    "run_compute_bench",
]

COLUMNS = (
    "impl",
    "device",
    "kernel",
    "size",
    "unit",
    "bound",
    "ms",
    "compute_ms",
    "overhead_ms",
    "overhead_p90_ms",
    "overhead_ratio",
    "api_overhead_ratio",
    "copy_share",
    "request_mb",
    "reply_mb",
)
TARGET_OVERHEAD = 0.10
#: ``--transport`` choices.
TRANSPORTS = ("bulk", "default", "shm")
#: Target for the small call: remote minus kernel time, median, ms (one host).
TARGET_SMALL_OVERHEAD_MS = 0.5
#: Calls of the small call (local and remote each) for its overhead's median and p90.
SMALL_CALL_REPS = 300
DEFAULT_REPS = 7
QUICK_REPS = 3
SEED = 2024

#: Cyclone settings for bulk arrays on one host: 64 KB UDP datagrams (loopback MTU is 64 KB)
#: that hold a whole bulk block (`mcc.bus.bulk.BLOCK_CDR_BYTES`),
#: a writer history cache that lets tens of MB be in flight before acknowledgements, and
#: socket buffers up to 4 MB (net.core.rmem_max here; less where the kernel allows less).
BULK_EXTRA_XML = (
    "<General><MaxMessageSize>65500B</MaxMessageSize>"
    f"<FragmentSize>{BLOCK_CDR_BYTES}B</FragmentSize>"
    "</General><Internal><Watermarks><WhcHigh>32MB</WhcHigh></Watermarks>"
    '<SocketReceiveBufferSize max="4MB"/><SocketSendBufferSize max="4MB"/></Internal>'
)


def bulk_transport(tag: str) -> Transport:
    """Loopback unicast (`Transport.loopback`) with `BULK_EXTRA_XML`."""
    return dataclasses.replace(Transport.loopback(tag), extra_xml=BULK_EXTRA_XML)


@contextlib.contextmanager
def _service(device: str, name: str, env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """``mcc compute serve`` (its light entry) in its own process until the block ends."""
    with tempfile.TemporaryFile("w+") as errors:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mcc.compute.remote", "serve", "--name", name]
            + ["--device", device],
            env=env,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
        try:
            assert proc.stdout is not None
            with selectors.DefaultSelector() as sel:
                sel.register(proc.stdout, selectors.EVENT_READ)
                ready = sel.select(120.0)
            line = proc.stdout.readline() if ready else ""
            if "serving" not in line:
                proc.kill()
                proc.wait(10)
                errors.seek(0)
                raise MccError(
                    f"the compute service on {device} did not start: {line!r} {errors.read()}"
                )
            yield proc
        finally:
            if proc.poll() is None:
                proc.terminate()
                reap(proc, 30, kill_wait_s=10)
            if proc.stdout is not None:
                proc.stdout.close()


def _same(spec: KernelSpec, got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> str | None:
    """None when the remote results match the local ones, else what differs."""
    tol = spec.tolerance
    for field, g, w in zip(spec.results, got, want, strict=True):
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"{field}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        if w.dtype.kind == "f":
            if not np.allclose(g, w, rtol=tol.rtol, atol=tol.atol, equal_nan=True):
                return f"{field}: differs beyond rtol={tol.rtol}, atol={tol.atol}"
        elif not np.array_equal(g, w):
            return f"{field}: differs"
    return None


def _measure(
    spec: KernelSpec, size: int, local: Kernels, remote: Kernels, reps: int, device: str
) -> list[dict[str, Any]]:
    ex = spec.example(size, np.random.default_rng(SEED))
    want = local.call(spec.name, *ex.arrays, **ex.params)
    got = remote.call(spec.name, *ex.arrays, **ex.params)  # both warmed up
    base = {
        "device": device_kind(device),
        "kernel": spec.name,
        "size": size,
        "unit": spec.size_unit,
        "bound": spec.bound,
        "request_mb": round(sum(a.nbytes for a in ex.arrays) / 1e6, 3),
        "reply_mb": round(sum(np.asarray(r).nbytes for r in want) / 1e6, 3),
        "reps": reps,
    }
    mismatch = _same(spec, got, want)
    if mismatch is not None:
        error = f"remote result differs from local: {mismatch}"
        return [{"impl": impl, **base, "error": error} for impl in ("local", "remote")]
    local_ms: list[float] = []
    remote_timings: list[CallTiming] = []
    for _ in range(reps):
        local.call(spec.name, *ex.arrays, **ex.params)
        assert local.last_timing is not None
        local_ms.append(local.last_timing.total_ms)
        remote.call(spec.name, *ex.arrays, **ex.params)
        assert remote.last_timing is not None
        remote_timings.append(remote.last_timing)
    outside = [t.overhead_ms for t in remote_timings]
    med_local = statistics.median(local_ms)
    med_remote = statistics.median(t.total_ms for t in remote_timings)
    remote_only = ("overhead_ms", "overhead_p90_ms", "overhead_ratio", "api_overhead_ratio")
    return [
        {
            "impl": "local",
            **base,
            "ms": round(med_local, 3),
            "compute_ms": round(med_local, 3),
            **dict.fromkeys((*remote_only, "copy_share")),
        },
        {
            "impl": "remote",
            **base,
            "ms": round(med_remote, 3),
            "compute_ms": round(statistics.median(t.compute_ms for t in remote_timings), 3),
            "overhead_ms": round(statistics.median(outside), 3),
            "overhead_p90_ms": round(float(np.percentile(outside, 90)), 3),
            "overhead_ratio": round(med_remote / med_local - 1.0, 3),
            "api_overhead_ratio": round(statistics.median(outside) / med_local, 3),
            "copy_share": round(
                statistics.median(t.overhead_ms / t.total_ms for t in remote_timings), 3
            ),
        },
    ]


def _small_call(
    rows: Sequence[dict[str, Any]], local: Kernels, remote: Kernels, device: str
) -> dict[str, Any] | None:
    """The shortest local call of ``rows`` measured again `SMALL_CALL_REPS` times: its remote
    overhead (p50, p90) beside the local kernel call."""
    ok = [r for r in rows if r["impl"] == "local" and not r.get("error")]
    if not ok:
        return None
    best = min(ok, key=lambda r: r["ms"])
    spec = KERNELS[best["kernel"]]
    return _measure(spec, best["size"], local, remote, SMALL_CALL_REPS, device)[1]  # remote row


def run_compute_bench(
    *,
    kernels: Sequence[str],
    quick: bool = False,
    reps: int | None = None,
    sizes: Sequence[int] | None = None,
    devices: Sequence[str] | None = None,
    transport: str = "bulk",
    small_calls: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Rows of local and remote timings for each device, kernel and size (see the module doc);
    with ``small_calls``, each device's small call (`_small_call`) is appended to it."""
    unknown = sorted(set(kernels) - set(KERNELS))
    if unknown:
        raise MccError(f"--kernels: unknown {unknown}; registered: {', '.join(KERNELS)}")
    if transport not in TRANSPORTS:
        raise MccError(f"--transport {transport!r}: use one of {', '.join(TRANSPORTS)}")
    if reps is None:
        reps = QUICK_REPS if quick else DEFAULT_REPS
    if reps < 1:
        raise MccError(f"--reps {reps}: give at least 1 repetition")
    tag = f"bench-compute-{os.getpid()}"
    net = bulk_transport(tag) if transport != "default" else Transport.loopback(tag)
    if transport == "shm":
        net = dataclasses.replace(net, kind="shm")
    overrides = net.apply_to_env({})
    rows: list[dict[str, Any]] = []
    domains = ScratchDomains()
    with contextlib.ExitStack() as stack:
        if transport == "shm":  # a RouDi unless one runs, stopped after the bench if started
            from mcc.bus.shm import RouDi

            if (roudi := RouDi.ensure()) is not None:
                stack.callback(roudi.stop)
        for i, device in enumerate(devices or available_devices()):
            device_kind(device)
            domain = next(domains)
            name = f"bench-{os.getpid()}-{i}"
            env = child_env({**environ(), **overrides}, domain=domain)
            with (
                _service(device, name, env),
                open_compute(device) as local,
                open_compute(
                    f"remote:{name}", domain_id=domain, transport=net, timeout_s=600.0
                ) as remote,
            ):
                for kernel in kernels:
                    spec = KERNELS[kernel]
                    for size in sizes or (spec.quick_sizes if quick else spec.bench_sizes):
                        new = _measure(spec, size, local, remote, reps, device)
                        rows.extend(new)
                        print(_progress(new[-1]), flush=True)
                if small_calls is not None:
                    mine = [r for r in rows if r["device"] == device_kind(device)]
                    small = _small_call(mine, local, remote, device)
                    if small is not None:
                        small_calls.append(small)
                        print(f"{_progress(small)} (small call, {small['reps']} calls)", flush=True)
    return rows


def _progress(row: dict[str, Any]) -> str:
    head = f"  {row['device']} {row['kernel']} {row['size']}"
    if row.get("error"):
        return f"{head}: {row['error']}"
    return (
        f"{head}: remote {row['ms']:.2f} ms, overhead {100 * row['overhead_ratio']:+.0f}%, "
        f"copy share {100 * row['copy_share']:.0f}%"
    )


def small_call_note(small: dict[str, Any]) -> str:
    """The small call's overhead against `TARGET_SMALL_OVERHEAD_MS`, beside its local call."""
    if small.get("error"):
        return f"{small['device']}: small call {small['kernel']} {small['size']}: {small['error']}."
    local_ms = small["ms"] / (1.0 + small["overhead_ratio"])
    met = "met" if small["overhead_ms"] <= TARGET_SMALL_OVERHEAD_MS else "MISSED"
    return (
        f"{small['device']}: remote overhead p50 for the small call ({small['kernel']} "
        f"{small['size']}, {small['reps']} calls): {small['overhead_ms']:.3f} ms (p90 "
        f"{small['overhead_p90_ms']:.3f} ms) vs target {TARGET_SMALL_OVERHEAD_MS} ms ({met}); "
        f"anchor: the local kernel call {local_ms:.3f} ms, remote p50 {small['ms']:.3f} ms = "
        f"{small['ms'] / local_ms:.2f}x local, overhead = {small['overhead_ms'] / local_ms:.2f}x "
        "the local call."
    )


def notes(
    rows: Sequence[dict[str, Any]],
    *,
    load: str = "",
    small_calls: Sequence[dict[str, Any]] = (),
) -> str:
    """The target checks, in words: compute-bound kernels at their largest size, the
    copy-bound ones, and the small call of each device."""
    remote = [r for r in rows if r["impl"] == "remote" and not r.get("error")]
    lines = []
    for device in sorted({r["device"] for r in remote}):
        mine = [r for r in remote if r["device"] == device]
        largest = {
            r["kernel"]: r for r in sorted(mine, key=lambda r: r["size"]) if r["bound"] == "compute"
        }
        checks = ", ".join(
            f"{k} {r['size']}: {100 * r['overhead_ratio']:+.1f}% end to end, "
            f"{100 * r['api_overhead_ratio']:+.1f}% outside the kernel "
            f"({'met' if r['overhead_ratio'] <= TARGET_OVERHEAD else 'MISSED'})"
            for k, r in largest.items()
        )
        if checks:
            lines.append(
                f"{device}: target overhead ≤ {TARGET_OVERHEAD:.0%} for compute-bound kernels at "
                f"their largest size — {checks}."
            )
        copy = [r for r in mine if r["bound"] == "copy"]
        if copy:
            worst = max(copy, key=lambda r: r["api_overhead_ratio"])
            lines.append(
                f"{device}: copy-bound kernels pay for moving their arrays: up to "
                f"{100 * worst['api_overhead_ratio']:+.0f}% outside the kernel "
                f"({worst['kernel']} {worst['size']}, {worst['request_mb']} MB in, "
                f"{worst['reply_mb']} MB out, {100 * worst['copy_share']:.0f}% of the remote "
                "time)."
            )
    lines.extend(small_call_note(small) for small in small_calls)
    if load:
        lines.append(load)
    return " ".join(lines)


def _load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def plot_compute(rows: Sequence[dict[str, Any]], out_dir: Path) -> list[Path]:
    """One PNG per device: local vs remote time (remote split into kernel and the rest) and
    the overhead per kernel and size, with the 10 % target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    ok = [r for r in rows if not r.get("error")]
    for device in sorted({r["device"] for r in ok}):
        mine = [r for r in ok if r["device"] == device]
        remote = [r for r in mine if r["impl"] == "remote"]
        local = {(r["kernel"], r["size"]): r["ms"] for r in mine if r["impl"] == "local"}
        labels = [f"{r['kernel']} {r['size']}" for r in remote]
        x = np.arange(len(remote))
        fig, (ax_t, ax_o) = plt.subplots(2, 1, figsize=(max(8.0, 0.6 * len(remote)), 8))
        local_ms = [local[(r["kernel"], r["size"])] for r in remote]
        kernel_ms = [r["compute_ms"] for r in remote]
        rest_ms = [max(r["ms"] - r["compute_ms"], 0.0) for r in remote]
        ax_t.bar(x - 0.2, local_ms, 0.4, label="local", color="tab:gray")
        ax_t.bar(x + 0.2, kernel_ms, 0.4, label="remote: kernel", color="tab:blue")
        ax_t.bar(
            x + 0.2, rest_ms, 0.4, bottom=kernel_ms, label="remote: data + call", color="tab:orange"
        )
        ax_t.set_yscale("log")
        ax_t.set_ylabel("ms per call (median)")
        ax_t.set_title(f"compute kernels on the {device}: local vs remote (same device)")
        colours = ["tab:green" if r["bound"] == "compute" else "tab:red" for r in remote]
        ax_o.bar(x, [100 * r["overhead_ratio"] for r in remote], color=colours)
        ax_o.scatter(
            x,
            [100 * r["api_overhead_ratio"] for r in remote],
            marker="_",
            s=200,
            color="black",
            label="outside the kernel",
        )
        ax_o.axhline(100 * TARGET_OVERHEAD, color="black", linestyle="--", linewidth=1)
        ax_o.set_yscale("symlog", linthresh=10)
        ax_o.set_ylabel("remote overhead, % (green: compute-bound)")
        for ax in (ax_t, ax_o):
            ax.set_xticks(x, labels, fontsize=7, rotation=60, ha="right")
            ax.legend(fontsize=8)
        fig.tight_layout()
        path = out_dir / f"compute_{device}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def add_parser(bench_subparsers: Any) -> None:
    parser = report.add_bench_parser(
        bench_subparsers,
        "compute",
        help="kernels local vs on the compute service (remote API overhead)",
        description="Each registered kernel at a few sizes, locally and through the compute "
        "service in another process on the same device: median times, overhead, and the share "
        "of the remote time spent moving data.",
        func=cmd_compute,
        plot=True,
    )
    parser.add_argument("--quick", action="store_true", help="one size per kernel, 3 reps")
    parser.add_argument("--kernels", help=f"comma-separated (default all: {','.join(KERNELS)})")
    parser.add_argument("--sizes", help="comma-separated sizes for every kernel chosen")
    parser.add_argument("--reps", type=int, help="timed calls per row (default 7, quick 3)")
    parser.add_argument("--devices", help="comma-separated: cpu, cuda:N (default: all found)")
    parser.add_argument(
        "--transport",
        default="bulk",
        choices=TRANSPORTS,
        help="Cyclone settings: bulk = 64 KB messages on loopback (default), default = "
        "Cyclone's, shm = bulk with large arrays in iceoryx shared memory",
    )
    runner.add_load_option(parser)


def _command(args: argparse.Namespace) -> str:
    """The command line that reproduces this run."""
    parts = ["mcc bench compute", "--quick" if args.quick else ""]
    for flag in ("kernels", "sizes", "reps", "devices", "json", "plot"):
        if getattr(args, flag) is not None:
            parts.append(f"--{flag} {getattr(args, flag)}")
    if args.transport != "bulk":
        parts.append(f"--transport {args.transport}")
    parts += [f"--{flag}" for flag in ("load", "record") if getattr(args, flag)]
    return " ".join(part for part in parts if part)


def cmd_compute(args: argparse.Namespace) -> int:
    kernels = args.kernels.split(",") if args.kernels else list(KERNELS)
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else None
    devices = args.devices.split(",") if args.devices else None
    load_before = _load_average()
    small_calls: list[dict[str, Any]] = []
    with runner.beside_load(args) as loaded:  # --load: beside mcc bench load's CPU load
        rows = loaded(
            run_compute_bench(
                kernels=kernels,
                quick=args.quick,
                reps=args.reps,
                sizes=sizes,
                devices=devices,
                transport=args.transport,
                small_calls=small_calls,
            )
        )
    doc = report.document("compute", rows, command=_command(args))
    doc["small_calls"] = small_calls
    report.print_table("compute kernels: local vs remote (same device)", rows, COLUMNS)
    load = (
        f"Load average (1, 5, 15 min) before / after the run: {load_before} / "
        f"{_load_average()} on {os.cpu_count()} cores."
    )
    text = notes(rows, load=load, small_calls=small_calls)
    if text:
        print(text)
    if args.json:
        print(f"wrote {report.write_json(doc, args.json)}")
    if args.plot:
        for path in plot_compute(rows, Path(args.plot)):
            print(f"wrote {path}")
    if args.record:
        report.record(doc, COLUMNS, notes=text)
    return 1 if any(r.get("error") for r in rows) else 0
