"""A secured mission on a Ray cluster of three container hosts, no host a single point of failure:
Redis and the Ray head (GCS fault tolerance, no instance) on h1 with the supervisor, workers on
h2 and h3. Every instance gets its own identity through Ray on the host it lands on (no shared
files, no keystore there); kill -9 of a worker host moves its instances to the other one with
their identity; kill -9 of the supervisor lets a standby on h2 adopt every instance, restarting
none. The figures (detection, recovery, instances restarted, standby commanding) are printed
(``pytest tests/lab/test_ray_lab.py -s``) and taken from the supervisors' JSON logs."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcc.lab import images
from mcc.lab.hosts import ContainerLab
from mcc.lab.raycluster import RAY_IMAGE, RayLab
from tests.lab.conftest import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

DOMAIN = 8
MISSION = "lab-ray"
HOME = "/var/lib/mcc"
HEALTH = "health: {timeout_s: 20, startup_s: 90}"  # longer than a move between hosts
MANIFEST = f"""
mission: {MISSION}
domain: {DOMAIN}
security: on
systems:
  truth:
    app: mcc.apps.radar:truth
    config: {{scenario: scenarios/small.yaml}}
    resources: {{cpus: 0.2}}
    {HEALTH}
  radar:
    app: mcc.apps.radar:radar
    config: {{scenario: scenarios/small.yaml}}
    resources: {{cpus: 0.2}}
    {HEALTH}
clusters:
  w:
    app: mcc.orchestrate.probe:idle
    size: 2
    placement: spread
    resources: {{cpus: 0.25}}
    {HEALTH}
"""
IDS = {f"{MISSION}/truth/0", f"{MISSION}/radar/0", f"{MISSION}/w/0", f"{MISSION}/w/1"}


@pytest.fixture
def ray_lab(built: list[images.Built]) -> Iterator[RayLab]:
    assert RAY_IMAGE in {item.image for item in built}
    with ContainerLab(3, name=f"r{os.getpid()}", image=RAY_IMAGE) as lab:
        started = time.monotonic()
        cluster = RayLab(lab, head="h1", workers=("h2", "h3")).start()
        took = time.monotonic() - started
        print(f"\nray on 3 container hosts (redis + head on h1) up in {took:.0f} s")
        yield cluster


def up(lab: ContainerLab, host: str, address: str) -> None:
    """``mcc up --backend ray`` on ``host``, logging JSON lines to ``$HOME/up.log``."""
    lab.exec(
        host,
        [
            "sh", "-c",
            f"exec mcc up {HOME}/mission.yaml --backend ray --address {address} --quiet "
            f"> {HOME}/up.log 2>&1",
        ],
        env={"MCC_LOG_FORMAT": "json", "MCC_AGENT_ORPHAN_S": "60"},
        detach=True,
    )  # fmt: skip


def log_times(lab: ContainerLab, host: str, text: str) -> list[float]:
    """When ``host``'s supervisor logged a line holding ``text`` (epoch seconds)."""
    found = []
    for line in lab.exec(host, ["cat", f"{HOME}/up.log"]).stdout.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and text in str(entry.get("message", "")):
            found.append(dt.datetime.fromisoformat(entry["time"]).timestamp())
    return found


