"""The loads ``mcc bench load`` runs beside a benchmark, and ``--load`` of the others
(`mcc.bench.runner.beside_load`): ``cpu``, one busy-loop process per core; ``bus``, a publisher
process writing 8 KiB samples flat out (reliable) to a subscriber process on a domain of its
own; ``cpu+bus``, both; ``none``."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from mcc.bench import perftest
from mcc.bench.perftest import Node, PerfOptions, PubSpec, SubSpec
from mcc.errors import MccError
from mcc.settings import child_env
from mcc.waiting import WaitTimeoutError, wait_for

__all__ = ["BUS_LOAD_SIZE_BYTES", "LOADS", "LoadInfo", "applied_load"]

LOADS = ("none", "cpu", "bus", "cpu+bus")
BUS_LOAD_SIZE_BYTES = 8192


@dataclass
class LoadInfo:
    """The load that ran: busy-loop processes and what the bus load's subscriber took."""

    cpu_procs: int = 0
    bus_mb_s: float | None = None


@contextlib.contextmanager
def applied_load(
    load: str, options: PerfOptions, nodes: Sequence[Node], *, max_s: float
) -> Iterator[LoadInfo]:
    """Run ``load`` for the duration of the block (every process stops when it ends).

    ``info.bus_mb_s`` is filled in when the block ends. Load processes also stop by
    themselves after ``max_s`` seconds, should this process die without stopping them.
    """
    if load not in LOADS:
        raise MccError(f"load {load!r}: choose from {', '.join(LOADS)}")
    info = LoadInfo()
    with perftest.workers() as ws:
        if "cpu" in load:
            info.cpu_procs = os.cpu_count() or 1
            burn = _BURN.format(max_s=max_s, parent=os.getpid())
            for i in range(info.cpu_procs):
                ws.start(f"cpu-{i}", nodes[0], [sys.executable, "-S", "-c", burn], env=child_env())
        pub = sub = None
        if "bus" in load:
            reason = perftest.require_mcc_transport(options)
            if reason is not None:
                raise MccError(f"bus load: {reason}")
            domain = perftest.next_domain()
            tag = perftest.run_tag("load")
            bus_options = dataclasses.replace(options, reliable=True, keyed=False)
            queue = perftest.queue_xml(bus_options.send_queue, BUS_LOAD_SIZE_BYTES)
            pub_t, sub_t = perftest.pair_transports(bus_options, nodes, tag=tag, extra_xml=queue)
            sub_env = perftest.child_env(sub_t, bus_options)
            pub_env = perftest.child_env(pub_t, bus_options)
            sub_spec = SubSpec(domain=domain, max_s=max_s, latency=False, idle_s=max_s)
            sub = ws.start_role("bus-load-sub", nodes[-1], "sub", sub_spec, env=sub_env)
            pub_spec = PubSpec(
                domain=domain, writer_id="load", size_bytes=BUS_LOAD_SIZE_BYTES, duration_s=max_s
            )
            pub = ws.start_role("bus-load-pub", nodes[0], "pub", pub_spec, env=pub_env)
            _wait_flowing(sub)
        yield info
        if pub is not None and sub is not None:
            pub.bg.proc.terminate()  # the publisher stops, sends its end and reports
            sent = pub.result(30)["sent_samples"]
            info.bus_mb_s = round(perftest.throughput_of(sub.result(30), sent).mb_per_s, 1)


#: One busy loop; it ends after ``max_s`` or when its parent (the bench) is gone.
_BURN = """import os, time
end = time.monotonic() + {max_s}
i = 0
while time.monotonic() < end:
    i += 1
    if i % 200000 == 0 and os.getppid() != {parent}:
        break
"""


def _wait_flowing(sub: perftest.Worker, timeout_s: float = 60.0) -> None:
    def flowing() -> bool:
        if sub.bg.proc.poll() is not None:  # it ended: no use waiting
            raise WaitTimeoutError("the bus load's subscriber exited")
        return perftest.FLOWING_LINE in sub.bg.output()

    try:
        wait_for(flowing, timeout_s, "the bus load flowing")
    except WaitTimeoutError:
        raise MccError(f"the bus load did not start flowing:\n{sub.bg.output()[-2000:]}") from None
