"""A mission across three emulated hosts (``kind: netns`` nodes of the local backend): systems
talk across hosts by multicast discovery; a partitioned host's work comes back on a reachable
one; healing leaves one picture without duplicate tracks; `mcc down` removes the hosts."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mcc.bus import Bus, Transport
from mcc.orchestrate.client import ControlClient
from mcc.types import AirPicture
from mcc.types.arrays import packed_field
from tests.conftest import mcc_up, mission_transport, run_cli
from tests.conftest import wait_for as wait_until
from tests.netns.conftest import lab_leftovers, require_netns

MANIFEST = """
mission: {name}
domain: {domain}
nodes:
  - {{name: h1, kind: netns, cpus: 0.5}}
  - {{name: h2, kind: netns, cpus: 1}}
  - {{name: h3, kind: netns, cpus: 1}}
systems:
  truth:
    app: mcc.apps.radar:truth
    config: {{scenario: scenarios/small.yaml}}
    node: h1
    resources: {{cpus: 0.2}}
    restart: always
  radar:
    app: mcc.apps.radar:radar
    config: {{scenario: scenarios/small.yaml}}
    node: h1
    resources: {{cpus: 0.2}}
    restart: always
  tracker:
    app: mcc.apps.tracker:tracker
    config: {{scenario: scenarios/small.yaml}}
    resources: {{cpus: 0.6}}
    restart: always
"""


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 45.0) -> Any:
    return wait_until(check, timeout_s, what)


@pytest.fixture
def mission(tmp_path: Path, bus_env: dict[str, str], domain_id: int) -> Iterator[dict[str, Any]]:
    """`mcc up` of the three-host mission; SIGTERM (then SIGKILL) after the test."""
    require_netns()
    name = f"netns-{domain_id}"
    manifest = tmp_path / "mission.yaml"
    manifest.write_text(MANIFEST.format(name=name, domain=domain_id))
    env = {**bus_env, "MCC_HOME": str(tmp_path / "home")}
    lab_file = tmp_path / "home" / "netlab" / f"{name}.json"
    log = tmp_path / "up.log"
    with mcc_up(manifest, env=env, log=log, stop_signal=signal.SIGTERM, stop_timeout_s=30) as up:
        wait_for("network lab", lambda: lab_file.exists() or up.poll() is not None)
        assert up.poll() is None, log.read_text()
        lab = json.loads(lab_file.read_text())
        # clients take the mission's transport (on the lab bridge) from its registry record
        client_env = {k: v for k, v in env.items() if k not in ("MCC_TRANSPORT", "CYCLONEDDS_URI")}
        yield {"name": name, "lab": lab, "env": client_env, "up": up, "log": log}
    token = lab["bridge"].removeprefix("mcc-").removesuffix("b")
    assert lab_leftovers(token) == []


def pictures(bus: Bus, reader: Any) -> list[AirPicture]:
    return list(reader.take_wait(16, timeout_s=0.5))


def test_mission_across_three_hosts_survives_a_partition(
    mission: dict[str, Any], domain_id: int, bus_env: dict[str, str]
) -> None:
    lab, name, env = mission["lab"], mission["name"], mission["env"]
    transport = mission_transport(
        Path(env["MCC_HOME"]),
        name,
        domain_id,
        publish=("Command",),
        base=Transport(interface=lab["bridge"], discovery_tag=bus_env["MCC_DISCOVERY_TAG"]),
    )
    with Bus(domain_id, transport=transport, name="netns test") as bus:
        client = ControlClient(bus, name, timeout_s=10)
        air = bus.reader("AirPicture")

        def nodes() -> dict[str, tuple[str, str, int]]:
            status = client.status()
            return {
                i["id"].split("/", 1)[1]: (i["state"], i["node"], i["restarts"])
                for i in status["instances"]
            }

        placed = wait_for(
            "systems running on their hosts",
            lambda: (n := nodes()) and all(s == "running" for s, _, _ in n.values()) and n,
        )
        assert placed["truth/0"][1] == placed["radar/0"][1] == "h1"
        assert placed["tracker/0"][1] == "h2"  # h1 has no room left for it
        # detections from h1 become tracks on h2: the three targets of the scenario
        wait_for("a picture of 3 tracks", lambda: any(p.count == 3 for p in pictures(bus, air)))

        run_cli(["chaos", "partition", "h2", "--mission", name], env=env)
        moved = wait_for(
            "the tracker restarted off the partitioned host",
            lambda: (
                (n := nodes())["tracker/0"][0] == "running"
                and n["tracker/0"][1] != "h2"
                and n["tracker/0"]
            ),
        )
        assert moved[2] >= 1  # killed for silence, restarted
        run_cli(["chaos", "heal", "h2", "--mission", name], env=env)
        # one picture, no duplicates: 3 tracks, each its own target
        latest = wait_for(
            "3 tracks after healing",
            lambda: next((p for p in pictures(bus, air) if p.count == 3), None),
        )
        state = packed_field(latest, "state").reshape(-1, 6)
        gaps = np.linalg.norm(state[:, None, :3] - state[None, :, :3], axis=2)
        assert gaps[np.triu_indices(3, 1)].min() > 300.0
        for later in pictures(bus, air):
            assert later.count <= 3

        run_cli(["chaos", "kill", "tracker/0", "--mission", name], env=env)
        wait_for(
            "the killed tracker back",
            lambda: (t := nodes()["tracker/0"])[0] == "running" and t[2] > moved[2],
        )
        client.close()
    # down after leaving the bus: `mcc down` removes the bridge this process was on
    run_cli(["down", "--mission", name], env=env, timeout_s=60)
    assert mission["up"].wait(30) == 0, Path(mission["log"]).read_text()[-3000:]