def status(lab: ContainerLab) -> dict[str, Any] | None:
    """The mission's status as operator alice on h2 (a workstation's view)."""
    proc = lab.exec(
        "h2",
        [
            "mcc", "status", "--mission", MISSION, "--domain", str(DOMAIN), "--json",
            "--timeout", "10", "--as", "alice",
        ],
        check=False,
        timeout_s=60,
    )  # fmt: skip
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def running(st: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    if st is None:
        return {}
    return {i["id"]: i for i in st["instances"] if i["state"] == "running"}


def copy_tree(lab: ContainerLab, source: str, dest: str, tmp_path: Path) -> None:
    """``source`` on h1 to ``dest`` on h2 (the standby supervisor's host), owned by mcc."""
    local = tmp_path / Path(source).name
    lab.copy_out("h1", source, local)
    lab.exec("h2", ["mkdir", "-p", str(Path(dest).parent)])
    lab.copy_in("h2", local, dest)
    lab.exec("h2", ["chown", "-R", "10001", dest], user="root")


def test_a_secured_ray_mission_survives_a_worker_host_and_its_supervisor(
    ray_lab: RayLab, tmp_path: Path
) -> None:
    lab = ray_lab.lab
    manifest = tmp_path / "mission.yaml"
    manifest.write_text(MANIFEST)
    lab.copy_in("h1", manifest, f"{HOME}/mission.yaml")
    up(lab, "h1", ray_lab.address)
    keystore = f"{HOME}/keystores/{MISSION}"
    wait_for(
        "the mission's keystore on h1",
        lambda: (
            lab.exec("h1", ["test", "-f", f"{keystore}/governance.p7s"], check=False).returncode
            == 0
        ),
    )
    lab.exec(
        "h1",
        ["mcc", "security", "identity", keystore, f"{MISSION}/alice", "--domain", str(DOMAIN),
         "--operator"],
    )  # fmt: skip
    lab.exec(
        "h1",
        ["mcc", "security", "export", keystore, f"{MISSION}/alice", "--out",
         f"{HOME}/alice.mcc-identity"],
    )  # fmt: skip
    identity = tmp_path / "alice.mcc-identity"
    lab.copy_out("h1", f"{HOME}/alice.mcc-identity", identity)
    lab.copy_in("h2", identity, f"{HOME}/alice.mcc-identity")
    lab.exec("h2", ["mcc", "security", "import", f"{HOME}/alice.mcc-identity"])

    def all_running() -> dict[str, dict[str, Any]] | None:
        now = running(status(lab))
        return now if set(now) == IDS else None

    first = wait_for("the mission running on the Ray workers", all_running, 240)
    nodes = {i["node"] for i in first.values()}
    assert nodes <= {"h2", "h3"} and len(nodes) == 2, first  # the head runs none

    # Each instance has its own identity on its own host, delivered through Ray.
    assert lab.exec("h2", ["test", "-e", f"{HOME}/keystores"], check=False).returncode == 1
    on_h2 = next(i for i in first.values() if i["node"] == "h2")
    environ = lab.exec("h2", ["cat", f"/proc/{on_h2['pid']}/environ"]).stdout.split("\0")
    env = dict(item.partition("=")[::2] for item in environ if "=" in item)
    folder = env["MCC_IDENTITY_DIR"]
    assert folder.startswith(f"{HOME}/identities/"), folder
    assert "keystores" not in "\0".join(environ)
    listing = lab.exec("h2", ["stat", "-c", "%a %n", folder, *[f"{folder}/{n}" for n in (
        lab.exec("h2", ["ls", folder]).stdout.split())]]).stdout.splitlines()  # fmt: skip
    modes = dict(line.split(" ", 1)[::-1] for line in listing)
    assert modes.pop(folder) == "700" and modes and set(modes.values()) == {"600"}, listing

    # kill -9 of a worker host: its instances run on the other one, with their identity.
    lost = {k: v for k, v in first.items() if v["node"] == "h3"}
    assert lost
    killed = time.time()
    lab.kill("h3")

    def moved() -> dict[str, dict[str, Any]] | None:
        now = running(status(lab))
        back = {k: now[k] for k in lost if k in now and now[k]["node"] == "h2"}
        return now if len(back) == len(lost) and set(now) == IDS else None

    after = wait_for("h3's instances running on h2", moved, 120)
    log = lab.exec("h1", ["cat", f"{HOME}/up.log"]).stdout
    losses = log_times(lab, "h1", "Ray node h3 lost")
    moves = log_times(lab, "h1", "moved by Ray from h3")
    assert losses and moves, log
    detected = losses[0] - killed
    recovered = max(moves) - killed
    restarted = [k for k in IDS if after[k]["pid"] != first[k]["pid"]]
    assert sorted(restarted) == sorted(lost) and len(moves) == len(lost)
    print(
        f"\nworker host h3 killed (-9): lost detected in {detected:.2f} s, its {len(lost)} "
        f"instance(s) running on h2 in {recovered:.2f} s; "
        f"instances restarted: {len(restarted)} of {len(IDS)}"
    )

    # kill -9 of the active supervisor: a standby on h2 adopts, restarting none.
    copy_tree(lab, keystore, keystore, tmp_path)  # h2 becomes a supervisor host
    lab.copy_in("h2", manifest, f"{HOME}/mission.yaml")
    up(lab, "h2", ray_lab.address)
    st = wait_for(
        "the standby on h2",
        lambda: (
            (s := status(lab)) is not None
            and [x["role"] for x in s["supervisors"]] == ["active", "standby"]
            and s
        ),
        180,
    )
    active_pid = st["supervisors"][0]["pid"]
    before = running(st)
    killed = time.time()
    lab.exec("h1", ["sh", "-c", f"kill -9 {active_pid}"])  # the shell's kill: no procps
    adopted = wait_for(
        "the standby's adoption",
        lambda: log_times(lab, "h2", "adopted 4 running instances"),
        60,
    )
    taken_over = adopted[0] - killed
    st2 = wait_for(
        "the status from the new active supervisor",
        lambda: (s := status(lab)) is not None and s["supervisors"][0]["pid"] != active_pid and s,
        60,
    )
    now = running(st2)
    assert {k: v["pid"] for k, v in now.items()} == {k: v["pid"] for k, v in before.items()}
    assert all(i["restarts"] == before[i["id"]]["restarts"] for i in now.values())
    print(
        f"supervisor on h1 killed (-9): the standby on h2 commanding in {taken_over:.2f} s; "
        "instances restarted: 0"
    )

    # The Ray head restarted (every Ray process of h1 killed): the GCS reloads from Redis, the
    # instances on h2 run on, the supervisor on h2 commands throughout and then scales.
    started = time.time()
    ray_lab.restart_head()
    head_s = time.time() - started
    st3 = wait_for(
        "the mission after the head's restart",
        lambda: (s := status(lab)) is not None and set(running(s)) == IDS and s,
        120,
    )
    assert st3["supervisors"][0]["pid"] == st2["supervisors"][0]["pid"]
    scale = [
        "mcc", "scale", "w", "3", "--mission", MISSION, "--domain", str(DOMAIN), "--as", "alice",
    ]  # fmt: skip
    lab.exec("h2", scale, timeout_s=60)
    st4 = wait_for(
        "a third worker after the head's restart",
        lambda: (s := status(lab)) is not None and len(running(s)) == len(IDS) + 1 and s,
        120,
    )
    kept = {k: v["pid"] for k, v in running(st4).items() if k in IDS}
    assert kept == {k: v["pid"] for k, v in before.items()}
    print(
        f"ray head restarted (ray stop --force; ray start --head on the same Redis) in "
        f"{head_s:.1f} s: instances restarted: 0; the supervisor on h2 scaled w to 3 after it"
    )
    for host in ("h1", "h2"):
        log = lab.exec(host, ["cat", f"{HOME}/up.log"]).stdout
        assert "Traceback" not in log, log
