"""``mcc bench asterix``: how fast a radar gateway decodes CAT048 target reports, on one core.

Method
------
**Data.** A busy radar's stream, drawn once from ``--seed``: 2 000 distinct CAT048 reports
(written by libasterix), half secondary-radar plots (I048/010, 140, 020, 040, 070 Mode 3/A, 090
flight level, 130 PAM, 220 Mode S address, 230) and half primary plots of a 3-D radar (010, 140,
020 with the IFF extent, 040, 110 height, 120 Doppler, 130), packed into data blocks of at
most 1 400 octets, one block per datagram, with a CAT034 north marker every 500 reports; the
datagrams are repeated up to ``--reports``.

**Implementations**, each timed over the whole stream, rounds alternating (``--rounds``), the
process pinned to one core (``sched_setaffinity``); ``reports_per_s`` is the median over the
rounds:

* ``mcc`` / ``decode``: `mcc.asterix.stream.RadarStream.decode` on every datagram: framing,
  each record walked on libasterix's compiled layout, the plot's fields read (position, time,
  height, Mode 3/A, Mode S, IFF, Doppler, amplitude), everything counted: what the gateway does.
* ``mcc`` / ``gateway``: `mcc.asterix.gateway.RadarGateway.datagram`, the above plus the checks
  (source, range, time), scan assembly and a ``DetectionBatch`` per scan (not written to a bus).
* ``libasterix`` / ``parse``: libasterix 0.36's own parser, ``RawDatablock.parse`` and the
  edition's ``cv_uap.parse`` on each datagram, no field read: the floor of a gateway built on
  its object API. Run with the garbage collector's view of libasterix's classes frozen
  (``gc.freeze``, as MCC runs): without it every full collection walks them and the parser is
  about 3x slower.
* ``asterix-decoder`` / ``parse`` (when installed, ``--oracle DIR``; the test suite installs it
  in ``.venv``): CroatiaControl's C++ decoder, GPL, run in its own process pinned to the same
  core, ``asterix.parse`` on each datagram, its records as Python dicts. An anchor only: MCC
  never depends on it.

The target: the gateway decodes at least `TARGET_REPORTS_PER_S` reports per second.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mcc.bench import report
from mcc.errors import MccError
from mcc.settings import child_env

BENCH = "asterix"
COLUMNS = ("impl", "what", "reports", "rounds", "reports_per_s", "us_per_report", "vs_libasterix")
TARGET_REPORTS_PER_S = 20_000
DISTINCT = 2_000
NORTH_EVERY = 500
ORACLE_VERSION = "0.7.11"

_ORACLE_SCRIPT = r"""
import json, os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
import asterix
data = sys.stdin.buffer.read()
datagrams, pos = [], 0
while pos < len(data):
    n = int.from_bytes(data[pos:pos + 4], "big")
    datagrams.append(data[pos + 4:pos + 4 + n])
    pos += 4 + n
rates = []
for _ in range(int(sys.argv[2])):
    start = time.perf_counter()
    records = 0
    for d in datagrams:
        records += sum(1 for r in asterix.parse(d, verbose=False) if r.get("category") == 48)
    rates.append(records / (time.perf_counter() - start))
