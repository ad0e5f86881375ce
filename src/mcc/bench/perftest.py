"""What every perftest mode shares: options, QoS, networks and the publisher/subscriber processes.

The modes (``latency``, ``throughput``, ``scale``, ``blocked``, ``load``) measure MCC's bus the
way RTI Perftest and Cyclone's ``ddsperf`` measure theirs, with the anchors in the same run:

- :class:`PerfOptions` holds the knobs every mode takes: transport (udp | tcp), reliability,
  keyed or not, multicast, send-queue depth and network (``host`` loopback or ``netns``, two
  network namespaces on a bridge, from :mod:`mcc.netlab`).
- :func:`perf_qos_file` derives the processes' profile library from ``qos/mcc.xml``, with
  ``perf_reliable_stream``: RTI Perftest's *send queue* for the publisher/subscriber modes.
- :func:`open_network` places the processes: on loopback, or on the hosts of a
  :class:`mcc.netlab.NetLab` created for the run and removed after it.
- ``python -m mcc.bench.perftest pub|sub --spec JSON`` are the measuring processes of the
  throughput, scale, blocked and load modes; each prints one ``RESULT {json}`` line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mcc.bench.perftest_net import (
    Node,
    Worker,
    anchor_configs,
    child_env,
    free_port,
    open_network,
    pair_transports,
    run_tag,
    workers,
)
from mcc.bench.perftest_options import (
    FLOWING_LINE,
    MATCH_TIMEOUT_S,
    NETS,
    RESULT_PREFIX,
    STREAM_PROFILE,
    TRANSPORTS,
    WRITE_BATCH_XML,
    PerfKeyedSample,
    PerfOptions,
    add_common_options,
    nets_from_args,
    options_from_args,
    perf_qos_file,
    queue_xml,
    require_mcc_transport,
    sample_type,
)
from mcc.bench.perftest_roles import (
    PubSpec,
    SubSpec,
    run_pub,
    run_sub,
    sleep_until,
    throughput_of,
)
from mcc.bus.transport import ScratchDomains
from mcc.errors import MccError, TransportError

__all__ = [
    "FLOWING_LINE",
    "NETS",
    "Node",
    "PerfKeyedSample",
    "PerfOptions",
    "PubSpec",
    "PubSubRun",
    "RESULT_PREFIX",
    "STREAM_PROFILE",
    "SubSpec",
    "TRANSPORTS",
    "Worker",
    "add_common_options",
    "anchor_configs",
    "child_env",
    "error_line",
    "claim_in_process",
    "free_port",
    "main",
    "nets_from_args",
    "next_domain",
    "open_network",
    "options_from_args",
    "pair_transports",
    "perf_qos_file",
    "pubsub_or_error",
    "queue_xml",
    "require_mcc_transport",
    "run_pubsub",
    "run_tag",
    "sample_type",
    "sleep_until",
    "throughput_of",
    "workers",
]

_in_process_domains: set[int] = set()
_domains = ScratchDomains(avoid=_in_process_domains)


def next_domain() -> int:
    """A scratch DDS domain for the next row (fresh per row, no leftovers), never one this
    process has a participant on already (a process configures each domain once)."""
    return next(_domains)


def claim_in_process(domain: int) -> None:
    """Note that this process configured ``domain`` (``next_domain`` skips it from now on)."""
    _in_process_domains.add(domain)


@dataclass
class PubSubRun:
    """The results of one publishers → subscribers run of MCC processes."""

    pubs: list[dict[str, Any]]
    subs: list[dict[str, Any]]

    @property
    def sent_samples(self) -> int:
        return sum(p["sent_samples"] for p in self.pubs)


def run_pubsub(
    options: PerfOptions,
    nodes: Sequence[Node],
    pubs: Sequence[PubSpec],
    *,
    subscribers: int = 1,
    batch: int = 1,
    write_batching: bool = False,
    latency: bool = True,
    timeout_s: float = 120.0,
) -> PubSubRun:
    """Run ``pubs`` on ``nodes[0]`` and ``subscribers`` subscriber processes on ``nodes[-1]``
    (all on the first publisher's domain, one discovery tag); wait for all and return what
    each measured.

    The subscribers start first; each publisher waits until all of them matched, so every
    subscriber sees every sample. ``write_batching`` turns on Cyclone's write batching in
    every process (the publishers flush when idle and at the end).
    """
    reason = require_mcc_transport(options)
    if reason is not None:
        raise MccError(reason)
    domain = pubs[0].domain
    tag = run_tag("ps")
    largest = max(p.size_bytes * batch for p in pubs)
    extra = queue_xml(options.send_queue, largest) + (WRITE_BATCH_XML if write_batching else "")
    if options.transport == "tcp" and subscribers > 1:
        raise MccError("--transport tcp runs one subscriber process (it listens on one port)")
    pub_t, sub_t = pair_transports(options, nodes, tag=tag, extra_xml=extra)
    pub_env, sub_env = child_env(pub_t, options), child_env(sub_t, options)
    max_s = max(p.duration_s for p in pubs) + MATCH_TIMEOUT_S + 30
    sub = SubSpec(
        domain=domain,
        keyed=options.keyed,
        reliable=options.reliable,
        writers=len(pubs),
        batch=batch,
        max_s=max_s,
        latency=latency,
    )
    pubs = [
        dataclasses.replace(
            p,
            domain=domain,
            keyed=options.keyed,
            reliable=options.reliable,
            readers=subscribers,
            batch=batch,
            flush=write_batching,
        )
        for p in pubs
    ]
    with workers() as ws:
        subs = [
            ws.start_role(f"sub{i + 1}", nodes[-1], "sub", sub, env=sub_env)
            for i in range(subscribers)
        ]
        # publishers start at once: each waits until every subscriber has matched
        pub_workers = [
            ws.start_role(f"pub-{p.writer_id}", nodes[0], "pub", p, env=pub_env) for p in pubs
        ]
        pub_results = [w.result(timeout_s) for w in pub_workers]
        sub_results = [w.result(timeout_s) for w in subs]
    return PubSubRun(pub_results, sub_results)


def error_line(exc: Exception) -> str:
    """Why a row failed, for its ``error``: the first line of ``exc``, at most 300 characters."""
    return str(exc).splitlines()[0][:300]


def pubsub_or_error(
    row: dict[str, Any],
    options: PerfOptions,
    nodes: Sequence[Node],
    pubs: Sequence[PubSpec],
    **kw: Any,
) -> PubSubRun | None:
    """`run_pubsub` (``kw`` its keywords), or None with ``row["error"]`` saying why it failed."""
    try:
        return run_pubsub(options, nodes, pubs, **kw)
    except MccError as exc:
        row["error"] = error_line(exc)
        return None


def _spec_from(cls: type, text: str) -> Any:
    try:
        data = json.loads(text)
        return cls(**data)
    except (ValueError, TypeError) as exc:
        raise MccError(f"--spec {text[:200]!r} is not a {cls.__name__} ({exc})") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mcc.bench.perftest")
    parser.add_argument("role", choices=["pub", "sub"])
    parser.add_argument("--spec", required=True, help="JSON of PubSpec or SubSpec")
    args = parser.parse_args(argv)
    try:
        if args.role == "pub":
            result = run_pub(_spec_from(PubSpec, args.spec))
        else:
            result = run_sub(_spec_from(SubSpec, args.spec))
    except (MccError, TransportError) as exc:
        print(f"mcc.bench.perftest {args.role}: {exc}", file=sys.stderr, flush=True)
        return 2
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
