"""The native bus core: never hangs, never dies of a sample, one Cyclone with every feature."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from mcc.bus import Bus, _native, topic_spec
from mcc.bus.codec import flat_codec
from mcc.bus.topics import TOPICS
from mcc.errors import MccError
from mcc.types import BulkBlock, Track
from tests.conftest import REPO
from tests.integration.bus_peer import sample_for

PY = sys.executable


def _run(script: str, *args: str, env: dict[str, str], timeout_s: float) -> str:
    """Run a Python script in a child; fail with its output if it times out or fails."""
    try:
        proc = subprocess.run(
            [PY, "-c", textwrap.dedent(script), *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"child hung for {timeout_s} s\nstdout:\n{exc.stdout}\nstderr:\n{exc.stderr}")
    if proc.returncode != 0:
        pytest.fail(f"child exited {proc.returncode}\nstdout:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def test_one_full_featured_cyclone_per_process() -> None:
    import cyclonedds.internal

    features = _native.library_features()
    assert features["version"] == "11.0.1"
    assert features["security"] and features["tcp"], features
    lib = Path(_native.LIBRARY).resolve()
    assert Path(cyclonedds.internal.DDS._dll_handle._name).resolve() == lib
    assert (lib.parent / "libdds_security_auth.so").exists()
    assert (lib.parent / "libpsmx_iox.so").exists()
    with Bus(next_domain()):
        maps = Path("/proc/self/maps").read_text()
    loaded = {line.split()[-1] for line in maps.splitlines() if "libddsc" in line}
    assert {Path(p).resolve() for p in loaded} == {lib}, loaded


def next_domain() -> int:
    from tests.conftest import _scratch_domains

    return next(_scratch_domains)


# -- the deadlock of Python listeners -----------------------------------------------------------

_FLOOD = """
import json, os, sys, threading, time
from cyclonedds.core import DDSException
from mcc.bus import Bus
from mcc.types import PerfSample
role, seconds = sys.argv[1], float(sys.argv[2])
with Bus(int(os.environ["MCC_DOMAIN"])) as bus:
    got = []
    last = [0.0]
    def on_data(reader):
        got.append(len(reader.take()))
        last[0] = time.monotonic()
    if role == "both":  # the pattern that hung: on_data reader and writer of one topic
        bus.reader("mcc_test_flood", type=PerfSample, profile="sensor_stream", on_data=on_data)
    writer = bus.writer("mcc_test_flood", type=PerfSample, profile="sensor_stream")
    writer.wait_for_readers(1, timeout_s=20)
    start = time.monotonic()
    end, sent, refused = start + seconds, 0, 0
    while time.monotonic() < end:
        try:
            writer.write(PerfSample(writer_id=role, seq=sent, send_ns=0, payload=b"x" * 64))
            sent += 1
        except DDSException:
            refused += 1  # flow control: the reader is behind
    print(json.dumps({"sent": sent, "refused": refused, "got": sum(got),
                      "quiet_s": time.monotonic() - last[0]}))
