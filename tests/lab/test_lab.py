"""The container lab (mcc.lab) and the images of deploy/ (``make images``): three container hosts,
each with its own filesystem, hostname, address and ``$MCC_HOME``, MCC installed in the image from
the wheels; a secured mission runs on h1, and h2 and h3 (h3 behind a netem delay) reach it over
DDS as an operator whose identity was exported on h1 and imported on them (where the kernel has
no netem, the lab says so). Bad arguments, a
missing image or podman fail with the reason and leave nothing behind; stale labs are removed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcc.lab import hosts, images
from mcc.lab.hosts import ContainerLab
from mcc.lab.podman import PodmanError, podman
from mcc.netlab import netem_supported
from tests.conftest import REPO
from tests.lab.conftest import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

DOMAIN = 7  # each lab is a network of its own
MISSION = "lab-mission"
MANIFEST = f"""
mission: {MISSION}
domain: {DOMAIN}
security: on
systems:
  truth:
    app: mcc.apps.radar:truth
    config: {{scenario: scenarios/small.yaml}}
    resources: {{cpus: 0.2}}
  radar:
    app: mcc.apps.radar:radar
    config: {{scenario: scenarios/small.yaml}}
    resources: {{cpus: 0.2}}
  tracker:
    app: mcc.apps.tracker:tracker
    config: {{scenario: scenarios/small.yaml}}
    resources: {{cpus: 0.5}}
"""


@pytest.fixture
def lab(built: list[images.Built]) -> Iterator[ContainerLab]:
    with ContainerLab(3, name=f"t{os.getpid()}") as made:
        yield made
    assert f"t{os.getpid()}" not in hosts.labs()


def test_the_images_run_as_non_root_from_the_wheels(built: list[images.Built]) -> None:
    names = {item.image for item in built}
    assert names == {images.BASE, *images.IMAGES}
    proc = podman(
        [
            "run",
            "--rm",
            "--entrypoint",
            "sh",
            hosts.CORE_IMAGE,
            "-c",
            "id -u; echo $MCC_HOME; python -c 'import mcc.bus, cyclonedds.__library__ as l; "
            "print(l.library_path)'; env | grep -c CYCLONEDDS_HOME || true",
        ]
    )
    uid, home, library, homes = proc.stdout.split()
    assert uid == "10001" and home == "/var/lib/mcc"
    assert library.startswith("/opt/mcc/lib/python3.11/site-packages/cyclonedds/_cyclone/lib/")
    assert homes == "0"


def test_a_secured_mission_across_three_container_hosts(lab: ContainerLab, tmp_path: Path) -> None:
    addresses = {h.address for h in lab.hosts.values()}
    assert len(addresses) == 3
    for name in ("h1", "h2", "h3"):
        assert lab.exec(name, ["hostname"]).stdout.strip() == name
    manifest = tmp_path / "mission.yaml"
    manifest.write_text(MANIFEST)
    lab.copy_in("h1", manifest, "/var/lib/mcc/mission.yaml")
    lab.exec(
        "h1",
        ["sh", "-c", "exec mcc up /var/lib/mcc/mission.yaml --quiet > /var/lib/mcc/up.log 2>&1"],
        detach=True,
    )
    keystore = f"/var/lib/mcc/keystores/{MISSION}"
    wait_for(
        "the mission's keystore on h1",
        lambda: (
            lab.exec("h1", ["test", "-f", f"{keystore}/governance.p7s"], check=False).returncode
            == 0
        ),
    )
    lab.exec(
        "h1",
        [
            "mcc",
            "security",
            "identity",
            keystore,
            f"{MISSION}/alice",
            "--domain",
            str(DOMAIN),
            "--operator",
        ],
    )
    lab.exec(
        "h1",
        [
            "mcc",
            "security",
            "export",
            keystore,
            f"{MISSION}/alice",
            "--out",
            "/var/lib/mcc/alice.mcc-identity",
        ],
    )
    identity = tmp_path / "alice.mcc-identity"
    lab.copy_out("h1", "/var/lib/mcc/alice.mcc-identity", identity)
    if netem_supported():
        lab.netem("h3", delay_ms=40)  # h3's packets take 40 ms more
    else:  # this sandbox's kernel: the reason and the fix
        with pytest.raises(PodmanError, match="no netem queueing discipline: `modprobe sch_netem`"):
            lab.netem("h3", delay_ms=40)
    for name in ("h2", "h3"):
        # its own filesystem: nothing of h1's MCC_HOME is there
        assert lab.exec(name, ["test", "-e", keystore], check=False).returncode == 1
        lab.copy_in(name, identity, "/var/lib/mcc/alice.mcc-identity")
        lab.exec(name, ["mcc", "security", "import", "/var/lib/mcc/alice.mcc-identity"])

        def running(name: str = name) -> dict[str, str] | None:
            proc = lab.exec(
                name,
                [
                    "mcc",
                    "status",
                    "--mission",
                    MISSION,
                    "--domain",
                    str(DOMAIN),
                    "--json",
                    "--timeout",
                    "10",
                    "--as",
                    "alice",
                ],
                check=False,
                timeout_s=60,
            )
            if proc.returncode != 0:
                return None
            states = {i["id"]: i["state"] for i in json.loads(proc.stdout)["instances"]}
            return states if states and set(states.values()) == {"running"} else None

        states = wait_for(f"the mission's instances running, seen from {name}", running, 120)
        assert set(states) == {f"{MISSION}/{s}/0" for s in ("truth", "radar", "tracker")}
    log = lab.exec("h1", ["cat", "/var/lib/mcc/up.log"]).stdout
    assert "Traceback" not in log, log


def test_bad_arguments_and_a_missing_image_leave_nothing_behind(
    built: list[images.Built], tmp_path: Path
) -> None:
    with pytest.raises(PodmanError, match="no wheels of `make wheels`.*run `make wheels` first"):
        images.build_images(tmp_path, REPO)
    for bad in (0, 33, "3"):
        with pytest.raises(PodmanError, match="hosts: .* is invalid"):
            ContainerLab(bad)  # type: ignore[arg-type]
    with pytest.raises(PodmanError, match="name: 'Bad_Name' is invalid"):
        ContainerLab(1, name="Bad_Name")
    name = f"m{os.getpid()}"
    with pytest.raises(PodmanError, match="is not built: run `make images`"):
        ContainerLab(2, name=name, image="localhost/mcc-nothing:latest").up()
    assert name not in hosts.labs()
    cli = [sys.executable, "-m", "mcc.lab"]
    proc = subprocess.run([*cli, "up", "0"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "1 to 32 hosts (got 0)" in proc.stderr, proc.stderr
    proc = subprocess.run(
        [*cli, "list"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": "/nonexistent"},
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "podman and runc not installed: run `make system`" in proc.stderr, proc.stderr


def test_a_lab_whose_owner_died_is_found_and_removed(built: list[images.Built]) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    name = f"s{os.getpid()}"
    lab = ContainerLab(1, name=name, owner=f"{dead.pid}@{os.uname().nodename}")
    lab.up()
    assert name in hosts.labs()
    assert name in hosts.cleanup_stale()
    assert name not in hosts.labs()
    assert podman(["network", "exists", lab.network], check=False).returncode != 0
