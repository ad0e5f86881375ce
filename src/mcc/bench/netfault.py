"""``mcc bench netfault``: bus latency between two emulated hosts under packet loss.

Two network namespaces on a lab bridge (`mcc.netlab`); a pong process in host ``b`` echoes
``PerfSample`` on ``PerfPong``, a ping process in host ``a`` writes one sample at a time on
``PerfPing`` and waits for its echo. Each row sets the same random loss on both hosts' outgoing
traffic (``loss_pct`` per direction: a round trip crosses the link twice) for the reliable and
the best-effort perf profiles. Round trips are timed with the ping process's monotonic clock and
reported as one-way latency (RTT/2); a best-effort ping without echo within ``--timeout-ms`` is
counted lost. The 0 % row of the same run is the anchor of the ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

from mcc.bench.report import add_bench_parser, document, print_table, record, write_json
from mcc.bench.stats import LatencyRecorder
from mcc.bus import Bus, Transport
from mcc.errors import MccError
from mcc.netlab import LAB_IFACE, NetLab, netns_available
from mcc.settings import current
from mcc.types import PerfSample

__all__ = ["add_parser", "run_netfault"]

PING, PONG = "PerfPing", "PerfPong"
COLUMNS = (
    "impl",
    "reliability",
    "loss_pct",
    "samples",
    "lost",
    "p50_us",
    "p99_us",
    "max_us",
    "p50_ratio",
    "p99_ratio",
)


@contextlib.contextmanager
def _endpoints(domain_id: int, tag: str, reliable: bool, role: str) -> Iterator[tuple[Any, Any]]:
    """The ``role`` process's writer and reader (ping: on ``PerfPing``, from ``PerfPong``)."""
    # a lost participant announcement is repeated after 1 s, not Cyclone's default 30 s
    spdp = "<Discovery><SPDPInterval>1s</SPDPInterval></Discovery>"
    transport = Transport(multicast=True, interface=LAB_IFACE, discovery_tag=tag, extra_xml=spdp)
    profile = "perf_reliable" if reliable else "perf_best_effort"
    out, back = (PING, PONG) if role == "ping" else (PONG, PING)
    with Bus(domain_id, transport=transport, name=f"netfault {role}", monitor_qos=False) as bus:
        writer = bus.writer(out, type=PerfSample, profile=profile, validate=False)
        yield writer, bus.reader(back, type=PerfSample, profile=profile)


def run_pong(domain_id: int, *, tag: str, reliable: bool, duration_s: float) -> int:
    """Echo ``PerfPing`` on ``PerfPong`` until a sample with seq 0 or ``duration_s``."""
    with _endpoints(domain_id, tag, reliable, "pong") as (writer, reader):
        print("ready", flush=True)
        deadline = time.monotonic() + duration_s
        while time.monotonic() < deadline:
            for sample in reader.take_wait(64, timeout_s=0.5):
                if sample.seq == 0:
                    return 0
                writer.write(sample)
    return 0


