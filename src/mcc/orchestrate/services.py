"""Services the supervisor adds to a mission by itself: persistence, remote compute, transport.

A mission that uses durable topics needs the persistence service (``mcc.persist``) running
before its writers and readers; a mission with ``gpu: shared`` systems needs the compute
service (``mcc.compute.remote``) that owns the GPU. ``with_services`` returns the mission with
those systems added (``persist``, ``compute``) and the users ordered after them, as the
manifest's ``services:`` section asks (``auto`` by default, ``on``, ``off``). A system the user
names ``persist`` or ``compute`` replaces the built-in one.

An app declares the durable topics it uses (``durable=`` of `mcc.orchestrate.appspec.app`), e.g.
the farm master and workers of ``mcc.hpc.farm``: ``durable=("Checkpoint",)``.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from mcc.bus.transport import Transport
from mcc.orchestrate.appspec import spec_of
from mcc.orchestrate.manifest import (
    Cluster,
    Health,
    Mission,
    Resources,
    Restart,
    System,
    load_manifest,
)
from mcc.security.mission import HISTORY_TOPICS, RUNTIME_TOPICS, Topics

PERSIST = "persist"
COMPUTE = "compute"
PERSIST_APP = "mcc.persist.service:main"
COMPUTE_APP = "mcc.compute.remote:serve"

log = logging.getLogger("mcc.orchestrate")

_ALWAYS = Restart(policy="always", backoff_s=0.1, backoff_max_s=2.0, max_restarts=100)


def durable_topics(app: str) -> tuple[str, ...]:
    """The durable topics that ``app`` (``module:function``) declares; () when it declares
    none or does not load (the launch says why)."""
    spec = spec_of(app)
    return spec.durable if spec is not None else ()


def with_services(mission: Mission, *, gpus_available: bool) -> Mission:
    """``mission`` plus the persistence and compute services it needs (or asks for)."""
    systems = mission.all_systems()
    durable_users = [
        name for name, s in systems.items() if s.app is not None and durable_topics(s.app)
    ]
    shared_users = [name for name, s in systems.items() if s.resources.gpu == "shared"]
    wanted = mission.services
    added: dict[str, System] = {}
    if _enabled(wanted.persist.enabled, bool(durable_users)) and PERSIST not in systems:
        declared = sorted({t for n in durable_users for t in durable_topics(systems[n].app or "")})
        added[PERSIST] = System(
            app=PERSIST_APP,
            # only what the mission's apps declare durable is kept: an identity allowed to
            # write another topic cannot fill the store by writing it with durable QoS (a
            # mission that declares none, persistence asked for by hand, keeps every one)
            args=["--topics", ",".join(declared)] if declared else [],
            replicas=wanted.persist.replicas,
            resources=Resources(cpus=0.25),
            restart=_ALWAYS,
            health=Health(timeout_s=5.0),
            description="persistence service: durable topics in SQLite, replayed to late joiners",
        )
    if _enabled(wanted.compute.enabled, bool(shared_users)) and COMPUTE not in systems:
        gpu = wanted.compute.gpu
        if gpu == "auto":
            gpu = "exclusive" if gpus_available else "none"
        added[COMPUTE] = System(
            app=COMPUTE_APP,
            resources=Resources(cpus=1.0, gpu=gpu),
            restart=_ALWAYS,
            health=Health(timeout_s=5.0),
            description="compute service: kernels of gpu: shared systems, on "
            + ("the GPU" if gpu == "exclusive" else "the CPU (no GPU found)"),
        )
    if not added:
        return mission
    needs = {PERSIST: durable_users, COMPUTE: shared_users}

    def ordered(name: str, system: System) -> System:
        deps = [svc for svc in added if name in needs[svc] and svc not in system.after]
        return system.model_copy(update={"after": [*deps, *system.after]}) if deps else system

    log.info("mission %s: adding %s", mission.mission, ", ".join(added))
    return mission.model_copy(
        update={
            "systems": {**added, **{n: ordered(n, s) for n, s in mission.systems.items()}},
            "clusters": {n: ordered(n, c) for n, c in mission.clusters.items()},
        }
    )


def _enabled(switch: str, needed: bool) -> bool:
    return switch == "on" or (switch == "auto" and needed)


def mission_transports(mission: Mission, base: Transport) -> tuple[Transport, Transport] | None:
    """The transports of the supervisor and of every other process of ``mission`` (clients
    included), from the manifest's ``transport:`` over ``base`` (the environment's); None for
    ``udp``: everyone keeps ``base``."""
    if mission.transport.kind == "udp":
        return None
    shm = dataclasses.replace(base, kind="shm")
    return shm, shm


def system_topics(mission: Mission) -> dict[str, Topics]:
    """What each system of ``mission`` may publish and subscribe in a secured mission: what its
    app declares (`mcc.orchestrate.appspec.app`), its heartbeat, and the history and compute
    topics it needs."""
    out = {}
    for name, system in mission.all_systems().items():
        topics = RUNTIME_TOPICS
        if system.publish is not None or system.subscribe is not None:
            topics |= Topics(tuple(system.publish or ()), tuple(system.subscribe or ()))
            if system.app is not None and durable_topics(system.app):
                topics |= HISTORY_TOPICS
        elif system.app is not None:
            spec = spec_of(system.app)
            declared = spec.topics if spec is not None else None
            if declared is None:
                log.warning(
                    "mission %s: %s (%s) declares no topics: secured, it may publish its "
                    "heartbeat and nothing else",
                    mission.mission,
                    name,
                    system.app,
                )
            else:
                topics |= declared
            if durable_topics(system.app):
                topics |= HISTORY_TOPICS
        if system.resources.gpu == "shared":
            topics |= Topics(
                publish=("ComputeRequest", "ComputeBulk"),
                subscribe=("ComputeReply", "ComputeBulkReturn"),
            )
        out[name] = topics
    return out


def expected_permissions(manifest: str | Path) -> dict[str, str]:
    """Every identity the mission of ``manifest`` needs (``MISSION/NAME``: supervisor,
    operator, console, one per instance at the manifest's replicas and cluster sizes) and
    the allow rules its permissions must hold (`mcc security check KEYSTORE MANIFEST`)."""
    from mcc.security.documents import allow_rules
    from mcc.security.mission import CONSOLE_TOPICS, OPERATOR_TOPICS, SUPERVISOR_TOPICS

    mission = load_manifest(manifest)
    domains = (mission.domain,)
    wanted = {
        "supervisor": SUPERVISOR_TOPICS,
        "operator": OPERATOR_TOPICS,
        "console": CONSOLE_TOPICS,
    }
    for name, topics in system_topics(mission).items():
        system = mission.all_systems()[name]
        count = system.size if isinstance(system, Cluster) else system.replicas
        wanted.update({f"{name}.{i}": topics for i in range(count)})
    return {
        f"{mission.mission}/{name}": allow_rules(topics.grants(name), domains)
        for name, topics in wanted.items()
    }
