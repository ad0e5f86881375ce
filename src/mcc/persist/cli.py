"""``mcc persist serve|inspect``: run a replica of the persistence service, look into a store."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from mcc import settings
from mcc.persist.limits import PersistLimits, retention_seconds


def add_parser(subparsers: Any) -> None:
    """Add ``persist`` (``serve``, ``inspect``) to the ``mcc`` sub-commands (``mcc bench
    persist`` lives in `mcc.bench.persist`)."""
    persist = subparsers.add_parser(
        "persist",
        help="persistence service for durable topics (serve, inspect)",
        description="Keep the samples of TRANSIENT/PERSISTENT topics in SQLite and replay "
        "them to late joiners (docs/persistence.md).",
    )
    psub = persist.add_subparsers(dest="persist_command", metavar="ACTION", required=True)
    serve = psub.add_parser(
        "serve",
        help="run a replica of the persistence service",
        description="Run a replica of the persistence service until SIGTERM/SIGINT; prints a "
        "line with 'ready' once it serves.",
    )
    serve.add_argument(
        "--store",
        type=Path,
        default=Path("persist.sqlite"),
        help="SQLite file of this replica (default %(default)s; created if missing)",
    )
    serve.add_argument(
        "--domain",
        type=int,
        default=settings.current().domain,
        help="DDS domain id, 0-232 (env MCC_DOMAIN; default %(default)s)",
    )
    serve.add_argument("--replica", help="replica name, unique per running replica (host/pid)")
    serve.add_argument(
        "--retention",
        type=retention_seconds,
        default=24 * 3600.0,
        metavar="SECONDS",
        help="keep samples this long, the newest of each instance always (default %(default)g "
        "s: a day); inf: no retention",
    )
    serve.set_defaults(func=cmd_serve)
    inspect = psub.add_parser(
        "inspect",
        help="what a store holds: topics, instances, writers, samples",
        description="List the topics, instances, writers and samples of a store, with sizes "
        "and times.",
    )
    inspect.add_argument("store", type=Path, metavar="FILE", help="the store's SQLite file")
    inspect.add_argument("--json", action="store_true", help="print JSON instead of tables")
    inspect.add_argument(
        "--limit", type=int, help="samples listed, newest first (default: 20 in tables, all JSON)"
    )
    inspect.set_defaults(func=cmd_inspect)


def cmd_serve(args: argparse.Namespace) -> int:
    from mcc.persist.service import default_replica, open_service

    logging.basicConfig(
        level=settings.current().log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    replica = args.replica or default_replica()
    limits = PersistLimits(retention_s=args.retention)
    with open_service(args.store, domain_id=args.domain, replica=replica, limits=limits) as service:
        service.wait_ready()
        print(
            f"mcc persist: replica {replica} on domain {args.domain}, store {args.store}: ready",
            flush=True,
        )
        while not stop.wait(0.5):
            if not service.alive:
                print(f"mcc persist: the service stopped: {service.failure}", file=sys.stderr)
                return 1
        stats = service.stats
    print(
        f"mcc persist: replica {replica} stopped: {stats.stored} stored, "
        f"{stats.requests} history requests served",
        flush=True,
    )
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from mcc.persist.inspect import inspect_store, print_report

    limit = args.limit if args.limit is not None else (None if args.json else 20)
    report = inspect_store(args.store, limit=limit)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print_report(report)
    return 0
