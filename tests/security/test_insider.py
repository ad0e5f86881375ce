"""A compromised instance inside a secured mission: an attacker holding a radar's own
credentials (certificate, key, permissions, copied from its host) against real radar, tracker
and supervisor processes.

- it cannot speak for another radar's sensor (ghost targets in the fire-control radar's name),
  nor for its own while the genuine radar is on the bus (a second writer of one identity);
- it cannot blind the picture with a flood of empty scans;
- its heartbeats naming the tracker or a supervisor are refused (no "running" stopped tracker,
  no claimed epoch).
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from mcc.apps.sources import SourceGuard, Speaker
from mcc.apps.tracker import TrackerAppConfig
from mcc.bus import Bus, Transport
from mcc.security import Identity, Keystore
from mcc.types import (
    AirPicture,
    DetectionBatch,
    Heartbeat,
    SystemState,
    TargetClass,
    TrackStatus,
)
from mcc.types.arrays import pack, packed_field
from tests.conftest import (
    REPO,
    mcc_up,
    mission_status,
    run_cli,
    running_ids,
    running_instances,
    wait_for,
)

SCENARIO = REPO / "scenarios" / "sam-toc.yaml"
MANIFEST = """\
mission: insider
domain: {domain}
security: on
systems:
  radar:
    app: mcc.apps.radar:radar
    config: {{scenario: {scenario}, truth_source: scenario}}
    replicas: 2
    resources: {{cpus: 0.2}}
  tracker:
    app: mcc.apps.tracker:tracker
    config: {{scenario: {scenario}}}
    resources: {{cpus: 0.3}}
