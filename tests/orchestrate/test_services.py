"""The supervisor adds the persistence and compute services a mission needs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from mcc.compute.rodinia import hotspot
from mcc.errors import ManifestError
from mcc.orchestrate import Supervisor
from mcc.orchestrate.manifest import parse_manifest
from mcc.orchestrate.services import COMPUTE_APP, PERSIST_APP, durable_topics, with_services
from mcc.persist import inspect_store
from tests.conftest import wait_for
from tests.orchestrate import shared_gpu_app

DURABLE_APP = "tests.orchestrate.durable_app:main"


def mission(systems: str, services: str = "") -> str:
    return f"mission: m\n{services}systems:\n{systems}"


def test_a_plain_mission_gets_no_service() -> None:
    plain = parse_manifest(mission("  a: {app: 'mcc.orchestrate.probe:main'}\n"))
    assert with_services(plain, gpus_available=True) is plain


def test_durable_topics_come_from_the_app_module() -> None:
    assert durable_topics(DURABLE_APP) == ("Checkpoint",)
    assert durable_topics("mcc.orchestrate.probe:main") == ()
    assert durable_topics("no.such.module:main") == ()


def test_a_durable_app_gets_the_persistence_service_first() -> None:
    m = parse_manifest(
        mission(
            f"  worker: {{app: '{DURABLE_APP}', after: [other]}}\n"
            "  other: {command: [sleep, '1']}\n",
            "services: {persist: {replicas: 2}}\n",
        )
    )
    out = with_services(m, gpus_available=False)
    assert list(out.systems)[0] == "persist"
    persist = out.systems["persist"]
    assert (persist.app, persist.replicas, persist.restart.policy) == (PERSIST_APP, 2, "always")
    assert persist.args == ["--topics", "Checkpoint"]  # what the mission declares durable
    assert out.systems["worker"].after == ["persist", "other"]
    assert out.systems["other"].after == []
    assert out.start_order().index("persist") < out.start_order().index("worker")
    assert "compute" not in out.systems


@pytest.mark.parametrize(("gpus", "device"), [(False, "none"), (True, "exclusive")])
def test_shared_gpu_systems_get_the_compute_service(gpus: bool, device: str) -> None:
    m = parse_manifest(
        mission(
            "  tracker: {command: [sleep, '1'], resources: {gpu: shared}}\n",
        )
        + "clusters:\n  mc: {command: [sleep, '1'], size: 2, resources: {gpu: shared}}\n"
    )
    out = with_services(m, gpus_available=gpus)
    compute = out.systems["compute"]
    assert compute.app == COMPUTE_APP and compute.resources.gpu == device
    assert out.systems["tracker"].after == ["compute"]
    assert out.clusters["mc"].after == ["compute"] and out.clusters["mc"].size == 2


def test_services_switched_on_and_off_by_hand() -> None:
    shared = "  t: {command: [sleep, '1'], resources: {gpu: shared}}\n"
    off = parse_manifest(mission(shared, "services: {compute: off}\n"))
    assert "compute" not in with_services(off, gpus_available=True).systems
    on = parse_manifest(mission("  a: {command: [sleep, '1']}\n", "services: {persist: on}\n"))
    assert "persist" in with_services(on, gpus_available=False).systems


def test_a_system_of_the_same_name_replaces_the_service() -> None:
    m = parse_manifest(
        mission(
            f"  persist: {{command: [my-store]}}\n  w: {{app: '{DURABLE_APP}'}}\n",
        )
    )
    out = with_services(m, gpus_available=False)
    assert out.systems["persist"].command == ["my-store"]
    assert out.systems["w"].after == []


@pytest.mark.parametrize(
    ("services", "message"),
    [
        ("{persist: maybe}", "services.persist.enabled: must be one of 'auto', 'on' or 'off'"),
        ("{persist: {replicas: 5}}", "services.persist.replicas: must be <= 3 (got 5)"),
        ("{compute: {gpu: shared}}", "services.compute.gpu: must be one of 'auto', 'exclusive'"),
        ("{persistence: on}", "services.persistence: unknown field; allowed here: persist"),
    ],
)
def test_bad_services_are_located(services: str, message: str) -> None:
    with pytest.raises(ManifestError) as err:
        parse_manifest(f"mission: m\nservices: {services}\n", source="m.yaml")
    assert f"m.yaml:2: {message}" in str(err.value)


def test_a_shared_gpu_system_computes_through_the_started_service(
    run_supervisor: Callable[..., Supervisor], tmp_path: Path
) -> None:
    sup = run_supervisor(
        "mission: gpu-share\ndomain: {domain}\nsystems:\n"
        "  user: {app: 'tests.orchestrate.shared_gpu_app:main', restart: never,"
        " resources: {cpus: 0.5, gpu: shared}}\n"
    )
    assert list(sup.systems) == ["compute", "user"]
    result = tmp_path / "run" / "hotspot.npy"
    wait_for(result.exists, 60.0, "the shared-GPU app's result")
    states = {i["id"]: i for i in sup.status()["instances"]}
    assert states["gpu-share/compute/0"]["state"] == "running"
    assert states["gpu-share/compute/0"]["device"] == "cpu"  # no GPU here: the service's CPU
    assert states["gpu-share/user/0"]["device"] == "remote:compute"
    temp, power = shared_gpu_app.inputs()
    expected = hotspot(temp, power, iterations=10)
    np.testing.assert_allclose(np.load(result), expected, rtol=1e-12)


def test_a_durable_app_stores_through_the_started_persistence_service(
    run_supervisor: Callable[..., Supervisor], tmp_path: Path
) -> None:
    sup = run_supervisor(
        f"mission: durable\ndomain: {{domain}}\nsystems:\n"
        f"  worker: {{app: '{DURABLE_APP}', restart: never, resources: {{cpus: 0.5}}}}\n"
    )
    assert list(sup.systems) == ["persist", "worker"]
    run = tmp_path / "run"
    wait_for((run / "stored").exists, 60.0, "the checkpoint acknowledged by the service")
    report = inspect_store(run / "persist.sqlite")
    checkpoint = {t.name: t for t in report.topics}["Checkpoint"]
    assert (checkpoint.instances, checkpoint.samples) == (1, 1)
