"""Planner: CPU accounting, pinning to the least-loaded cores, pack/spread, GPUs, refusals."""

from __future__ import annotations

from mcc.orchestrate.manifest import Cluster, System
from mcc.orchestrate.planner import Planner

APP = "mcc.orchestrate.probe:idle"


def system(**fields: object) -> System:
    return System.model_validate({"app": APP, **fields})


def cluster(**fields: object) -> Cluster:
    return Cluster.model_validate({"app": APP, **fields})


def test_cpus_are_accounted_and_freed() -> None:
    planner = Planner({"a": 2.0})
    half = system(resources={"cpus": 0.5})
    placed = [planner.place(f"m/s/{i}", half) for i in range(4)]
    assert all(p is not None and p.node == "a" for p in placed)
    assert planner.place("m/s/4", half) is None  # full: the caller queues it
    planner.release("m/s/0")
    assert planner.place("m/s/4", half) is not None


def test_pinned_instances_get_the_least_loaded_cores() -> None:
    planner = Planner({"a": 4.0}, cores={"a": [0, 1, 2, 3]})
    pinned = system(pin=True, resources={"cpus": 1})
    sets = [planner.place(f"m/p/{i}", pinned) for i in range(4)]
    assert sorted(p.cpu_set for p in sets if p) == [(0,), (1,), (2,), (3,)]
    planner.release("m/p/2")
    two = system(pin=True, resources={"cpus": 1.5})  # ceil(1.5) = 2 cores
    planner.release("m/p/3")
    placement = planner.place("m/two/0", two)
    assert placement is not None and placement.cpu_set == (2, 3)
    unpinned = planner.place("m/u/0", system(resources={"cpus": 0.5}))
    assert unpinned is not None and unpinned.cpu_set == ()


def test_pack_fills_one_node_spread_balances() -> None:
    capacity = {"a": 4.0, "b": 4.0, "c": 4.0}
    packed = Planner(capacity)
    nodes = [packed.place(f"m/w/{i}", cluster(placement="pack"), group="w") for i in range(6)]
    assert [p.node for p in nodes if p] == ["a"] * 4 + ["b"] * 2
    spread = Planner(capacity)
    nodes = [spread.place(f"m/w/{i}", cluster(placement="spread"), group="w") for i in range(6)]
    assert sorted(p.node for p in nodes if p) == ["a", "a", "b", "b", "c", "c"]


def test_exclusive_gpus_are_given_once() -> None:
    planner = Planner({"a": 8.0}, gpus={"a": [0, 1]})
    gpu = system(resources={"cpus": 1, "gpu": "exclusive"})
    first, second = planner.place("m/g/0", gpu), planner.place("m/g/1", gpu)
    assert first is not None and second is not None
    assert {first.gpu_ids, second.gpu_ids} == {(0,), (1,)}
    assert planner.place("m/g/2", gpu) is None
    planner.release("m/g/0")
    third = planner.place("m/g/2", gpu)
    assert third is not None and third.gpu_ids == first.gpu_ids


def test_impossible_requests_are_refused_with_the_reason() -> None:
    planner = Planner({"a": 2.0, "b": 1.0})
    assert planner.impossible(system(resources={"cpus": 3})) == (
        "needs 3 CPUs; the largest node has 2"
    )
    assert planner.impossible(system(resources={"gpu": "exclusive"})) == (
        "needs an exclusive GPU; no node of this pool has one (use gpu: shared)"
    )
    assert planner.impossible(system(node="z")) == "node 'z' is not in this backend's pool"
    assert planner.impossible(system(node="b")) is None
    assert planner.place("m/x/0", system(node="b", resources={"cpus": 1})).node == "b"  # type: ignore[union-attr]
