"""MCC and an eProsima Fast DDS 2.x peer (interop/fastdds) on one bus, both ways.

The matrix (docs/interop.md): every topic a foreign member of a mission uses, MCC → Fast DDS and
Fast DDS → MCC, in XCDR1 (what Fast DDS 2.x writes and reads), each sample compared field by
field with the pattern of ``mcc.types.foreign`` (C++ fill and JSON generated from the same IDL);
XCDR2 towards Fast DDS is refused at match time, and says so; malformed foreign samples are
counted and dropped. The apps: a Fast DDS radar fused by the MCC tracker into confirmed tracks,
a Fast DDS console answered by the supervisor.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cyclonedds.core import Policy, Qos
from cyclonedds.pub import DataWriter

from mcc import types
from mcc.bus import Bus
from mcc.bus.codec import flat_codec
from mcc.bus.qos import default_library, policy_name
from mcc.bus.topics import TOPICS
from mcc.bus.transport import Transport
from mcc.types import foreign
from tests.conftest import REPO, mcc_up, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.tool]

MODULE = foreign.load_module()


def _fastdds_topics() -> list[str]:
    """Topics whose writers write XCDR1 and whose durability Fast DDS has without a service."""
    library = default_library()
    out = []
    for name, spec in sorted(TOPICS.items()):
        writer = library.writer_qos(spec.profile)
        durable = writer[Policy.Durability] in (
            Policy.Durability.Transient,
            Policy.Durability.Persistent,
        )
        if writer[Policy.DataRepresentation].use_cdrv0_representation and not durable:
            out.append(name)
    return out


MATRIX_TOPICS = _fastdds_topics()


def test_the_matrix_covers_the_topics_of_a_toc() -> None:
    toc = {"DetectionBatch", "Truth", "AirPicture", "Track", "Threat", "EngagementOrder"}
    toc |= {"EngagementOutcome", "WeaponStatus", "Heartbeat", "Command", "CommandReply"}
    toc |= {"MissionStatus", "PerfSample"}
    assert toc <= set(MATRIX_TOPICS), sorted(toc - set(MATRIX_TOPICS))


def _peer(peer: Path, *args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(peer), *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _finish(proc: subprocess.Popen[str], timeout_s: float) -> str:
    """The peer's output once it exits (killed after ``timeout_s``)."""
    try:
        return proc.communicate(timeout=timeout_s)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()[0] + f"\n(killed after {timeout_s} s)"