"""


@pytest.mark.slow
def test_on_data_reader_and_writer_of_one_topic_under_a_flood_never_hang(
    bus_env: dict[str, str],
) -> None:
    """60 s flat out: the pattern that deadlocked cyclonedds-python listeners within seconds."""
    seconds = "60"
    flood = subprocess.Popen(
        [PY, "-c", _FLOOD, "flood", seconds],
        cwd=REPO,
        env=bus_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out = _run(_FLOOD, "both", seconds, env=bus_env, timeout_s=150)
        flood_out, flood_err = flood.communicate(timeout=60)
    finally:
        if flood.poll() is None:
            flood.kill()
            flood.wait(5)
    both = json.loads(out.strip().splitlines()[-1])
    assert flood.returncode == 0, flood_err
    flooded = json.loads(flood_out.strip().splitlines()[-1])
    assert both["sent"] > 1000 and flooded["sent"] > 1000, (both, flooded)
    assert both["got"] > 1000, both
    assert both["quiet_s"] < 5.0, f"the handler stopped being called: {both}"


# -- lifetimes ----------------------------------------------------------------------------------


def test_a_dropped_on_data_reader_keeps_working_and_never_crashes(bus_env: dict[str, str]) -> None:
    out = _run(
        """
        import gc, os, time
        from mcc.bus import Bus
        from mcc.types import Track
        with Bus(int(os.environ["MCC_DOMAIN"])) as bus:
            got = []
            bus.reader("Track", on_data=lambda r: got.extend(r.take()))  # not kept
            gc.collect()
            writer = bus.writer("Track")
            writer.wait_for_readers(1, timeout_s=10)
            for i in range(50):
                writer.write(Track(track_id=i, tracker_id="t"))
                gc.collect()
            deadline = time.monotonic() + 10
            while len(got) < 50 and time.monotonic() < deadline:
                time.sleep(0.01)
            print(len(got))
        """,
        env=bus_env,
        timeout_s=60,
    )
    assert out.split()[-1] == "50"


def test_close_is_explicit_and_idempotent(domain_id: int) -> None:
    with Bus(domain_id) as bus:
        calls: list[int] = []
        reader = bus.reader("Track", on_data=lambda r: calls.append(len(r.take())))
        writer = bus.writer("Track")
        writer.wait_for_readers(1)
        reader.close()
        reader.close()
        writer.write(Track(track_id=1))
        with pytest.raises(MccError, match="closed"):
            reader.take()
        writer.close()
        writer.close()
        with pytest.raises(Exception, match="Track"):
            writer.write(Track(track_id=2))
    bus.close()  # after the with block: still fine


# -- both data representations ------------------------------------------------------------------


@pytest.mark.parametrize("topic", sorted(TOPICS))
def test_xcdr1_and_xcdr2_of_every_topic_type_decode_to_the_same_value(topic: str) -> None:
    sample = sample_for(topic)
    cls = type(sample)
    codec = flat_codec(cls)
    decode = codec.decode if codec is not None else cls.deserialize  # type: ignore[attr-defined]
    xcdr1 = sample.serialize(use_version_2=False)  # type: ignore[attr-defined]
    xcdr2 = sample.serialize(use_version_2=True)  # type: ignore[attr-defined]
    assert xcdr1[1] == 0x01 and xcdr2[1] in (0x07, 0x09)
    assert decode(xcdr1) == sample
    assert decode(xcdr2) == sample
    if codec is not None:  # and the lean codec writes both, byte for byte
        assert codec.encoder(False)(sample) == xcdr1.ljust((len(xcdr1) + 3) & ~3, b"\0")
        assert codec.encoder(True)(sample) == xcdr2.ljust((len(xcdr2) + 3) & ~3, b"\0")


#: Topics whose types nest structs: cyclonedds-python's XCDR1 serialisation of them is refused
#: by Cyclone's C checks (BAD_PARAMETER on write), so no XCDR1 writer of ours can send them; the
#: foreign-vendor interop tests decide which side is right.
_NESTED = {"ComputeReply", "ComputeRequest", "MissionStatus", "PersistReply"}


def test_an_xcdr1_writer_reaches_an_mcc_reader_on_every_flat_topic(domain_id: int) -> None:
    """What a Fast DDS 2.x or RTI writer sends by default: XCDR1, appendable types included."""
    from cyclonedds.core import Policy, Qos
    from cyclonedds.pub import DataWriter

    with Bus(domain_id) as bus:
        for topic in sorted(set(TOPICS) - _NESTED):
            spec = topic_spec(topic)
            reader = bus.reader(topic, history=False)
            qos = bus.endpoint_qos(spec.profile, writer=True) + Qos(
                Policy.DataRepresentation(use_cdrv0_representation=True)
            )
            foreign = DataWriter(bus._publisher, bus.topic(topic), qos=qos)
            sample = sample_for(topic)
            foreign.write(sample)
            got = reader.take_wait(timeout_s=5.0)
            assert [_plain(s) for s in got] == [_plain(sample)], topic
        assert bus.stats.samples_dropped == 0


def test_the_native_take_decodes_flat_samples_as_the_python_codec_does(domain_id: int) -> None:
    """Every flat topic, XCDR1 and XCDR2, a typical sample and one with the foreign peers'
    pattern values: the instance the native take builds equals the generated Python decoder's.
    A sample it must not decode (invalid UTF-8) comes back raw, so the Python decoder says what
    is wrong: the reader drops and counts it and goes on."""
    from cyclonedds._clayer import ddspy_write
    from cyclonedds.core import Policy, Qos
    from cyclonedds.pub import DataWriter

    from mcc.bus.endpoints import ANY_STATE
    from mcc.types import foreign

    module = foreign.load_module()
    checked = 0
    with Bus(domain_id) as bus:
        for topic in sorted(TOPICS):
            spec = topic_spec(topic)
            codec = flat_codec(spec.type)
            if codec is None:
                continue
            assert codec.layout is not None, topic
            reader = bus.reader(topic, history=False)
            pattern = foreign.pattern_sample(module, spec.type.__name__, 4)
            samples = [sample_for(topic), foreign.from_plain(spec.type, pattern)]
            for version_2 in (False, True):
                qos = bus.endpoint_qos(spec.profile, writer=True)
                if not version_2:
                    qos += Qos(Policy.DataRepresentation(use_cdrv0_representation=True))
                raw = DataWriter(bus._publisher, bus.topic(topic), qos=qos)
                for sample in samples:
                    data = sample.serialize(use_version_2=version_2)
                    assert ddspy_write(raw._ref, data) == 0, topic
                    got = _native.take(reader._ref, ANY_STATE, 16, codec.layout)
                    assert isinstance(got, list) and len(got) == 1, (topic, got)
                    assert type(got[0]) is spec.type, (topic, version_2, got)
                    assert got[0].sample_info.valid_data
                    assert _plain(got[0]) == _plain(codec.decode(data)), (topic, version_2)
                    checked += 1
        assert checked >= 4 * 10

        reader = bus.reader("PerfSample", history=False)
        raw = DataWriter(
            bus._publisher,
            bus.topic("PerfSample"),
            qos=bus.endpoint_qos(topic_spec("PerfSample").profile, writer=True),
        )
        good = sample_for("PerfSample")
        bad = dict(hostile_payloads(good))["utf8-writer_id"]
        for data in (bad, good.serialize()):
            assert ddspy_write(raw._ref, data) == 0
        got = _native.take(reader._ref, ANY_STATE, 16, flat_codec(type(good)).layout)  # type: ignore[union-attr]
        assert [type(item) for item in got] == [tuple, type(good)]
        for data in (bad, good.serialize()):
            assert ddspy_write(raw._ref, data) == 0
        assert [_plain(s) for s in reader.take()] == [_plain(good)]
        assert bus.stats.dropped_by_topic.get("PerfSample") == 1


def _plain(sample: Any) -> Any:
    return {k: v for k, v in vars(sample).items() if k != "sample_info"}


# -- hostile samples ----------------------------------------------------------------------------

_HOSTILE = """
import json, os, random, sys
from cyclonedds._clayer import ddspy_write
from cyclonedds.pub import DataWriter
from mcc.bus import Bus, topic_spec
from tests.integration.bus_peer import sample_for
from tests.bus.test_native_core import hostile_payloads
results = {}
with Bus(int(os.environ["MCC_DOMAIN"])) as bus:
    for topic in sys.argv[1:]:
        spec = topic_spec(topic)
        reader = bus.reader(topic, history=False)
        # A raw writer in the same process: local delivery skips the receive-side checks that
        # Cyclone makes on network data, so every byte reaches the reader's decoder.
        raw = DataWriter(bus._publisher, bus.topic(topic),
                         qos=bus.endpoint_qos(spec.profile, writer=True))
        good = sample_for(topic)
        sent, delivered, refused, utf8 = 0, 0, [], 0
        for name, data in hostile_payloads(good):
            if ddspy_write(raw._ref, data) == 0:
                sent += 1
                utf8 += name.startswith("utf8-")
                delivered += len(reader.take())
            else:
                refused.append(name)
        bus.writer(topic).write(good)
        after = reader.take()
        results[topic] = {"sent": sent, "delivered": delivered, "refused": refused, "utf8": utf8,
                          "dropped": bus.stats.dropped_by_topic.get(topic, 0),
                          "good_after": len(after) == 1 and after[0] == good}
