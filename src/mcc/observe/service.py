"""A long-running MCC process as a service: its ``/metrics`` endpoint, systemd readiness and
watchdog, in one context manager per kind of process.

`mcc up` wires its supervisor with two lines (``--metrics-port`` being its option)::

    supervisor.start()
    with supervisor_service(supervisor, metrics_port=args.metrics_port):
        supervisor.run(duration_s=args.duration, stop=stop)
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mcc.observe import notify
from mcc.observe.metrics import MetricsServer, serve, supervisor_registry

__all__ = ["supervisor_service"]

log = logging.getLogger("mcc.observe")


@contextmanager
def supervisor_service(
    supervisor: Any, *, metrics_port: int | None = None, metrics_host: str = "127.0.0.1"
) -> Iterator[MetricsServer | None]:
    """Around a started supervisor's run: ``/metrics`` on ``metrics_port`` (None: none; 0: a
    free port) from its `status()` and its bus's counters; ``READY=1`` to systemd; ``WATCHDOG=1``
    while `status()` answers (it takes the supervisor's lock, so a wedged reconcile loop stops
    the pings and systemd restarts the supervisor; the node agent keeps the instances)."""
    endpoint = None
    if metrics_port is not None:
        registry = supervisor_registry(supervisor, bus_stats=lambda: supervisor.bus.stats)
        endpoint = serve(registry, port=metrics_port, address=metrics_host)
        log.info("metrics on %s", endpoint.url)
    status = supervisor.status()
    line = f"mission {status['mission']}: phase {status['phase']}, {status['state']}"
    notify.ready(status=line + (f", metrics {endpoint.url}" if endpoint else ""))
    dog = notify.start_watchdog(lambda: bool(supervisor.status()))
    try:
        yield endpoint
    finally:
        notify.stopping(status=f"mission {status['mission']}: stopping")
        if dog is not None:
            dog.stop()
        if endpoint is not None:
            endpoint.close()