"""
EVERYONE = {"insider/radar/0", "insider/radar/1", "insider/tracker/0"}
FIRE_CONTROL_SITE = (-1500.0, -1500.0, 15.0)  # scenarios/sam-toc.yaml, radar 1
#: Ghost targets (range m, azimuth rad, elevation rad) from the fire-control radar's site.
GHOSTS = [(12_000.0 + 900 * k, math.radians(200 + 12 * k), 0.12) for k in range(6)]
LIVE = (int(TrackStatus.TRACK_CONFIRMED.value), int(TrackStatus.TRACK_COASTING.value))


def _ghost_positions() -> np.ndarray:
    out = []
    for r, az, el in GHOSTS:
        horizontal = r * math.cos(el)
        out.append(
            (
                FIRE_CONTROL_SITE[0] + horizontal * math.sin(az),
                FIRE_CONTROL_SITE[1] + horizontal * math.cos(az),
                FIRE_CONTROL_SITE[2] + r * math.sin(el),
            )
        )
    return np.array(out)


def _batch(sensor: str, scan: int, ghosts: bool) -> DetectionBatch:
    rows = np.array(GHOSTS if ghosts else np.zeros((0, 3)), float).reshape(-1, 3)
    n = len(rows)
    xyz = _ghost_positions() if ghosts else np.zeros((0, 3))
    now = time.time_ns()
    return DetectionBatch(
        sensor_id=sensor,
        scan_id=scan,
        origin_ns=now,
        publish_ns=now,
        sensor_x_m=FIRE_CONTROL_SITE[0],
        sensor_y_m=FIRE_CONTROL_SITE[1],
        sensor_z_m=FIRE_CONTROL_SITE[2],
        count=n,
        range_m=pack(rows[:, 0], "<f8"),
        azimuth_rad=pack(rows[:, 1], "<f8"),
        elevation_rad=pack(rows[:, 2], "<f8"),
        radial_velocity_mps=pack(np.zeros(n), "<f8"),
        snr_db=pack(np.full(n, 20.0), "<f8"),
        x_m=pack(xyz[:, 0], "<f8"),
        y_m=pack(xyz[:, 1], "<f8"),
        z_m=pack(xyz[:, 2], "<f8"),
        iff=b"",
    )


def _as(identity: Identity) -> Transport:
    base = Transport.from_env()
    return dataclasses.replace(base, extra_xml=base.extra_xml + identity.security_xml())


@pytest.fixture
def env(tmp_path: Path, bus_env: dict[str, str]) -> dict[str, str]:
    return {**bus_env, "MCC_HOME": str(tmp_path / "home")}


@pytest.fixture
def up(env: dict[str, str], tmp_path: Path, domain_id: int) -> Iterator[subprocess.Popen[str]]:
    path = tmp_path / "insider.yaml"
    path.write_text(MANIFEST.format(domain=domain_id, scenario=SCENARIO))
    with mcc_up(path, env=env, log=tmp_path / "up.log") as proc:
        yield proc


def _live_tracks(pictures: Any) -> list[np.ndarray]:
    """Positions of the live tracks of each picture taken."""
    out = []
    for msg in pictures.take(256):
        states = np.asarray(packed_field(msg, "state")).reshape(-1, 6)
        status = np.asarray(packed_field(msg, "status"))
        out.append(states[np.isin(status, LIVE), :3])
    return out


def _near_ghosts(tracks: np.ndarray, within_m: float = 500.0) -> int:
    if len(tracks) == 0:
        return 0
    d = np.linalg.norm(tracks[:, None, :] - _ghost_positions()[None, :, :], axis=2)
    return int(np.count_nonzero(d.min(axis=1) < within_m))


@pytest.mark.slow
def test_a_stolen_radar_identity_cannot_fake_blind_or_impersonate(
    up: subprocess.Popen[str], env: dict[str, str], domain_id: int, tmp_path: Path
) -> None:
    wait_for(lambda: running_ids(env) == EVERYONE, 90, "every instance running")
    keystore = Keystore(tmp_path / "home" / "keystores" / "insider")
    console = keystore.existing("insider/console")
    with Bus(domain_id, transport=_as(console), name="watcher") as watcher:
        pictures = watcher.reader("AirPicture")
        # the clean picture: wait until the raid is tracked
        before: list[np.ndarray] = []

        def tracked() -> bool:
            before.extend(_live_tracks(pictures))
            return bool(before) and len(before[-1]) >= 4

        wait_for(tracked, 90, "the raid tracked")
        baseline = int(np.median([len(t) for t in before[-10:]]))
        assert all(_near_ghosts(t) == 0 for t in before), "a real track where the ghosts go"

        # The attacker: another process (another host, as far as the bus can tell).
        attacker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.security.test_insider",
                str(keystore.path),
                str(domain_id),
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        during: list[np.ndarray] = []
        try:
            while attacker.poll() is None:
                during.extend(_live_tracks(pictures))
                time.sleep(0.1)
        finally:
            if attacker.poll() is None:
                attacker.kill()
            out, _ = attacker.communicate()
        assert attacker.returncode == 0, f"the attacker failed:\n{out[-3000:]}"
        assert "attacked" in out, out[-3000:]
        after_end = time.monotonic() + 3.0
        while time.monotonic() < after_end:
            during.extend(_live_tracks(pictures))
            time.sleep(0.1)

    ghosts_seen = max((_near_ghosts(t) for t in during), default=0)
    counts = [len(t) for t in during]
    print(
        f"\nlive tracks: {baseline} before; during the attack min {min(counts)}, "
        f"median {int(np.median(counts))}; tracks on ghosts {ghosts_seen}"
    )
    assert ghosts_seen == 0, "a ghost target became a track"
    assert len(counts) > 10, "the tracker stopped publishing during the attack"
    assert np.median(counts) >= 0.7 * baseline and min(counts[5:]) >= 1, (
        f"the picture was blinded: {baseline} tracks before; during, median "
        f"{np.median(counts):g}, first pictures {counts[:20]}"
    )
    tracker_log = next((tmp_path / "home").rglob("tracker-0*.log")).read_text()
    assert "dropped: radar.0 speaks for 'fire-control'" in tracker_log, tracker_log[-3000:]
    assert "a second writer of radar.0 while the first is matched" in tracker_log
    up_log = (tmp_path / "up.log").read_text()
    assert "heartbeat refused (beat as tracker.0 from radar.0" in up_log, up_log[-3000:]
    assert "heartbeat refused (beat as supervisor from radar.0" in up_log
    status = mission_status(env)
    assert status is not None and running_instances(status) == EVERYONE
    assert all(s.get("epoch") != 77 for s in status["supervisors"]), status["supervisors"]


GHOST_MISSION = """\
mission: ghosts
domain: {domain}
security: on
systems:
  truth: {{app: "mcc.apps.radar:truth", config: {{scenario: {sc}}}, resources: {{cpus: 0.1}}}}
  search:
    app: mcc.apps.radar:radar
    config: {{scenario: {sc}, radar: search}}
    after: [truth]
    resources: {{cpus: 0.1}}
  fc:
    app: mcc.apps.radar:radar
    config: {{scenario: {sc}, radar: fire-control}}
    after: [truth]
    resources: {{cpus: 0.1}}
  tracker:
    app: mcc.apps.tracker:tracker
    config: {{scenario: {sc}}}
    resources: {{cpus: 0.2}}
  tewa:
    app: mcc.apps.tewa:tewa
    config: {{scenario: {sc}, weapons: {weapons}, mc_trials: 200}}
    resources: {{cpus: 0.2}}
  launcher:
    app: mcc.apps.launcher:launcher
    config: {{weapons: {weapons}}}
    resources: {{cpus: 0.1}}