def _stop(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return _finish(proc, 10)


def _json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _read_by_fastdds(
    peer: Path, env: dict[str, str], topic: str, sample: Any, *, validate: bool
) -> dict[str, Any]:
    """``sample`` written by MCC on ``topic`` until the Fast DDS peer's ``dump`` reads it:
    the JSON line it prints."""
    spec = TOPICS[topic]
    dump = _peer(
        peer,
        *("dump", "--type", spec.type.__name__, "--topic", topic, "--profile", spec.profile),
        *("--count", "1", "--timeout-s", "30"),
        env=env,
    )
    with Bus(int(env["MCC_DOMAIN"]), transport=Transport.from_env(env)) as bus:
        writer = bus.writer(topic, validate=validate)
        deadline = time.monotonic() + 35
        while dump.poll() is None and time.monotonic() < deadline:
            writer.write(sample)
            time.sleep(0.1)
    out = _finish(dump, 10)
    assert dump.returncode == 0, out[-3000:]
    (line,) = _json_lines(out)
    assert line["topic"] == topic
    return line


@pytest.mark.parametrize("topic", MATRIX_TOPICS)
def test_mcc_to_fastdds_xcdr1(topic: str, fastdds_peer: Path, foreign_env: dict[str, str]) -> None:
    spec = TOPICS[topic]
    expected = foreign.pattern_sample(MODULE, spec.type.__name__, 3)
    sample = foreign.from_plain(spec.type, expected)
    line = _read_by_fastdds(fastdds_peer, foreign_env, topic, sample, validate=False)
    assert line["sample"] == expected  # every field, nested ones included


@pytest.mark.parametrize("topic", MATRIX_TOPICS)
def test_fastdds_to_mcc_xcdr1(topic: str, fastdds_peer: Path, foreign_env: dict[str, str]) -> None:
    spec = TOPICS[topic]
    type_name = spec.type.__name__
    codec = flat_codec(spec.type)
    decode = codec.decode if codec is not None else spec.type.deserialize
    with Bus(int(foreign_env["MCC_DOMAIN"]), transport=Transport.from_env(foreign_env)) as bus:
        reader = bus.reader(topic, history=False)
        publisher = _peer(
            fastdds_peer,
            *("publish", "--type", type_name, "--topic", topic, "--profile", spec.profile),
            *("--seed", "5", "--count", "300", "--period-s", "0.1"),
            env=foreign_env,
        )
        try:
            data: bytes | None = None
            deadline = time.monotonic() + 30
            while data is None and time.monotonic() < deadline and publisher.poll() is None:
                valid = [d for d, info in reader.take_cdr(16) if info.valid_data]
                data = valid[0] if valid else None
                time.sleep(0.05)
        finally:
            out = _stop(publisher)
    assert data is not None, f"nothing from the Fast DDS writer of {topic}\n{out[-3000:]}"
    assert data[:2] == b"\x00\x01", f"{topic}: not XCDR1 little-endian: {data[:4].hex()}"
    assert foreign.plain(decode(data)) == foreign.pattern_sample(MODULE, type_name, 5)


def test_the_matrix_compares_iff_and_identity() -> None:
    """The IFF fields appended to DetectionBatch, Track, AirPicture and Threat hold values other
    than their defaults in both directions' patterns, so the field-by-field comparisons above
    show that they survive a Fast DDS round trip (XCDR1)."""
    for seed in (3, 5):
        batch = foreign.pattern_sample(MODULE, "DetectionBatch", seed)
        picture = foreign.pattern_sample(MODULE, "AirPicture", seed)
        track = foreign.pattern_sample(MODULE, "Track", seed)
        threat = foreign.pattern_sample(MODULE, "Threat", seed)
        assert batch["iff"] and picture["iff"] and picture["identity"]
        assert track["iff"] != 0 and track["identity"] != 0 and threat["identity"] != 0


@pytest.mark.parametrize(
    ("topic", "sample"),
    [
        (
            "DetectionBatch",
            types.DetectionBatch(
                sensor_id="iff",
                count=3,
                **{f: bytes(24) for f in types.PACKED_ARRAYS["DetectionBatch"]},
                iff=bytes([2, 1, 3]),  # IFF_FRIEND, IFF_NO_REPLY, IFF_INVALID
            ),
        ),
        (
            "Track",
            types.Track(
                track_id=7,
                identity=types.Identity.IDENTITY_FRIEND,
                iff=types.IffAnswer.IFF_FRIEND,
            ),
        ),
    ],
    ids=["DetectionBatch", "Track"],
)
def test_iff_answers_and_identities_reach_fastdds(
    topic: str, sample: Any, fastdds_peer: Path, foreign_env: dict[str, str]
) -> None:
    """An interrogating radar's batch and a friend's track, as MCC writes them, read by Fast
    DDS with the types fastddsgen made from the same IDL: the new fields as sent."""
    # Validated: samples MCC would send.
    line = _read_by_fastdds(fastdds_peer, foreign_env, topic, sample, validate=True)
    got = line["sample"]
    assert got == foreign.plain(sample)
    if topic == "DetectionBatch":
        assert got["iff"] == "020103"
    else:
        assert (got["identity"], got["iff"]) == (3, 2)  # IDENTITY_FRIEND, IFF_FRIEND


def test_xcdr2_towards_fastdds_is_refused_at_match(
    fastdds_peer: Path, foreign_env: dict[str, str]
) -> None:
    """Fast DDS 2.x readers announce no representation: Cyclone takes them as XCDR1 readers and
    an XCDR2 writer never matches them (which is why MCC's writers write XCDR1)."""
    dump = _peer(
        fastdds_peer,
        *("dump", "--type", "Track", "--profile", "state", "--count", "1", "--timeout-s", "8"),
        env=foreign_env,
    )
    with Bus(int(foreign_env["MCC_DOMAIN"]), transport=Transport.from_env(foreign_env)) as bus:
        xcdr2 = Policy.DataRepresentation(use_xcdrv2_representation=True)
        qos = Qos(xcdr2, base=default_library().writer_qos("state"))
        raw = DataWriter(bus._publisher, bus.topic("Track"), qos=qos)
        event = wait_for(
            lambda: raw.get_offered_incompatible_qos_status().total_count > 0,
            15,
            "the XCDR2 writer to be refused by the Fast DDS reader",
        )
        assert event
        status = raw.get_offered_incompatible_qos_status()
        assert policy_name(status.last_policy_id) == "data_representation"
        assert raw.get_publication_matched_status().current_count == 0
    out = _finish(dump, 15)
    assert dump.returncode == 3 and not _json_lines(out), out[-2000:]


@pytest.mark.parametrize("kind", ["truncated", "utf8", "encoding"])
def test_malformed_foreign_samples_are_counted_and_dropped(
    kind: str, fastdds_peer: Path, foreign_env: dict[str, str]
) -> None:
    """Bad DetectionBatch samples between good ones from a Fast DDS writer: the good ones come
    through, the bad ones are dropped (by Cyclone when they are not CDR of the type, by MCC's
    decoder when they are but hold bad content, counted in bus.stats), and the reader's
    handler thread lives on."""
    seen: list[Any] = []
    with Bus(int(foreign_env["MCC_DOMAIN"]), transport=Transport.from_env(foreign_env)) as bus:
        bus.reader("DetectionBatch", on_data=lambda r: seen.extend(r.take()))
        peer = _peer(
            fastdds_peer,
            *("malformed", "--kind", kind, "--count", "20", "--period-s", "0.05"),
            env=foreign_env,
        )
        out = _finish(peer, 60)
        assert peer.returncode == 0, out[-3000:]
        wait_for(lambda: len(seen) >= 5, 10, f"good samples between the {kind} ones")
        stats = bus.stats
        assert {(s.sensor_id, s.count) for s in seen} == {("fastdds-malformed", 1)}
        assert sorted(s.scan_id for s in seen) == sorted({s.scan_id for s in seen})
        assert all(s.scan_id % 2 == 1 for s in seen)  # only the good ones (odd writes)
        if kind == "utf8":  # well-formed CDR, bad content: MCC's decoder drops and counts it
            assert stats.dropped_by_topic.get("DetectionBatch", 0) == 10, stats
        assert stats.handler_errors == 0
        # The bus still reads after the bad samples (its dispatcher thread is alive).
        before = len(seen)
        again = _peer(
            fastdds_peer,
            *("malformed", "--kind", kind, "--count", "40", "--period-s", "0.05"),
            env=foreign_env,
        )
        try:
            wait_for(lambda: len(seen) > before, 20, "a good sample after the bad ones")
        finally:
            _stop(again)


def fastdds_radar_args(model: Any, friends: Sequence[int] = ()) -> list[str]:
    """The Fast DDS radar's options that make it the scenario radar ``model``
    (a ``mcc.apps.scenario.RadarModel``); ``friends``: the scenario's Mode 5 target ids."""
    coverage = (
        model.min_range_m,
        model.max_range_m,
        model.min_elevation_rad,
        model.max_elevation_rad,
        model.sector_start_rad,
        model.sector_width_rad,
    )
    sigmas = (
        model.sigma_range_m,
        model.sigma_azimuth_rad,
        model.sigma_elevation_rad,
        model.sigma_radial_velocity_mps,
    )
    return [
        *("--sensor-id", model.id),
        *("--position", ",".join(map(repr, model.position_m))),
        *("--scan-period-s", repr(model.scan_period_s)),
        *("--sigmas", ",".join(map(repr, sigmas))),
        *("--pd", repr(model.pd), "--clutter-rate", repr(model.clutter_rate)),
        *("--coverage", ",".join(map(repr, coverage))),
        *("--snr-ref-db", repr(model.snr_ref_db)),
        *(
            ("--iff", f"{model.iff_p_reply!r},{model.iff_p_false_reply!r}")
            if model.iff_p_reply is not None
            else ()
        ),
        *(("--iff-friends", ",".join(map(str, friends))) if friends else ()),
    ]


def test_fastdds_radar_interrogates_iff(fastdds_peer: Path, foreign_env: dict[str, str]) -> None:
    """The Fast DDS radar with ``--iff 1 --iff-friends 1``: target 1 (north) answers
    IFF_FRIEND (2), target 2 (east) IFF_NO_REPLY (1), in the batch MCC reads; as the scenario
    radars' interrogator (`mcc.apps.scenario_radar.RadarModel.interrogate`)."""
    from mcc.apps.scenario import TruthState
    from mcc.types.arrays import optional_field, packed_field

    radar = _peer(
        fastdds_peer,
        *("radar", "--sensor-id", "iff-radar", "--scan-period-s", "0.2", "--pd", "1"),
        *("--coverage", "0,40000,-0.5,1.5", "--iff", "1", "--iff-friends", "1"),
        env=foreign_env,
    )
    answers: list[tuple[list[float], list[int]]] = []
    try:
        with Bus(int(foreign_env["MCC_DOMAIN"]), transport=Transport.from_env(foreign_env)) as bus:
            truth = bus.writer("Truth")
            batches = bus.reader("DetectionBatch")
            deadline = time.monotonic() + 30
            while len(answers) < 3 and time.monotonic() < deadline:
                state = TruthState(
                    time.time_ns() * 1e-9,
                    np.array([1, 2], np.uint32),
                    np.array([1, 1], np.uint8),
                    np.array([[0.0, 10000.0, 1000.0], [10000.0, 0.0, 1000.0]]),
                    np.zeros((2, 3)),
                    np.ones(2, bool),
                )
                truth.write(state.to_msg(scenario_id="iff", time_ns=time.time_ns()))
                for batch in batches.take_wait(16, timeout_s=0.2):
                    iff = optional_field(batch, "iff")
                    if batch.count == 2 and iff is not None:
                        azimuths = packed_field(batch, "azimuth_rad").tolist()
                        answers.append((azimuths, iff.tolist()))
    finally:
        out = _stop(radar)
    assert len(answers) >= 3, out[-3000:]
    for azimuths, iff in answers:
        east = [abs(a - np.pi / 2) < 0.1 for a in azimuths]  # the other one is north
        assert sorted(zip(east, iff, strict=True)) == [(False, 2), (True, 1)], answers


# -- the apps ----------------------------------------------------------------------------------

_MISSION = """\
# A Fast DDS radar in an MCC mission (written by tests/interop/test_fastdds.py).
mission: {name}
domain: {domain}
security: none   # the Fast DDS peer joins unsecured (docs/interop.md: security)
description: Fast DDS radar and console with the MCC tracker
systems:
  truth:
    app: mcc.apps.radar:truth
    config: {{scenario: scenarios/small.yaml}}
    resources: {{cpus: 0.1}}
  radar-fastdds:
    description: DetectionBatch from Fast DDS, fed by the bus's Truth
    command: [{peer}, radar, {radar_args}]
    publish: [DetectionBatch]
    subscribe: [Truth]
    env: {{MCC_FASTDDS_PEERS: 127.0.0.1, MCC_FASTDDS_QOS: {qos}}}
    resources: {{cpus: 0.1}}
    restart: always
  tracker:
    app: mcc.apps.tracker:tracker
    config: {{scenario: scenarios/small.yaml}}
    resources: {{cpus: 0.3}}
"""


@pytest.fixture
def fastdds_mission(
    fastdds_peer: Path, fastdds_qos: Path, foreign_env: dict[str, str], tmp_path: Path
) -> Iterator[tuple[str, dict[str, str], Path]]:
    from mcc.apps.scenario import RadarModel, load_scenario

    model = RadarModel.from_spec(
        next(r for r in load_scenario("scenarios/small.yaml").spec.radars if r.id == "radar-1")
    )
    name = f"foreign-{foreign_env['MCC_DOMAIN']}"
    manifest = tmp_path / f"{name}.yaml"
    manifest.write_text(
        _MISSION.format(
            name=name,
            domain=foreign_env["MCC_DOMAIN"],
            peer=fastdds_peer,
            qos=fastdds_qos,
            radar_args=", ".join(json.dumps(a) for a in fastdds_radar_args(model)),
        )
    )
    env = {**foreign_env, "MCC_HOME": str(tmp_path / "home")}
    with mcc_up(manifest, env=env, log=tmp_path / "up.log"):
        yield name, env, tmp_path / "up.log"


def test_fastdds_radar_fused_and_fastdds_console_answered(
    fastdds_peer: Path, fastdds_mission: tuple[str, dict[str, str], Path]
) -> None:
    name, env, log = fastdds_mission
    console = _peer(fastdds_peer, "console", "--mission", name, "--timeout-s", "120", env=env)
    out = _finish(console, 150)
    tail = out[-4000:] + "\n--- mcc up ---\n" + log.read_text()[-3000:]
    lines = {line.get("topic", "summary"): line for line in _json_lines(out)}
    assert console.returncode == 0, tail
    summary = lines["summary"]["summary"]
    assert summary["confirmed"] >= 1 and summary["pictures"] >= 1, tail
    # The tracker's products read in C++ are what MCC wrote: a confirmed Track of the Fast DDS
    # radar's targets, an AirPicture of that tracker, the mission's status.
    assert lines["Track"]["sample"]["tracker_id"].startswith(f"{name}/tracker/")
    assert lines["AirPicture"]["sample"]["count"] >= 1
    status = lines["MissionStatus"]["sample"]
    assert status["mission"] == name
    assert {"radar-fastdds", "tracker", "truth"} <= {
        s["system_id"].split("/")[1] for s in status["systems"]
    }
    reply = lines["CommandReply"]["sample"]
    assert reply["ok"] is True and reply["client_id"] == "fastdds-console", reply
    assert json.loads(reply["result_json"])["mission"] == name


def test_fastdds_echo_answers_perf_samples(fastdds_peer: Path, foreign_env: dict[str, str]) -> None:
    """The echo of `mcc bench latency --peer fastdds`: PerfPing in, the same sample out."""
    echo = _peer(fastdds_peer, "echo", "--count", "5", "--timeout-s", "30", env=foreign_env)
    try:
        with Bus(int(foreign_env["MCC_DOMAIN"]), transport=Transport.from_env(foreign_env)) as bus:
            pong = bus.reader("PerfPong", type=types.PerfSample, profile="perf_reliable")
            ping = bus.writer("PerfPing", type=types.PerfSample, profile="perf_reliable")
            # both ways matched before the first ping: an echo written before the echo's writer
            # matched this reader is gone (volatile), and the test waited for it in vain
            assert ping.wait_for_readers(1, timeout_s=20), "the echo's reader never matched"
            assert pong.wait_for_writers(1, timeout_s=20), "the echo's writer never matched"
            got: list[types.PerfSample] = []
            for seq in range(1, 6):
                ping.write(
                    types.PerfSample(writer_id="t", seq=seq, send_ns=seq, payload=b"x" * seq)
                )

                def echoed(seq: int = seq) -> bool:
                    got.extend(pong.take())
                    return any(g.seq == seq for g in got)

                wait_for(echoed, 10, f"the echo of sample {seq}")
            assert [g.seq for g in got] == list(range(1, 6))
            assert [g.payload for g in got] == [b"x" * seq for seq in range(1, 6)]
    finally:
        _finish(echo, 20)


def test_bench_latency_rows_beside_ddsperf(
    fastdds_peer: Path, foreign_env: dict[str, str], tmp_path: Path
) -> None:
    """`mcc bench latency --peer fastdds --peer cyclone-c`: mcc pinging each foreign echo, in
    the same run as ddsperf."""
    out = tmp_path / "latency.json"
    cmd = [
        *(sys.executable, "-m", "mcc.cli", "bench", "latency", "--quick", "--net", "host"),
        *("--impl", "mcc,ddsperf", "--peer", "fastdds", "--peer", "cyclone-c"),
        *("--sizes", "64", "--intervals", "0", "--json", str(out)),
    ]
    proc = subprocess.run(
        cmd, cwd=REPO, env=foreign_env, capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {row["impl"]: row for row in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"mcc", "ddsperf", "fastdds", "cyclone-c"}
    for impl in ("fastdds", "cyclone-c"):
        row = rows[impl]
        assert "error" not in row, row
        assert row["count"] >= 100 and row["lost"] == 0, row
        assert 0 < row["p50_us"] <= row["p99_us"], row
        assert row["ratio_p50_vs_ddsperf"] > 0, row
