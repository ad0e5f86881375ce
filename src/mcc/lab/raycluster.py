"""A Ray cluster on the hosts of a container lab: the head with GCS fault tolerance on a real Redis,
workers on the other hosts (``localhost/mcc-ray``: the core image with MCC's ``ray`` extra and
Debian's ``redis-server``).

>>> with ContainerLab(3, image=RAY_IMAGE) as lab:
...     ray = RayLab(lab, head="h1", workers=["h2", "h3"]).start()
...     lab.exec("h1", ["mcc", "up", "m.yaml", "--backend", "ray", "--address", ray.address])

The head runs no instance (``--num-cpus 0``): a head restart (`restart_head`) restarts none, and
the GCS reloads the cluster's state from Redis (``RAY_REDIS_ADDRESS``, a password of the lab's
own). Every node declares its lab name as a label (``node:h2``), the human name the Ray backend
shows. The GCS health check is tuned to notice a lost host in about 1 s (`HEALTH_CHECK`: a
check every 300 ms, 3 missed answers of 300 ms each; Ray's default is 3 s x 5 with 10 s
answers, about 15-45 s): per node, one small gRPC call every 300 ms to its raylet, and a
raylet stalled for about 1-2 s is declared dead (its actors restart elsewhere).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from mcc.lab.hosts import ContainerLab
from mcc.lab.podman import PodmanError

__all__ = ["GCS_PORT", "HEALTH_CHECK", "RAY_IMAGE", "REDIS_PORT", "RayLab"]

RAY_IMAGE = "localhost/mcc-ray:latest"
REDIS_PORT = 6379
GCS_PORT = 6380
#: The GCS's node health check (``ray start --system-config``): a lost host is dead after about
#: period x threshold.
HEALTH_CHECK: Mapping[str, int] = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 300,
    "health_check_timeout_ms": 300,
    "health_check_failure_threshold": 3,
}
#: The smallest object store Ray accepts: instances pass no objects, and /dev/shm is 64 MB here.
OBJECT_STORE_BYTES = 80 * 1000 * 1000
WORKER_CPUS = 2
#: The workers' raylets: start every worker process a host lost needs at once. Ray starts at
#: most as many at a time as the node has CPUs (2), so the six actors of a lost host came back
#: in three waves.
WORKER_ENV: Mapping[str, str] = {"RAY_worker_maximum_startup_concurrency": "8"}


@dataclass
class RayLab:
    """Ray on ``lab``: Redis and the head on ``head``, a worker on each of ``workers``, and a
    node with no CPUs on each of ``drivers``: a host for a supervisor (a Ray driver runs on a
    node of the cluster) where no instance runs, so that losing it loses no instance."""

    lab: ContainerLab
    head: str = "h1"
    workers: Sequence[str] = ("h2", "h3")
    drivers: Sequence[str] = ()
    password: str = field(default_factory=lambda: secrets.token_hex(16), repr=False)

    @property
    def address(self) -> str:
        """The GCS address (``ray start --address``, ``mcc up --address``)."""
        return f"{self.lab.host(self.head).address}:{GCS_PORT}"

    def start(self) -> RayLab:
        """Redis, the head, then the workers; returns once every node is up."""
        self.lab.exec(
            self.head,
            [
                "redis-server", "--daemonize", "yes", "--port", str(REDIS_PORT),
                "--bind", "0.0.0.0", "--requirepass", self.password, "--appendonly", "yes",
                "--dir", "/var/lib/mcc", "--logfile", "/var/lib/mcc/redis.log",
            ],
        )  # fmt: skip
        self.start_head()
        for worker in self.workers:
            self._ray_start(
                worker,
                ["--address", self.address, "--num-cpus", str(WORKER_CPUS)],
                worker,
                env=dict(WORKER_ENV),
            )
        for driver in self.drivers:
            self._ray_start(driver, ["--address", self.address, "--num-cpus", "0"], driver)
        return self

    def start_head(self) -> None:
        """``ray start --head`` on the head host, its GCS stored in the lab's Redis."""
        redis = f"{self.lab.host(self.head).address}:{REDIS_PORT}"
        self._ray_start(
            self.head,
            [
                "--head", "--port", str(GCS_PORT), "--num-cpus", "0",
                "--redis-password", self.password, "--include-dashboard", "false",
                "--system-config", json.dumps(dict(HEALTH_CHECK)),
            ],
            self.head,
            env={"RAY_REDIS_ADDRESS": redis},
        )  # fmt: skip

    def restart_head(self) -> None:
        """Stop every Ray process of the head host (kill -9), start the head again: the GCS
        reloads from Redis, the workers' raylets reconnect, their actors run on."""
        self.lab.exec(self.head, ["ray", "stop", "--force"], timeout_s=60)
        self.start_head()

    def _ray_start(
        self, host: str, args: list[str], label: str, env: dict[str, str] | None = None
    ) -> None:
        ip = self.lab.host(host).address
        proc = self.lab.exec(
            host,
            [
                "ray", "start", *args, "--node-ip-address", ip,
                "--resources", json.dumps({f"node:{label}": 1}),
                "--object-store-memory", str(OBJECT_STORE_BYTES), "--disable-usage-stats",
            ],
            env=env,
            check=False,
            timeout_s=180,
        )  # fmt: skip
        if proc.returncode != 0:
            raise PodmanError(
                f"ray start on {host} failed (exit {proc.returncode}): "
                f"{(proc.stdout + proc.stderr).strip()[-2000:]}"
            )