"""
SEARCH_SITE = np.array([1000.0, -1500.0, 20.0])  # scenarios/sam-toc.yaml, radar 0
#: Ghost raid: six "missiles" 12 km out at 1 km altitude, inbound to the airbase at 250 m/s,
#: from the west and south-west where the fire-control radar does not look.
GHOST_START = np.array(
    [[12_000 * math.sin(b), 12_000 * math.cos(b), 1000.0] for b in np.radians(range(200, 260, 10))]
)
GHOST_VELOCITY = -250.0 * GHOST_START / np.linalg.norm(GHOST_START, axis=1, keepdims=True)
GHOST_VELOCITY[:, 2] = 0.0


def _ghosts_at(t_s: float) -> np.ndarray:
    return GHOST_START + GHOST_VELOCITY * t_s


def ghost_raid(keystore: Path, domain: int, t0: float, seconds: float) -> None:
    """The attacker's process: the search radar's stolen identity, its radar stopped, sends a
    ghost raid in the search radar's name at its scan rate (1 s)."""
    stolen = Keystore(keystore).existing("ghosts/search.0")
    with Bus(domain, transport=_as(stolen), name="attacker", source=stolen.source) as bus:
        batches = bus.writer("DetectionBatch")
        scan = 0
        while (t := time.time() - t0) < seconds:
            xyz = _ghosts_at(t)
            rel = xyz - SEARCH_SITE
            rng = np.linalg.norm(rel, axis=1)
            now = time.time_ns()
            batches.write(
                DetectionBatch(
                    sensor_id="search",
                    scan_id=scan,
                    origin_ns=now,
                    publish_ns=now,
                    count=len(xyz),
                    range_m=pack(rng, "<f8"),
                    azimuth_rad=pack(np.mod(np.arctan2(rel[:, 0], rel[:, 1]), 2 * np.pi), "<f8"),
                    elevation_rad=pack(np.arcsin(rel[:, 2] / rng), "<f8"),
                    radial_velocity_mps=pack(np.full(len(xyz), -250.0), "<f8"),
                    snr_db=pack(np.full(len(xyz), 20.0), "<f8"),
                    x_m=pack(xyz[:, 0], "<f8"),
                    y_m=pack(xyz[:, 1], "<f8"),
                    z_m=pack(xyz[:, 2], "<f8"),
                    iff=b"",
                )
            )
            scan += 1
            time.sleep(1.0)
    print(f"attacked: {scan} ghost scans")


#: Track ids the forged pictures use (the tracker numbers its own from 1).
FORGED_IDS = np.arange(900_001, 900_007, dtype=np.uint32)


def forged_pictures(keystore: Path, domain: int, t0: float, seconds: float) -> None:
    """The attacker's process: the tracker's stolen identity publishes air pictures of the
    ghost raid, confirmed, at 2 Hz, beside the genuine tracker's."""
    stolen = Keystore(keystore).existing("ghosts/tracker.0")
    with Bus(domain, transport=_as(stolen), name="attacker", source=stolen.source) as bus:
        pictures = bus.writer("AirPicture")
        cycle = 0
        while (t := time.time() - t0) < seconds:
            n, now = len(FORGED_IDS), time.time_ns()
            state = np.hstack([_ghosts_at(t), GHOST_VELOCITY])
            confirmed = int(TrackStatus.TRACK_CONFIRMED.value)
            missile = int(TargetClass.CLASS_CRUISE_MISSILE.value)
            pictures.write(
                AirPicture(
                    tracker_id="ghosts/tracker/0",
                    cycle=10_000 + cycle,
                    time_ns=now,
                    origin_ns=now,
                    publish_ns=now,
                    count=n,
                    track_id=pack(FORGED_IDS, "<u4"),
                    status=pack(np.full(n, confirmed), "u1"),
                    classification=pack(np.full(n, missile), "u1"),
                    quality=pack(np.ones(n), "<f8"),
                    state=pack(state, "<f8"),
                    covariance=pack(np.tile(np.eye(6) * 100.0, (n, 1, 1)), "<f8"),
                    identity=pack(np.zeros(n), "u1"),
                    iff=pack(np.zeros(n), "u1"),
                )
            )
            cycle += 1
            time.sleep(0.5)
    print(f"attacked: {cycle} forged pictures")