print(json.dumps({"records": records, "rates": rates}))
"""


def add_parser(bench_subparsers: Any) -> None:
    parser = report.add_bench_parser(
        bench_subparsers,
        BENCH,
        help="ASTERIX: CAT048 reports decoded per second on one core, against libasterix",
        description="CAT048 target reports decoded per second on one core by MCC's gateway "
        "path, against libasterix's own parser and (when installed) the asterix-decoder C++ "
        "decoder, same stream, same run, medians of alternating rounds.",
        func=cmd_bench,
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run, well under a minute")
    parser.add_argument("--reports", type=int, help="reports per round (default 40 000)")
    parser.add_argument("--rounds", type=int, help="rounds per implementation (default 7)")
    parser.add_argument("--seed", type=int, default=48)
    parser.add_argument(
        "--oracle",
        metavar="DIR",
        help="folder holding asterix-decoder (pip install --target DIR asterix-decoder); "
        f"default .venv/asterix-oracle-{ORACLE_VERSION} when it exists",
    )
    parser.add_argument("--core", type=int, help="the core to pin to (default: the last)")


def default_oracle() -> Path | None:
    """The folder the test suite installs asterix-decoder into, when it is there."""
    from mcc.resources import checkout_root

    root = checkout_root()
    if root is None:
        return None
    path = root / ".venv" / f"asterix-oracle-{ORACLE_VERSION}"
    return path if (path / "asterix" / "__init__.py").exists() else None


def cmd_bench(args: argparse.Namespace) -> int:
    reports = args.reports or (8_000 if args.quick else 40_000)
    rounds = args.rounds or (3 if args.quick else 7)
    if reports < 1 or rounds < 1:
        raise MccError(f"--reports and --rounds must be >= 1 (got {reports}, {rounds})")
    oracle = Path(args.oracle) if args.oracle else default_oracle()
    if oracle is not None and not (oracle / "asterix" / "__init__.py").exists():
        raise MccError(f"--oracle {oracle}: no asterix-decoder there (pip install --target)")
    rows = run(reports=reports, rounds=rounds, seed=args.seed, oracle=oracle, core=args.core)
    command = f"mcc bench asterix --reports {reports} --rounds {rounds}" + (
        " --quick" if args.quick else ""
    )
    doc = report.document(BENCH, rows, command=command)
    report.print_table("CAT048 decoding, one core", rows, COLUMNS)
    mcc = next(r for r in rows if r["impl"] == "mcc" and r["what"] == "gateway")
    verdict = "meets" if mcc["reports_per_s"] >= TARGET_REPORTS_PER_S else "MISSES"
    print(
        f"gateway: {mcc['reports_per_s']:.0f} reports/s, {verdict} the target of "
        f"{TARGET_REPORTS_PER_S} reports/s"
    )
    if args.json:
        report.write_json(doc, args.json)
    if args.record:
        report.record(
            doc,
            COLUMNS,
            notes=f"Medians of {rounds} alternating rounds, one core; target: the gateway at "
            f">= {TARGET_REPORTS_PER_S} reports/s. Method: `mcc.bench.asterix`.",
        )
    return 0


def stream(seed: int, reports: int) -> tuple[list[bytes], int]:
    """The bench's datagrams (`Method`) and the CAT048 reports they hold."""
    import numpy as np

    from mcc.asterix.blocks import pack_records
    from mcc.asterix.cat034 import NORTH, encode_marker
    from mcc.asterix.editions import spec

    rng = np.random.default_rng(seed)
    cat = spec(48)
    record = cat.cv_record
    lay_records = []
    for k in range(DISTINCT):
        tod = int(36_000 * 128 + k * 4)
        rho, theta = int(rng.integers(100, 60_000)), int(rng.integers(0, 65_536))
        items: dict[str, Any] = {"010": (("SAC", 0), ("SIC", 1)), "140": tod}
        if k % 2:
            items["020"] = ((("TYP", 5), 0, 0, 0, 0, 0),)
            items["040"] = (("RHO", rho), ("THETA", theta))
            items["070"] = (0, 0, 0, 0, ("MODE3A", int(rng.integers(0, 4096))))
            items["090"] = (0, 0, ("FL", int(rng.integers(0, 1600))))
            items["130"] = {"SRL": 20, "SRR": 5, "SAM": 0xC0}
            items["220"] = int(rng.integers(0, 1 << 24))
            items["230"] = (("COM", 1), ("STAT", 0), ("SI", 0), 0, ("MSSC", 1), ("ARC", 1),
                            ("AIC", 1), ("B1A", 0), ("B1B", 0))  # fmt: skip
        else:
            items["020"] = ((("TYP", 1), 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, ("FOEFRI", 3), 0))
            items["040"] = (("RHO", rho), ("THETA", theta))
            items["110"] = (0, ("3DH", int(rng.integers(0, 4000))))
            items["120"] = {"CAL": (("D", 0), 0, ("CAL", int(rng.integers(0, 512))))}
            items["130"] = {"PRL": 20, "PAM": 30}
        lay_records.append(record.create(items))
    sizes = [len(r.unparse()) // 8 for r in lay_records]
    per_block = [  # the data blocks between two north markers
        pack_records(cat, lay_records[i : i + NORTH_EVERY], sizes[i : i + NORTH_EVERY], 1400)
        for i in range(0, DISTINCT, NORTH_EVERY)
    ]
    datagrams: list[bytes] = []
    count = 0
    marker_tod = 36_000 * 128
    while count < reports:
        for blocks in per_block:
            datagrams.extend(blocks)
            count += NORTH_EVERY
            marker_tod += 4 * NORTH_EVERY
            datagrams.append(encode_marker(sac=0, sic=1, tod_units=marker_tod, kind=NORTH))
            if count >= reports:
                break
    return datagrams, count


def run(
    *, reports: int, rounds: int, seed: int, oracle: Path | None, core: int | None = None
) -> list[dict[str, Any]]:
    """Measure; rows in the benches' JSON shape (docs/benchmarks.md)."""
    from asterix.base import Bits, RawDatablock

    from mcc.asterix.editions import libasterix, spec
    from mcc.asterix.gateway import GatewaySettings, RadarGateway
    from mcc.asterix.stream import RadarStream

    libasterix()  # imported (and frozen) before timing
    core = core if core is not None else max(os.sched_getaffinity(0))
    saved = os.sched_getaffinity(0)
    datagrams, n = stream(seed, reports)
    cat48 = spec(48)
    cat34 = spec(34)
    sender = ("127.0.0.1", 30048)

    def mcc_decode() -> int:
        decoder = RadarStream()
        got = 0
        for d in datagrams:
            got += sum(1 for cat, _ in decoder.decode(d, "bench") if cat == 48)
        return got

    def mcc_gateway() -> int:
        published: list[int] = []
        settings = GatewaySettings(
            sensor_id="bench",
            site_m=(0.0, 0.0, 0.0),
            sac=0,
            sic=1,
            max_time_offset_s=86_400.0,
            max_datagrams_per_s=1e12,
            max_bytes_per_s=1e15,
        )
        gateway = RadarGateway(settings, lambda msg: published.append(msg.count))
        now = 10 * 3600 * 10**9 + 1_000_000_000
        for d in datagrams:
            gateway.datagram(d, sender, now)
        last = gateway.scans.flush()
        return gateway.plots_published + (last.count if last is not None else 0)

    def libasterix_parse() -> int:
        got = 0
        for d in datagrams:
            for block in RawDatablock.parse(Bits.from_bytes(d)):  # type: ignore[union-attr]
                category = block.get_category()
                spec_ = cat48 if category == 48 else cat34
                parsed = spec_.cv_uap.parse(block.get_raw_records())
                if isinstance(parsed, ValueError):
                    raise MccError(f"libasterix refused the bench's own stream: {parsed}")
                if category == 48:
                    got += len(parsed)
        return got

    impls = {
        ("mcc", "decode"): mcc_decode,
        ("mcc", "gateway"): mcc_gateway,
        ("libasterix", "parse"): libasterix_parse,
    }
    rates: dict[tuple[str, str], list[float]] = {k: [] for k in impls}
    try:
        os.sched_setaffinity(0, {core})
        for _ in range(rounds):
            for key, fn in impls.items():
                gc.collect()
                start = time.perf_counter()
                got = fn()
                elapsed = time.perf_counter() - start
                if got != n:
                    raise MccError(f"{key[0]} {key[1]} read {got} reports of {n}")
                rates[key].append(n / elapsed)
    finally:
        os.sched_setaffinity(0, saved)
    medians = {k: statistics.median(v) for k, v in rates.items()}
    if oracle is not None:
        medians[("asterix-decoder", "parse")] = _oracle_rate(oracle, datagrams, n, rounds, core)
    anchor = medians[("libasterix", "parse")]
    return [
        {
            "impl": impl,
            "what": what,
            "reports": n,
            "rounds": rounds,
            "reports_per_s": round(rate, 1),
            "us_per_report": round(1e6 / rate, 2),
            "vs_libasterix": round(rate / anchor, 2),
        }
        for (impl, what), rate in medians.items()
    ]


def _oracle_rate(oracle: Path, datagrams: list[bytes], n: int, rounds: int, core: int) -> float:
    payload = b"".join(len(d).to_bytes(4, "big") + d for d in datagrams)
    env = {**child_env(), "PYTHONPATH": str(oracle)}
    proc = subprocess.run(
        [sys.executable, "-S", "-c", _ORACLE_SCRIPT, str(core), str(rounds)],
        input=payload,
        capture_output=True,
        env=env,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        raise MccError(f"asterix-decoder failed: {proc.stderr.decode(errors='replace')[-500:]}")
    doc = json.loads(proc.stdout)
    if doc["records"] != n:
        raise MccError(f"asterix-decoder read {doc['records']} CAT048 records of {n}")
    return float(statistics.median(doc["rates"]))