def run_ping(
    domain_id: int,
    *,
    tag: str,
    reliable: bool,
    duration_s: float,
    size_bytes: int,
    timeout_ms: float,
    warmup: int,
) -> dict[str, Any]:
    """Ping-pong for ``duration_s``; the histogram (encoded) and the count of lost pings."""
    recorder = LatencyRecorder()
    lost = 0
    payload = b"\x5a" * size_bytes
    with _endpoints(domain_id, tag, reliable, "ping") as (writer, reader):
        if not (
            writer.wait_for_readers(1, timeout_s=30) and reader.wait_for_writers(1, timeout_s=30)
        ):
            raise MccError("netfault: the pong host did not appear on the bus within 30 s")
        # reliable: a sample is never lost, only late; wait for it as long as the run lasts
        wait_s = duration_s + 10.0 if reliable else timeout_ms / 1000.0
        end = time.monotonic() + duration_s
        seq = 0
        while time.monotonic() < end:
            seq += 1
            sent = time.monotonic_ns()
            writer.write(PerfSample(writer_id="ping", seq=seq, send_ns=sent, payload=payload))
            deadline = time.monotonic() + wait_s
            echoed = False
            while not echoed and time.monotonic() < deadline:
                remaining = max(0.0, deadline - time.monotonic())
                for sample in reader.take_wait(16, timeout_s=min(remaining, 0.5)):
                    if sample.seq == seq:
                        echoed = True
            if not echoed:
                lost += 1
            elif seq > warmup:
                recorder.record_ns((time.monotonic_ns() - sent) // 2)
        writer.write(PerfSample(writer_id="ping", seq=0, send_ns=0, payload=b""))
    return {"hist": recorder.encode(), "lost": lost}


def run_netfault(
    *,
    losses_pct: list[float],
    duration_s: float,
    size_bytes: int = 64,
    timeout_ms: float = 200.0,
    domain_id: int = 0,
) -> list[dict[str, Any]]:
    """One row per (reliability, loss); ratios against the 0 % row of the same reliability."""
    reason = netns_available()
    if reason is not None:
        raise MccError(f"mcc bench netfault needs network namespaces: {reason}")
    rows: list[dict[str, Any]] = []
    with NetLab(["a", "b"], name="netfault") as lab:
        for reliable in (True, False):
            for loss in losses_pct:
                lab.netem("a", loss_pct=loss)
                lab.netem("b", loss_pct=loss)
                tag = f"netfault-{os.getpid()}-{int(reliable)}-{loss:g}"
                rows.append(
                    _row(lab, tag, reliable, loss, duration_s, size_bytes, timeout_ms, domain_id)
                )
        for name in ("a", "b"):
            lab.heal(name)
    for row in rows:
        same = (r for r in rows if r["reliability"] == row["reliability"] and r["loss_pct"] == 0)
        anchor = next(same, {})
        for key in ("p50", "p99"):
            base, value = anchor.get(f"{key}_us"), row[f"{key}_us"]
            row[f"{key}_ratio"] = round(value / base, 2) if base and value is not None else None
    return rows


def _row(
    lab: NetLab,
    tag: str,
    reliable: bool,
    loss: float,
    duration_s: float,
    size_bytes: int,
    timeout_ms: float,
    domain_id: int,
) -> dict[str, Any]:
    base = [sys.executable, "-m", "mcc.bench.netfault"]
    common = ["--domain", str(domain_id), "--tag", tag, *([] if reliable else ["--best-effort"])]
    pong = lab.popen(
        "b",
        [*base, "pong", *common, "--duration", str(duration_s + 60)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert pong.stdout is not None and pong.stderr is not None
        if pong.stdout.readline().strip() != "ready":
            raise MccError(f"netfault: the pong process did not start: {pong.stderr.read()}")
        options = {"--duration": duration_s, "--size": size_bytes, "--timeout-ms": timeout_ms}
        ping = subprocess.run(
            lab.exec_argv("a", [*base, "ping", *common, *(f"{k}={v}" for k, v in options.items())]),
            capture_output=True,
            text=True,
            timeout=duration_s + 120,
            check=False,
        )
        if ping.returncode != 0:
            raise MccError(f"netfault: the ping process failed:\n{ping.stderr[-2000:]}")
        raw = json.loads(ping.stdout.strip().splitlines()[-1])
    finally:
        try:
            pong.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pong.kill()
            pong.wait()
        pong.communicate()
    recorder = LatencyRecorder.decode(raw["hist"])
    if recorder.count == 0:  # not one echo after the warm-up: report the row, not a figure
        row: dict[str, Any] = {"count": 0, "p50_us": None, "p99_us": None, "max_us": None}
    else:
        row = dict(recorder.stats(lost=int(raw["lost"])).as_row())
    return {
        "impl": "mcc",
        "reliability": "reliable" if reliable else "best_effort",
        "loss_pct": loss,
        "size_bytes": size_bytes,
        "duration_s": duration_s,
        "samples": row["count"],
        "lost": int(raw["lost"]),
        **{k: v for k, v in row.items() if k.endswith("_us")},
    }


def add_parser(bsub: Any) -> None:
    """Register ``mcc bench netfault`` on the bench sub-parser set."""
    parser = add_bench_parser(
        bsub,
        "netfault",
        help="latency between two netns hosts at 0, 1 and 10 %% packet loss",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
        func=_cmd,
    )
    parser.add_argument("--quick", action="store_true", help="3 s per row (smoke check)")
    parser.add_argument("--loss", default="0,1,10", help="loss percentages (default %(default)s)")
    parser.add_argument("--duration", type=float, help="seconds per row (default 10, quick 3)")
    parser.add_argument("--size", type=int, default=64, help="payload bytes (default 64)")
    parser.add_argument(
        "--timeout-ms", type=float, default=200.0, help="best effort: a ping is lost after this"
    )
    parser.add_argument("--domain", type=int, default=current().domain)


def _cmd(args: argparse.Namespace) -> int:
    try:
        losses = [float(x) for x in args.loss.split(",") if x.strip()]
    except ValueError:
        raise MccError(f"--loss {args.loss!r}: give percentages, e.g. 0,1,10") from None
    if not losses or any(not 0 <= x <= 100 for x in losses):
        raise MccError(f"--loss {args.loss!r}: percentages must lie in 0..100")
    duration = args.duration or (3.0 if args.quick else 10.0)
    rows = run_netfault(
        losses_pct=losses,
        duration_s=duration,
        size_bytes=args.size,
        timeout_ms=args.timeout_ms,
        domain_id=args.domain,
    )
    print_table("bus latency between two netns hosts under loss (one-way, RTT/2)", rows, COLUMNS)
    doc = document("netfault", rows, command="mcc bench netfault " + " ".join(sys.argv[3:]))
    if args.json:
        write_json(doc, args.json)
    if args.record:
        record(doc, COLUMNS, notes="Loss per direction on both hosts (nftables/netem egress).")
    return 0


def main(argv: list[str] | None = None) -> int:
    """The ping and pong child processes: ``python -m mcc.bench.netfault ping|pong ...``."""
    parser = argparse.ArgumentParser(prog="mcc.bench.netfault")
    parser.add_argument("role", choices=("ping", "pong"))
    parser.add_argument("--domain", type=int, required=True)
    parser.add_argument("--tag", required=True)
    parser.add_argument("--best-effort", action="store_true")
    parser.add_argument("--duration", type=float, required=True)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--timeout-ms", type=float, default=200.0)
    parser.add_argument("--warmup", type=int, default=5)
    opts = parser.parse_args(argv)
    reliable = not opts.best_effort
    if opts.role == "pong":
        return run_pong(opts.domain, tag=opts.tag, reliable=reliable, duration_s=opts.duration)
    result = run_ping(
        opts.domain,
        tag=opts.tag,
        reliable=reliable,
        duration_s=opts.duration,
        size_bytes=opts.size,
        timeout_ms=opts.timeout_ms,
        warmup=opts.warmup,
    )
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
