"""The planner: which node and cores an instance gets, and whether it must wait.

CPUs are accounted per node (fractions allowed: ``cpus: 0.25``). An instance that does not
fit now waits in the supervisor's queue; one that could never fit (more CPUs than any node
has, an exclusive GPU where none exists) is refused with the reason. Pinned instances get
``ceil(cpus)`` cores, the least loaded of their node, so two pinned systems share a core only
when the node has no free one. Virtual clusters ``pack`` (fill the node already holding the
cluster's workers) or ``spread`` (the node with the fewest of them).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from mcc.orchestrate.manifest import Cluster, System

EPSILON = 1e-9


@dataclass(frozen=True)
class Placement:
    node: str
    cpus: float
    cpu_set: tuple[int, ...] = ()
    gpu_ids: tuple[int, ...] = ()


@dataclass
class NodePool:
    """One node's capacity and what is placed on it."""

    name: str
    cpus: float
    cores: list[int]
    gpus: list[int] = field(default_factory=list)
    used: float = 0.0
    core_load: Counter[int] = field(default_factory=Counter)
    gpu_owner: dict[int, str] = field(default_factory=dict)
    groups: Counter[str] = field(default_factory=Counter)

    @property
    def free(self) -> float:
        return self.cpus - self.used


class Planner:
    """Places instances on nodes; ``release`` gives their resources back."""

    def __init__(
        self,
        capacity: Mapping[str, float],
        *,
        cores: Mapping[str, list[int]] | None = None,
        gpus: Mapping[str, list[int]] | None = None,
    ) -> None:
        self.nodes = {
            name: NodePool(
                name,
                cpus,
                list((cores or {}).get(name, [])),
                list((gpus or {}).get(name, [])),
            )
            for name, cpus in capacity.items()
        }
        self._placed: dict[str, tuple[Placement, str | None]] = {}

    def impossible(self, system: System) -> str | None:
        """Why ``system`` can never be placed on this pool, or None."""
        candidates = self._candidates(system)
        if not candidates:
            return f"node {system.node!r} is not in this backend's pool"
        need = system.resources.cpus
        if all(need > node.cpus + EPSILON for node in candidates):
            biggest = max(node.cpus for node in candidates)
            return f"needs {need:g} CPUs; the largest node has {biggest:g}"
        if system.resources.gpu == "exclusive" and not any(node.gpus for node in candidates):
            return "needs an exclusive GPU; no node of this pool has one (use gpu: shared)"
        return None

    def place(
        self, instance_id: str, system: System, *, group: str | None = None
    ) -> Placement | None:
        """Reserve resources for one instance; None when they are not free now."""
        need = system.resources.cpus
        fits = [
            node
            for node in self._candidates(system)
            if node.free + EPSILON >= need
            and (system.resources.gpu != "exclusive" or self._free_gpu(node) is not None)
        ]
        if not fits:
            return None
        if isinstance(system, Cluster) and group is not None:
            if system.placement == "pack":
                order = list(self.nodes)
                node = max(fits, key=lambda n: (n.groups[group], -order.index(n.name)))
            else:
                node = min(fits, key=lambda n: (n.groups[group], -n.free))
        else:
            node = max(fits, key=lambda n: n.free)
        cpu_set: tuple[int, ...] = ()
        if system.pin and node.cores:
            count = min(max(1, math.ceil(need - EPSILON)), len(node.cores))
            ranked = sorted(node.cores, key=lambda c: (node.core_load[c], c))
            cpu_set = tuple(sorted(ranked[:count]))
            for core in cpu_set:
                node.core_load[core] += 1
        gpu_ids: tuple[int, ...] = ()
        if system.resources.gpu == "exclusive":
            gpu = self._free_gpu(node)
            assert gpu is not None
            node.gpu_owner[gpu] = instance_id
            gpu_ids = (gpu,)
        node.used += need
        if group is not None:
            node.groups[group] += 1
        placement = Placement(node.name, need, cpu_set, gpu_ids)
        self._placed[instance_id] = (placement, group)
        return placement

    def adopt(
        self,
        instance_id: str,
        system: System,
        node: str,
        *,
        cpu_set: tuple[int, ...] = (),
        gpu_ids: tuple[int, ...] = (),
        group: str | None = None,
    ) -> Placement | None:
        """Account for an instance already running where another supervisor placed it; None
        when its node is not in this pool."""
        pool = self.nodes.get(node)
        if pool is None:
            return None
        need = system.resources.cpus
        pool.used += need
        for core in cpu_set:
            pool.core_load[core] += 1
        for gpu in gpu_ids:
            pool.gpu_owner[gpu] = instance_id
        if group is not None:
            pool.groups[group] += 1
        placement = Placement(node, need, tuple(cpu_set), tuple(gpu_ids))
        self._placed[instance_id] = (placement, group)
        return placement

    def release(self, instance_id: str) -> None:
        placed = self._placed.pop(instance_id, None)
        if placed is None:
            return
        placement, group = placed
        node = self.nodes[placement.node]
        node.used = max(0.0, node.used - placement.cpus)
        for core in placement.cpu_set:
            node.core_load[core] -= 1
        for gpu in placement.gpu_ids:
            node.gpu_owner.pop(gpu, None)
        if group is not None:
            node.groups[group] -= 1

    def placement(self, instance_id: str) -> Placement | None:
        placed = self._placed.get(instance_id)
        return placed[0] if placed else None

    def _candidates(self, system: System) -> list[NodePool]:
        if system.node is not None:
            return [self.nodes[system.node]] if system.node in self.nodes else []
        return list(self.nodes.values())

    @staticmethod
    def _free_gpu(node: NodePool) -> int | None:
        return next((g for g in node.gpus if g not in node.gpu_owner), None)
