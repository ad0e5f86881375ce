"""The remote compute service and its client: registered kernels on a shared device, over the bus.

``mcc compute serve --name compute --device cuda:0`` (or the app ``mcc.compute.remote:serve``,
which the supervisor starts for missions with ``gpu: shared`` systems) owns one device and runs
the kernels that arrive as ``ComputeRequest``s; ``open_compute("remote:compute")`` returns the
same `Kernels` object as a local device, backed by a `ComputeClient`. Both sides use the
partition ``mcc.compute.<name>`` on the mission's domain, so a service is found by its name
whatever virtual cluster its clients belong to.

- `mcc.compute.service`: `ComputeService` — checks, a fair queue across clients, batching,
  deadlines, compute budgets.
- `mcc.compute.client`: `ComputeClient` — timeouts, resends when the service restarts.
- this module: the app entry and ``mcc compute serve|kernels``.

Both are built on the bus's request/reply core (`mcc.bus.rpc`), like `Requester`/`Replier`:
the core's server queues per client (`FairQueue`) and runs batches in a worker thread that
owns the device, its client resends idempotent calls when the service restarts.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

from mcc import settings
from mcc.compute.channel import PARTITION_PREFIX, service_partition
from mcc.compute.client import ComputeClient
from mcc.compute.kernels import KERNELS
from mcc.compute.limits import ServiceLimits
from mcc.compute.service import ComputeService, FairQueue, ServiceStatistics
from mcc.orchestrate.appspec import app
from mcc.security.mission import Topics

if TYPE_CHECKING:
    from mcc.orchestrate.runtime import AppContext

__all__ = [
    "PARTITION_PREFIX",
    "ComputeClient",
    "ComputeService",
    "FairQueue",
    "ServiceLimits",
    "ServiceStatistics",
    "add_parsers",
    "serve",
    "service_partition",
]


# -- app entry and command line ---------------------------------------------------------------


def _serve_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", help="service name clients use as remote:NAME")
    parser.add_argument("--device", help="cpu or cuda:N (default: MCC_DEVICE when local, else cpu)")
    parser.add_argument(
        "--max-batch",
        type=int,
        default=16,
        help="most queued requests run as one kernel call (default %(default)s; 1 = none)",
    )
    defaults = ServiceLimits()
    parser.add_argument(
        "--budget-s",
        type=float,
        default=defaults.budget_s,
        help="compute time of one call, s (default %(default)s; a request's deadline only "
        "shortens it)",
    )
    parser.add_argument(
        "--max-request-mb",
        type=float,
        default=defaults.max_request_bytes / 2**20,
        help="array MiB of one request (default %(default)s)",
    )
    parser.add_argument(
        "--max-queued-per-client",
        type=int,
        default=defaults.max_queued_per_client,
        help="requests one client may have waiting (default %(default)s)",
    )


def _limits(args: argparse.Namespace) -> ServiceLimits:
    return ServiceLimits(
        budget_s=args.budget_s,
        max_request_bytes=max(1, int(args.max_request_mb * 2**20)),
        max_queued_per_client=args.max_queued_per_client,
    )


def _local_device(device: str | None) -> str:
    if device:
        return device
    env = settings.current().device
    return env if env and not env.startswith("remote:") else "cpu"


@app(
    topics=Topics(
        publish=("ComputeReply", "ComputeBulkReturn"),
        subscribe=("ComputeRequest", "ComputeBulk"),
    )
)
def serve(ctx: AppContext) -> int:
    """App entry ``mcc.compute.remote:serve``: run the service until the instance is stopped.

    Arguments: ``--name`` (default: the system's name), ``--device`` (default: the instance's
    device, ``cuda:0`` with ``gpu: exclusive``), ``--max-batch``, ``--budget-s``,
    ``--max-request-mb``, ``--max-queued-per-client`` (`ServiceLimits`).
    """
    parser = argparse.ArgumentParser(prog="mcc.compute.remote:serve")
    _serve_options(parser)
    args = parser.parse_args(ctx.args)
    device = args.device or ctx.device
    with ComputeService(
        name=args.name or ctx.identity.system,
        device=device,
        domain_id=ctx.bus.domain_id,
        max_batch=args.max_batch,
        heartbeat=ctx.heartbeat,
        limits=_limits(args),
    ) as service:
        ctx.log.info("serving kernels as %r on %s", service.name, service.device)
        while not ctx.wait(1.0):
            stats = service.statistics()
            ctx.heartbeat.message = (
                f"{stats.replies} replies, {stats.refused} refused, queue max {stats.max_queue}"
            )
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with ComputeService(
        name=args.name or "compute",
        device=_local_device(args.device),
        domain_id=args.domain,
        discovery_tag=args.tag,
        max_batch=args.max_batch,
        limits=_limits(args),
    ) as service:
        print(
            f"mcc compute: serving {service.name!r} on {service.device} "
            f"(domain {service.domain_id}, partition {service.partition}); Ctrl-C stops",
            flush=True,
        )
        while not stop.wait(1.0):
            pass
    # After close, which waits for the worker: a reply already on the wire is counted only
    # once the write returned, so counters read before could miss it ("stopped after 0
    # replies" from a client that had its reply).
    stats = service.statistics()
    print(
        f"mcc compute: stopped after {stats.replies} replies ({stats.refused} refused, "
        f"{stats.expired} expired, {stats.failed} failed)",
        file=sys.stderr,
    )
    return 0


def _cmd_kernels(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="compute kernels (open_compute / remote:NAME)")
    for col in ("kernel", "arguments", "parameters", "results", "bound"):
        table.add_column(col)
    for spec in KERNELS.values():
        table.add_row(
            spec.name,
            "\n".join(a.describe() for a in spec.args),
            "\n".join(p.describe() for p in spec.params) or "-",
            ", ".join(spec.results),
            spec.bound,
        )
    Console().print(table)
    return 0


def _add_actions(actions: Any) -> None:
    srv = actions.add_parser(
        "serve",
        help="run a compute service in the foreground",
        description="Own one device and run the kernels that clients (open_compute("
        "'remote:NAME')) send, until SIGINT/SIGTERM.",
    )
    _serve_options(srv)
    srv.add_argument(
        "--domain",
        type=int,
        default=settings.current().domain,
        help="DDS domain id (env MCC_DOMAIN; default %(default)s)",
    )
    srv.add_argument(
        "--tag",
        default=settings.current().discovery_tag,
        help="discovery tag (env MCC_DISCOVERY_TAG)",
    )
    srv.set_defaults(func=_cmd_serve)
    kernels = actions.add_parser("kernels", help="list the registered kernels and their schemas")
    kernels.set_defaults(func=_cmd_kernels)


def add_parsers(subparsers: Any) -> None:
    """``mcc compute serve`` and ``mcc compute kernels``."""
    compute = subparsers.add_parser(
        "compute",
        help="the remote compute service (serve kernels, list them)",
        description="Serve the registered kernels to remote:NAME clients, or list them.",
    )
    _add_actions(compute.add_subparsers(dest="compute_command", metavar="ACTION", required=True))


def main(argv: list[str] | None = None) -> int:
    """``python -m mcc.compute.remote serve|kernels …``: ``mcc compute`` without loading the
    whole command line (a start in half the time, for benches and supervisors)."""
    from mcc._entry import main_for

    return main_for("compute", add_parsers, argv)


if __name__ == "__main__":
    sys.exit(main())
