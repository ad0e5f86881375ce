"""The MPI baselines (mpi4py): the same primes farm and the same stream, without the bus.

Run under the ``mpiexec`` of the PyPI ``mpich`` wheel (``find_mpiexec``)::

    mpiexec -n 3 python -m mcc.hpc.mpi primes --n 100000000 --items 16 --out result.json
    mpiexec -n 2 python -m mcc.hpc.mpi stream --bytes 1073741824 --chunk 1048576 --out r.json

Same algorithm and chunking as the DDS versions: rank 0 is the master, ranks 1..W the workers;
item k (``split_range``) goes to worker 1 + k mod W, all items up front, then a stop message;
the kernel is ``PrimeScan`` segment by segment. Rank 0 waits for results with ``Test`` and a
1 ms sleep rather than MPICH's busy poll, so that the master does not take a core from the
workers (the DDS master sleeps in a waitset). Measured: a blocking wait spins a whole core, a
0.1 ms poll costs 10 % of one, 1 ms 3 %, for at most 1 ms of latency per result. The stream
sends the buffer in chunks rank 0 → rank 1, then back (blocking ``Send``/``Recv``: MPI's own flow
control), timed at rank 0 after one untimed round trip (``WARMUP_BYTES``), as the DDS stream.

Rank 0 writes a ``JobResult`` (JSON) to ``--out``; with ``--pid-dir`` each rank writes its pid
to ``rank-N.pid`` there, and with ``--progress`` rank 0 prints ``mcc-mpi first NS`` (first item
sent) and ``mcc-mpi result K`` per result, so a
launcher can kill a worker mid-run (``run_mpi_primes(kill=…)``): MPI then aborts the job.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import time
from collections.abc import Sequence
from math import isqrt
from pathlib import Path
from typing import Any

import numpy as np

from mcc.hpc.base import (
    WARMUP_BYTES,
    HpcError,
    JobResult,
    buffers_equal,
    random_buffer,
    touched_buffer,
    write_result,
)
from mcc.hpc.primes import DEFAULT_SEGMENT_NUMBERS, PrimeCount, PrimeScan, base_primes, split_range

__all__ = ["TCP_ENV", "find_mpiexec", "main"]

#: Environment that makes MPICH talk TCP even between ranks of one host: the OFI netmod with
#: libfabric's tcp provider and no shared memory, the path two nodes would use (impl
#: ``mpi-tcp``). The wheel's default is the UCX netmod, which uses shared memory on one host
#: even with CH4's own shared memory off; ``MPIR_CVAR_NOLOCAL=1`` hung jobs of 3 ranks here.
TCP_ENV = {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp", "MPIR_CVAR_CH4_SHM_ENABLE": "0"}

_ITEM, _RESULT = 1, 2
_POLL_S = 1e-3


def find_mpiexec() -> str:
    """The ``mpiexec`` of the ``mpich`` wheel beside this Python (else on PATH), with mpi4py."""
    if importlib.util.find_spec("mpi4py") is None:
        raise HpcError(
            "the MPI baseline needs mpi4py and MPICH: `.venv/bin/pip install mpich mpi4py` "
            "(or `pip install -e '.[mpi]'`)"
        )
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.exists():
        return str(beside)
    found = shutil.which("mpiexec")
    if found is None:
        raise HpcError(
            "no mpiexec beside this Python nor on PATH: `.venv/bin/pip install mpich` "
            "installs MPICH's mpiexec into the virtual environment"
        )
    return found


def _primes(args: argparse.Namespace) -> int:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if size < 2:
        raise HpcError("mpiexec -n: the farm needs a master and at least one worker (-n >= 2)")
    workers = size - 1
    if args.pid_dir:
        (Path(args.pid_dir) / f"rank-{rank}.pid").write_text(str(os.getpid()))
    ranges = split_range(args.n, args.items if args.items else 8 * workers)
    comm.Barrier()
    if rank != 0:
        item = np.zeros(3, dtype=np.int64)
        result = np.zeros(4, dtype=np.int64)
        base = np.zeros(0, dtype=np.int64)
        base_limit = 0
        while True:
            comm.Recv(item, source=0, tag=_ITEM)
            if item[0] < 0:
                return 0
            start_ns = time.time_ns()
            lo, hi = int(item[1]), int(item[2])
            limit = isqrt(max(hi - 1, 0))
            if limit > base_limit:
                base, base_limit = base_primes(limit), limit
            scan = PrimeScan(lo, hi, segment_numbers=args.segment)
            for _ in scan.run(base):
                pass
            result[:] = (item[0], scan.total.count, scan.total.largest, time.time_ns() - start_ns)
            comm.Send(result, dest=0, tag=_RESULT)

    first_item_ns = time.time_ns()
    if args.progress:
        print(f"mcc-mpi first {first_item_ns}", flush=True)
    sends = []
    buffers = []
    for k, (lo, hi) in enumerate(ranges):
        buf = np.array([k, lo, hi], dtype=np.int64)
        buffers.append(buf)
        sends.append(comm.Isend(buf, dest=1 + k % workers, tag=_ITEM))
    for w in range(1, size):
        buf = np.array([-1, 0, 0], dtype=np.int64)
        buffers.append(buf)
        sends.append(comm.Isend(buf, dest=w, tag=_ITEM))
    found: dict[int, PrimeCount] = {}
    duplicates = 0
    result = np.zeros(4, dtype=np.int64)
    last_result_ns = 0
    while len(found) < len(ranges):
        request = comm.Irecv(result, source=MPI.ANY_SOURCE, tag=_RESULT)
        while not request.Test():
            time.sleep(_POLL_S)
        item_id = int(result[0])
        if item_id in found:
            duplicates += 1
            continue
        found[item_id] = PrimeCount(int(result[1]), int(result[2]))
        last_result_ns = time.time_ns()
        if args.progress:
            print(f"mcc-mpi result {item_id}", flush=True)
    MPI.Request.Waitall(sends)
    total = PrimeCount()
    for value in found.values():
        total = total + value
    write_result(
        JobResult(
            app="primes",
            impl=args.impl,
            workers=workers,
            job_id=args.job,
            n=args.n,
            items=len(ranges),
            count=total.count,
            largest=total.largest,
            runtime_s=(last_result_ns - first_item_ns) / 1e9,
            duplicate_results=duplicates,
            lost_items=len(ranges) - len(found),
            extra={"first_item_ns": first_item_ns, "last_result_ns": last_result_ns},
        ),
        Path(args.out),
    )
    return 0


def _stream(args: argparse.Namespace) -> int:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if size != 2:
        raise HpcError(f"mpiexec -n {size}: the stream runs between exactly 2 ranks (-n 2)")
    total, chunk = args.bytes, args.chunk
    # One untimed round trip first, of the size the DDS stream warms up with.
    rounds = ((min(total, WARMUP_BYTES), False), (total, True))  # (bytes, timed)
    if rank == 1:
        buffer = touched_buffer(total)
        for nbytes, _ in rounds:
            comm.Barrier()
            _echo(comm, buffer[:nbytes], chunk)
        return 0
    source = random_buffer(total, args.seed)
    back = touched_buffer(total)
    first_ns = last_ns = 0
    for nbytes, timed in rounds:
        sent, got = source[:nbytes], back[:nbytes]
        comm.Barrier()
        started = time.time_ns()
        for off in range(0, nbytes, chunk):
            comm.Send(sent[off : off + chunk], dest=1, tag=_ITEM)
        for off in range(0, nbytes, chunk):
            comm.Recv(got[off : off + chunk], source=1, tag=_RESULT)
        if timed:
            first_ns, last_ns = started, time.time_ns()
    runtime_s = (last_ns - first_ns) / 1e9
    write_result(
        JobResult(
            app="stream",
            impl=args.impl,
            workers=1,
            job_id=args.job,
            size_bytes=total,
            chunk_bytes=chunk,
            verified=buffers_equal(source, back),
            runtime_s=runtime_s,
            mb_per_s=2 * total / runtime_s / 1e6,
            extra={"first_item_ns": first_ns, "last_result_ns": last_ns},
        ),
        Path(args.out),
    )
    return 0


def _echo(comm: Any, buffer: np.ndarray, chunk: int) -> None:
    """Rank 1 of the stream: ``buffer``'s size received from rank 0 in chunks, sent back."""
    for off in range(0, buffer.size, chunk):
        comm.Recv(buffer[off : off + chunk], source=0, tag=_ITEM)
    for off in range(0, buffer.size, chunk):
        comm.Send(buffer[off : off + chunk], dest=0, tag=_RESULT)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mcc.hpc.mpi", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="app", required=True)
    primes = sub.add_parser("primes", help="count primes in [1, N] (rank 0 master)")
    primes.add_argument("--n", type=int, required=True)
    primes.add_argument("--items", type=int, help="work items (default 8 per worker)")
    primes.add_argument("--segment", type=int, default=DEFAULT_SEGMENT_NUMBERS)
    primes.add_argument("--progress", action="store_true", help="rank 0 prints each result")
    primes.add_argument("--pid-dir", help="each rank writes rank-N.pid here")
    stream = sub.add_parser("stream", help="send a buffer rank 0 → 1 and back")
    stream.add_argument("--bytes", type=int, required=True)
    stream.add_argument("--chunk", type=int, required=True)
    stream.add_argument("--seed", type=int, default=1)
    for s in (primes, stream):
        s.add_argument("--out", required=True, help="rank 0 writes the JobResult here")
        s.add_argument("--job", default="mpi", help="job id in the result")
        s.add_argument("--impl", default="mpi", help="implementation name in the result")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _primes(args) if args.app == "primes" else _stream(args)
    except HpcError as exc:
        print(f"mcc.hpc.mpi: error: {exc}", file=sys.stderr, flush=True)
        from mpi4py import MPI

        MPI.COMM_WORLD.Abort(2)
        return 2


if __name__ == "__main__":
    sys.exit(main())