def _attacker(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.security.test_insider", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.slow
def test_ghosts_from_a_stolen_radar_identity_become_tracks_but_are_never_engaged(
    env: dict[str, str], tmp_path: Path, domain_id: int
) -> None:
    """The search radar is stopped and its identity stolen: the attacker is now its only
    writer, at its rate, in its name, and the tracker believes it (ghost tracks). TEWA does
    not engage them: the fire-control radar sees nothing there, and no engagement rests on
    one radar's word."""
    weapons = REPO / "scenarios" / "weapons-sam-toc.yaml"
    # sam-toc's radars and assets, two real missiles instead of the raid: the weapons are free
    # for the ghosts once those are engaged (with the raid they would be busy anyway)
    scenario = yaml.safe_load(SCENARIO.read_text())
    scenario["raids"] = []
    scenario["targets"] = [
        {
            "class": "cruise_missile",
            "position_m": [x, 9000.0, 50.0],
            "motion": {"model": "constant_velocity", "velocity_mps": [-0.03 * x, -250.0, 0.0]},
        }
        for x in (7000.0, 9000.0)
    ]
    scenario_path = tmp_path / "two-missiles.yaml"
    scenario_path.write_text(yaml.safe_dump(scenario))
    path = tmp_path / "ghosts.yaml"
    path.write_text(GHOST_MISSION.format(domain=domain_id, sc=scenario_path, weapons=weapons))
    everyone = {f"ghosts/{s}/0" for s in ("truth", "search", "fc", "tracker", "tewa", "launcher")}
    with mcc_up(path, env=env, log=tmp_path / "up.log"):
        wait_for(
            lambda: running_ids(env) == everyone,
            120,
            "every instance running",
        )
        keystore = Keystore(tmp_path / "home" / "keystores" / "ghosts")
        console = keystore.existing("ghosts/console")
        with Bus(domain_id, transport=_as(console), name="watcher") as watcher:
            pictures, orders = watcher.reader("AirPicture"), watcher.reader("EngagementOrder")
            engaged: set[int] = set()

            def engaging() -> bool:
                engaged.update(o.track_id for o in orders.take(256))
                pictures.take(256)
                return bool(engaged)

            wait_for(engaging, 60, "the real raid engaged (two radars see it)")
            run_cli(["stop", "search"], env=env)
            wait_for(
                lambda: "ghosts/search/0" not in running_ids(env),
                30,
                "search off",
            )
            t0 = time.time()
            attacker = _attacker(
                "ghosts", str(keystore.path), str(domain_id), str(t0), "20", env=env
            )
            ghost_tracks: set[int] = set()
            ordered: set[int] = set()
            try:
                while attacker.poll() is None:
                    for msg in pictures.take(256):
                        states = np.asarray(packed_field(msg, "state")).reshape(-1, 6)
                        status = np.asarray(packed_field(msg, "status"))
                        ids = np.asarray(packed_field(msg, "track_id"))
                        ghosts = _ghosts_at(msg.time_ns / 1e9 - t0)
                        d = np.linalg.norm(states[:, None, :3] - ghosts[None], axis=2)
                        near = (d.min(axis=1) < 500.0) & np.isin(status, LIVE)
                        ghost_tracks.update(int(i) for i in ids[near])
                    ordered.update(o.track_id for o in orders.take(256) if o.track_id)
                    time.sleep(0.1)
            finally:
                if attacker.poll() is None:
                    attacker.kill()
                out, _ = attacker.communicate()
            ordered.update(o.track_id for o in orders.take(256))
            # The tracker's stolen identity: forged pictures of the same raid, confirmed.
            until = str(time.time() - t0 + 8)
            forger = _attacker("forge", str(keystore.path), str(domain_id), str(t0), until, env=env)
            try:
                deadline = time.monotonic() + 60
                while forger.poll() is None and time.monotonic() < deadline:
                    ordered.update(o.track_id for o in orders.take(256))
                    time.sleep(0.1)  # polling the orders while it runs, not synchronisation
            finally:
                if forger.poll() is None:  # never left behind
                    forger.kill()
                forged_out, _ = forger.communicate()
            ordered.update(o.track_id for o in orders.take(256))
    assert forger.returncode == 0 and "attacked" in forged_out, forged_out[-3000:]
    assert not set(FORGED_IDS.tolist()) & ordered, "a forged track was engaged"
    assert attacker.returncode == 0 and "attacked" in out, out[-3000:]
    print(f"\nghost tracks {sorted(ghost_tracks)}; tracks ordered on {sorted(ordered)}")
    assert len(ghost_tracks) >= 3, "the ghosts never became tracks: the test proves nothing"
    assert not ghost_tracks & ordered, f"ghost tracks engaged: {sorted(ghost_tracks & ordered)}"
    tewa_log = next((tmp_path / "home").rglob("tewa-0.log")).read_text()
    assert "seen by fewer than 2 radars: not engaged" in tewa_log


@pytest.mark.slow
def test_the_sam_toc_raid_goes_as_well_with_a_stolen_radar_identity_attacking(
    env: dict[str, str], tmp_path: Path, domain_id: int
) -> None:
    """`mcc demo` (the secured SAM TOC mission, two radars, TEWA, three launchers) with an
    attacker holding the search radar's credentials for the whole raid: 500 empty scans per
    second in its name, ghosts in the fire-control radar's, heartbeats as others. Measured
    here, clean runs end with 20 orders, 14 kills, 36-37 leakers; before TEWA's witnesses were
    held to the radars' rules this attack left 3 orders, 3 kills, 48 leakers."""
    home = Path(env["MCC_HOME"])
    demo = subprocess.Popen(
        [sys.executable, "-m", "mcc.cli", "demo", "--no-console", "--duration", "70",
         "--domain", str(domain_id)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        cert = home / "keystores" / "sam-toc" / "identities" / "sam-toc" / "radar.0" / "cert.pem"
        wait_for(cert.exists, 60, "the radars' identities")
        # no wait: the attacker is on the bus before the radars' first scans reach the tracker
        # and before TEWA starts (at the engagement phase), the case a "first writer wins"
        # rule would lose
        attacker = _attacker(str(cert.parents[3]), str(domain_id), "55", "sam-toc", env=env)
        try:
            out, _ = attacker.communicate(timeout=120)
        finally:
            if attacker.poll() is None:  # never left behind, even when it hung
                attacker.kill()
                attacker.communicate()
        assert attacker.returncode == 0 and "attacked" in out, out[-3000:]
        shown, _ = demo.communicate(timeout=120)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.communicate()
    assert demo.returncode == 0, shown[-3000:]
    summary = json.loads(next(home.rglob("runs/*/summary.json")).read_text())
    result = {k: summary.get(k) for k in ("orders", "kills", "leakers", "friends_engaged")}
    print(f"\nSAM TOC with a stolen radar identity attacking: {result}")
    if summary["friends_engaged"]:  # what a red CI needs to say why: the orders and the logs
        logs = sorted(home.rglob("runs/*/logs/*.log"))
        said = [
            f"{log.name}: {line}"
            for log in logs
            for line in log.read_text(errors="replace").splitlines()
            if "fratricide" in line or "friend" in line.lower()
        ]
        result["friend_orders"] = summary.get("friend_orders")
        result["friends_killed"] = summary.get("friends_killed")
        result["logs"] = said[-40:]
    assert summary["friends_engaged"] == 0, json.dumps(result, indent=1)
    assert summary["kills"] >= 10 and summary["leakers"] <= 42, result
    tracker_log = next(home.rglob("runs/*/logs/tracker-0.log")).read_text()
    assert "dropped rate" in tracker_log and "dropped impersonation" in tracker_log


def attack(keystore: Path, domain: int, seconds: float = 12.0, mission: str = "insider") -> None:
    """The attacker's process: radar.0's stolen credentials, 500 empty scans per second as
    its own radar, ghost targets in its own and in the fire-control radar's name, heartbeats
    as the tracker and as a supervisor claiming epoch 77. Also run by hand against a running
    `mcc demo` (docs/security.md): ``python -m tests.security.test_insider KEYSTORE DOMAIN
    SECONDS MISSION``."""
    stolen = Keystore(keystore).existing(f"{mission}/radar.0")
    with Bus(domain, transport=_as(stolen), name="attacker", source=stolen.source) as bus:
        batches, beats = bus.writer("DetectionBatch"), bus.writer("Heartbeat")
        scan, end, next_ghost = 0, time.monotonic() + seconds, 0.0
        while time.monotonic() < end:
            scan += 1
            batches.write(_batch("search", scan, ghosts=False))  # blinding: empty scans
            if time.monotonic() >= next_ghost:
                next_ghost = time.monotonic() + 0.25
                batches.write(_batch("fire-control", scan, ghosts=True))  # another's sensor
                batches.write(_batch("search", scan, ghosts=True))  # its own, as 2nd writer
                for system_id, message in (
                    (f"{mission}/tracker/0", ""),
                    (f"{mission}/supervisor/999", "active epoch 77"),
                ):
                    beats.write(
                        Heartbeat(
                            system_id=system_id,
                            host="attacker",
                            pid=999,
                            state=SystemState.SYSTEM_RUNNING,
                            message=message,
                            time_ns=time.time_ns(),
                        )
                    )
            time.sleep(1 / 500)
    print(f"attacked: {scan} scans")


# -- the rules, without a bus ------------------------------------------------------------------


def _sources(**overrides: Any) -> SourceGuard:
    options = {
        "min_fraction": TrackerAppConfig().min_scan_fraction,
        "default_period_s": 0.1,
        "max_sources": 8,
        "known_only": True,
        **overrides,
    }
    return SourceGuard({"search": 1.0, "fire-control": 0.5}, **options)


def _speaker(source: str, handle: int, matched: bool = True) -> Speaker:
    return Speaker(source, handle, lambda: matched)


def _try(sources: SourceGuard, sensor: str, at_s: float, who: Speaker, origin_s: float = 0) -> str:
    """Offer a batch of ``sensor`` received at ``at_s`` (scanned then, or at ``origin_s``)."""
    origin_ns = int((origin_s or at_s) * 1e9)
    batch = dataclasses.replace(_batch(sensor, 1, ghosts=False), origin_ns=origin_ns)
    kind, _ = sources.refusal(batch, int(at_s * 1e9), who)
    if not kind:
        sources.accept(batch, int(at_s * 1e9), who)
    return kind


def test_a_source_speaks_for_one_sensor_at_its_rate_through_one_writer() -> None:
    s = _sources()
    radar0, radar1 = _speaker("radar.0", 1), _speaker("radar.1", 2)
    assert _try(s, "search", 9.0, radar0) == "unproven"  # a new writer's first scan
    assert _try(s, "search", 10.0, radar0) == ""  # its second, a scan period later
    assert _try(s, "fire-control", 9.5, radar1) == "unproven"
    assert _try(s, "fire-control", 10.0, radar1) == ""
    assert _try(s, "fire-control", 10.6, radar0) == "impersonation"  # another's sensor
    assert _try(s, "search", 10.6, radar1) == "impersonation"
    assert _try(s, "ghost", 10.6, _speaker("radar.7", 3)) == "unknown"  # not in the scenario
    assert _try(s, "search", 10.3, radar0) == "rate"  # 0.3 s < half of its 1 s scan
    assert _try(s, "search", 11.5, radar0) == ""
    assert _try(s, "search", 12.2, radar0, origin_s=11.4) == "replay"  # not newer than its last
    # a second participant with radar.0's identity, while the first is matched: refused
    assert _try(s, "search", 13.0, _speaker("radar.0", 9)) == "second writer"
    # the first gone (a restart): the new writer takes over
    s.speaking["radar.0"] = _speaker("radar.0", 1, matched=False)
    assert _try(s, "search", 14.0, _speaker("radar.0", 9)) == ""


def test_a_flood_never_speaks_for_a_radar_even_when_heard_first() -> None:
    """A reader that starts with the stolen identity already flooding (TEWA, at the
    engagement phase) takes the genuine radar, which keeps its scan period."""
    s = _sources()
    flood, genuine = _speaker("radar.0", 5), _speaker("radar.0", 6)
    outcomes = {"flood": set(), "genuine": set()}
    for k in range(300):  # 3 s at 100 scans per second, the radar every second
        t = 100.0 + k * 0.01
        outcomes["flood"].add(_try(s, "search", t, flood))
        if k % 100 == 50:
            outcomes["genuine"].add(_try(s, "search", t, genuine))
    assert "" not in outcomes["flood"] and "rate" in outcomes["flood"]
    assert outcomes["genuine"] == {"unproven", ""}
    assert s.speaking["radar.0"].handle == 6


def test_a_restarted_radar_takes_over_from_a_copy_of_its_old_identity() -> None:
    """A stolen identity heard first keeps the radar out while it keeps the rate; the radar's
    restart issues a newer generation, which takes over at once."""
    s = _sources()
    stolen, genuine = _speaker("radar.0", 5), _speaker("radar.0", 6)
    assert [_try(s, "search", t, stolen) for t in (1.0, 2.0)] == ["unproven", ""]
    assert _try(s, "search", 2.5, genuine) == "second writer"  # same generation: refused
    restarted = Speaker("radar.0", 7, lambda: True, generation=2)
    assert [_try(s, "search", t, restarted) for t in (3.0, 4.0)] == ["unproven", ""]
    assert s.speaking["radar.0"].handle == 7
    old = Speaker("radar.0", 5, lambda: True, generation=1)
    assert _try(s, "search", 5.0, old) == "second writer"  # the copy cannot take it back


def test_a_reader_stops_hearing_an_identity_once_its_successor_speaks(domain_id: int) -> None:
    """Each start of an instance writes as a newer generation of its principal
    (``src/radar.0#GENERATION``): once a reader heard the new one, the old one's samples
    have no source (`Reader.source_of` is None; counted), whatever the old one keeps writing."""
    transport = Transport.loopback(f"gen-{domain_id}")
    with (
        Bus(domain_id, transport=transport, name="reader") as bus,
        Bus(domain_id, transport=transport, name="old", source="radar.0#100") as old_bus,
        Bus(domain_id, transport=transport, name="new", source="radar.0#200") as new_bus,
    ):
        reader = bus.reader("DetectionBatch")
        old, new = old_bus.writer("DetectionBatch"), new_bus.writer("DetectionBatch")
        for writer in (old, new):
            writer.wait_for_readers(1, timeout_s=10)

        def heard(writer: Any, sensor: str) -> list[str | None]:
            writer.write(_batch(sensor, 1, ghosts=False))
            got = reader.take_until(1, timeout_s=5)
            assert got, f"{sensor}: nothing arrived"
            return [reader.source_of(sample) for sample in got]

        assert heard(old, "before") == ["radar.0"]  # the newest heard so far
        assert heard(new, "successor") == ["radar.0"]
        assert heard(old, "after") == [None] and reader.stale_sources == 1
        new.write(_batch("last", 1, ghosts=False))
        last = reader.take_until(1, timeout_s=5)
        assert [reader.source_generation(sample) for sample in last] == [200]


def test_unknown_sensors_are_bound_too_when_the_scenario_is_silent() -> None:
    s = _sources(known_only=False, max_sources=2)
    a, b, c = _speaker("a.0", 1), _speaker("b.0", 2), _speaker("c.0", 3)
    assert [_try(s, "r1", t, a) for t in (0.5, 1.0)] == ["unproven", ""]
    assert _try(s, "r1", 1.0, b) == "impersonation"
    assert [_try(s, "r2", t, b) for t in (1.5, 2.0)] == ["unproven", ""]
    assert _try(s, "r3", 2.0, c) == "sensors"  # max_sources
    assert _try(s, "r1", 1.02, a) == "rate"  # under half the default 0.1 s


if __name__ == "__main__":
    if sys.argv[1] in ("ghosts", "forge"):
        run = ghost_raid if sys.argv[1] == "ghosts" else forged_pictures
        run(Path(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]))
    else:
        seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 12.0
        attack(Path(sys.argv[1]), int(sys.argv[2]), seconds, *sys.argv[4:5])