print(json.dumps(results))
"""


def hostile_payloads(good: Any) -> list[tuple[str, bytes]]:
    """Bad serializations of ``good``'s type: random bytes behind a valid header, truncated,
    invalid UTF-8 in a string, NaN in a float, an enum value out of range, huge lengths."""
    import dataclasses
    import random

    rng = random.Random(7)
    data = good.serialize()
    header = data[:4]
    out = [
        ("random", header + bytes(rng.randrange(256) for _ in range(96))),
        ("random-xcdr1", b"\x00\x01\x00\x00" + bytes(rng.randrange(256) for _ in range(96))),
        ("truncated", data[: max(5, len(data) // 2)]),
        ("header-only", header),
        ("huge-length", header + b"\xff\xff\xff\x7f" * 8),
        ("big-endian-junk", b"\x00\x08\x00\x00" + bytes(rng.randrange(256) for _ in range(64))),
    ]
    for field, value in vars(good).items():
        if isinstance(value, str) and value:
            encoded = value.encode() + b"\0"
            at = data.find(encoded, 4)
            if at > 0:
                bad = b"\xff\xfe" * (len(encoded) // 2) + b"\xc3" * (len(encoded) % 2)
                out.append(
                    (
                        f"utf8-{field}",
                        data[:at] + bad[: len(encoded) - 1] + b"\0" + data[at + len(encoded) :],
                    )
                )
    nan = _with(good, float("nan"), float)
    if nan is not None:
        out.append(("nan", nan))
    if isinstance(getattr(good, "count", None), int):  # arrays shorter than the count says
        out.append(("count", dataclasses.replace(good, count=good.count + 5).serialize()))
    enum_bad = _with_enum_out_of_range(good, data)
    if enum_bad is not None:
        out.append(("enum", enum_bad))
    return out


def _with(good: Any, value: Any, kind: type) -> bytes | None:
    """``good`` serialized with its first ``kind`` field set to ``value`` (unchecked)."""
    import dataclasses

    for f in dataclasses.fields(good):
        if isinstance(getattr(good, f.name), kind) and not isinstance(getattr(good, f.name), bool):
            return dataclasses.replace(good, **{f.name: value}).serialize()  # type: ignore[no-any-return]
    return None


def _with_enum_out_of_range(good: Any, data: bytes) -> bytes | None:
    import enum
    import struct

    for value in vars(good).values():
        if isinstance(value, enum.Enum):
            word = struct.pack("<I", value.value)
            at = data.find(word, 4)
            if at > 0:
                return data[:at] + struct.pack("<I", 977) + data[at + 4 :]
    return None


@pytest.mark.slow
def test_hostile_samples_on_every_topic_are_dropped_counted_and_the_reader_goes_on(
    bus_env: dict[str, str],
) -> None:
    out = _run(_HOSTILE, *sorted(TOPICS), env=bus_env, timeout_s=240)
    results = json.loads(out.strip().splitlines()[-1])
    structural = {"random", "random-xcdr1", "truncated", "header-only", "huge-length"}
    for topic, r in results.items():
        assert r["good_after"], f"{topic}: the good sample after the bad ones was lost: {r}"
        # Cyclone checks the structure of every sample against the type (a writer's as here, a
        # remote one's on receipt): what reaches a reader is well-formed CDR with bad content.
        assert structural <= set(r["refused"]), f"{topic}: {r}"
        # BulkBlock has no text: nothing to make invalid UTF-8 of
        textless = TOPICS[topic].type is BulkBlock
        assert r["utf8"] >= 1 or textless, f"{topic}: no invalid UTF-8 went out: {r}"
        # Each one that went out was either dropped (counted) or decoded to a legal sample.
        assert r["dropped"] + r["delivered"] == r["sent"], f"{topic}: {r}"
        assert r["dropped"] >= r["utf8"], f"{topic}: {r}"


def test_a_bad_sample_is_logged_once_per_writer(
    domain_id: int, caplog: pytest.LogCaptureFixture
) -> None:
    from cyclonedds._clayer import ddspy_write
    from cyclonedds.pub import DataWriter

    with Bus(domain_id) as bus:
        reader = bus.reader("Heartbeat")
        raw = DataWriter(
            bus._publisher, bus.topic("Heartbeat"), qos=bus.endpoint_qos("health", writer=True)
        )
        good = sample_for("Heartbeat")
        bad = dict(hostile_payloads(good))["utf8-system_id"]
        for _ in range(5):
            assert ddspy_write(raw._ref, bad) == 0
            assert reader.take() == []
        assert bus.stats.samples_dropped == 5
        logged = [r for r in caplog.records if "dropped a bad sample" in r.getMessage()]
        assert len(logged) == 1, [r.getMessage() for r in logged]
        assert "Heartbeat" in logged[0].getMessage()
        assert "UnicodeDecodeError" in logged[0].getMessage()


def test_an_on_data_handler_that_raises_is_logged_and_the_bus_goes_on(domain_id: int) -> None:
    with Bus(domain_id) as bus:
        seen: list[int] = []

        def handler(reader: Any) -> None:
            for track in reader.take():
                seen.append(track.track_id)
                if track.track_id == 1:
                    raise RuntimeError("a bug in the handler")

        bus.reader("Track", on_data=handler)
        writer = bus.writer("Track")
        writer.wait_for_readers(1)
        writer.write(Track(track_id=1))
        from tests.conftest import wait_for

        wait_for(lambda: 1 in seen, 5, "the first sample")
        writer.write(Track(track_id=2))
        wait_for(lambda: 2 in seen, 5, "the sample after the failure")
        assert bus.stats.handler_errors == 1


def test_write_many_crosses_once_and_every_sample_arrives(domain_id: int) -> None:
    with Bus(domain_id) as bus:
        reader = bus.reader("Track")
        writer = bus.writer("Track")
        writer.wait_for_readers(1)
        writer.write_many([Track(track_id=i) for i in range(100)])
        got = reader.take_until(100, timeout_s=5)
        assert sorted(t.track_id for t in got) == list(range(100))


def test_native_calls_refuse_bad_arguments() -> None:
    with pytest.raises(ValueError, match="max_samples"):
        _native.take(1, 0, 0)
    assert _native.take(123456789, 0, 1) < 0  # no such entity: a retcode, no crash
    assert _native.write(123456789, b"\0\1\0\0") < 0
    assert os.path.basename(_native.LIBRARY).startswith("libddsc")
