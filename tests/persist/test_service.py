"""The persistence service as real processes: late joiners, kill -9, replicas, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mcc import types
from mcc.bus import Bus, HistoryReader
from mcc.bus.history import history_client
from mcc.errors import RequestTimeoutError
from mcc.persist import Store, inspect_store
from tests.conftest import app_instance, run_cli, stop_app, wait_for
from tests.persist.conftest import kill9, replica, writer
from tests.persist.test_store import BROKEN, DURABLE, write

pytestmark = pytest.mark.slow

HISTORY_S = 30.0  # generous: discovery on a loaded machine


def history(
    bus: Bus, topic: str = "Checkpoint", *, logs: Path, **options: Any
) -> tuple[HistoryReader[Any], list]:
    """A late joiner's reader of ``topic`` and what it took once the history arrived."""
    reader = bus.reader(topic, history_timeout_s=HISTORY_S, **options)
    assert isinstance(reader, HistoryReader)
    if not reader.wait_for_history(HISTORY_S + 5):
        tails = {p.name: p.read_text()[-3000:] for p in sorted(logs.glob("*.log"))}
        pytest.fail(
            f"no history: {reader.history}\n" + "\n".join(f"{k}:\n{v}" for k, v in tails.items())
        )
    return reader, reader.take(10_000)


def items(samples: list[Any], worker: str | None = None) -> list[tuple[str, int]]:
    return [(s.worker_id, s.items_done) for s in samples if worker in (None, s.worker_id)]


def test_late_joiner_gets_the_retained_samples_after_the_writer_died(
    bus_env: dict[str, str], domain_id: int, tmp_path: Path
) -> None:
    with replica(tmp_path / "a.sqlite", "a", bus_env):
        with writer(
            "--worker",
            "w1:20",
            "--worker",
            "w2:3",
            env=bus_env,
            log=tmp_path / "writer.log",
        ) as proc:
            kill9(proc)
        with Bus(domain_id) as bus:
            reader, got = history(bus, logs=tmp_path)
            # depth 16 per instance (durable profile), each sample once, oldest first
            assert items(got, "w1") == [("w1", i) for i in range(5, 21)]
            assert items(got, "w2") == [("w2", i) for i in range(1, 4)]
            stamps = [s.sample_info.source_timestamp for s in got]
            assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
            assert reader.history.replicas == ("a",) and reader.history.samples == 19
            assert all(s.sample_info.publication_handle == 0 for s in got)
            # and the store says the same, read beside the running service
            report = inspect_store(tmp_path / "a.sqlite")
            assert [(t.name, t.instances, t.samples) for t in report.topics] == [
                ("Checkpoint", 2, 19)
            ]
            assert [w.stored for w in report.writers] == [23]


def test_a_live_copy_of_a_retained_sample_is_delivered_once(
    bus_env: dict[str, str], domain_id: int, tmp_path: Path
) -> None:
    with replica(tmp_path / "a.sqlite", "a", bus_env), Bus(domain_id) as wbus:
        cp = wbus.writer("Checkpoint")
        first = types.Checkpoint(job_id="j", worker_id="w", items_done=1)
        source_ns = cp.write_stored(first, timeout_s=HISTORY_S)
        with Bus(domain_id) as rbus:
            reader, got = history(rbus, logs=tmp_path)
            assert items(got) == [("w", 1)]
            assert cp.wait_for_readers(2, timeout_s=HISTORY_S)  # the service and the reader
            assert reader.wait_for_writers(1, timeout_s=HISTORY_S)
            # the same sample (writer GUID + source timestamp) arriving live, then a new one
            cp.dds.write(first, timestamp=source_ns)
            cp.write(types.Checkpoint(job_id="j", worker_id="w", items_done=2))
            live: list[Any] = []
            deadline = time.monotonic() + HISTORY_S
            while (not live or live[-1].items_done != 2) and time.monotonic() < deadline:
                live.extend(reader.take_wait(timeout_s=1.0))
            assert items(live) == [("w", 2)]


def test_persistent_data_survives_kill_9_and_transient_data_does_not(
    bus_env: dict[str, str], domain_id: int, tmp_path: Path
) -> None:
    store = tmp_path / "a.sqlite"
    with replica(store, "a", bus_env) as service:
        # a user topic (type found by XTypes discovery) on the persistent profile
        with writer(
            "--topic",
            "JobState",
            "--profile",
            "persistent",
            "--worker",
            "p:4",
            env=bus_env,
            log=tmp_path / "writer.log",
        ):
            pass
        with writer("--worker", "t:2", env=bus_env, log=tmp_path / "writer.log"):
            pass
        kill9(service)  # the acknowledged samples were committed: nothing may be lost
    with replica(store, "a", bus_env), Bus(domain_id) as bus:
        _, kept = history(
            bus, "JobState", logs=tmp_path, type=types.Checkpoint, profile="persistent"
        )
        assert items(kept) == [("p", i) for i in range(1, 5)]
        reader, transient = history(bus, logs=tmp_path)
        assert transient == [] and reader.history.replicas == ("a",)


def test_two_replicas_deliver_once_and_either_serves_alone(
    bus_env: dict[str, str], domain_id: int, tmp_path: Path
) -> None:
    expected = [("w", i) for i in range(1, 6)]
    with (
        replica(tmp_path / "a.sqlite", "a", bus_env) as a,
        replica(tmp_path / "b.sqlite", "b", bus_env) as b,
    ):
        with writer("--worker", "w:5", "--replicas", "2", env=bus_env, log=tmp_path / "writer.log"):
            pass
        with Bus(domain_id) as bus:
            # both asked: a replica discovered more than REPLY_GRACE_S after the other
            # answered is not waited for (the first complete answer suffices)
            client = history_client(bus)
            wait_for(lambda: len(client.matched_replicas()) == 2, HISTORY_S, "both replicas")
            reader, got = history(bus, logs=tmp_path)
            assert sorted(reader.history.replicas) == ["a", "b"]
            assert items(got) == expected
        kill9(a)
        with Bus(domain_id) as bus:
            reader, got = history(bus, logs=tmp_path)
            assert items(got) == expected and "b" in reader.history.replicas
        # a new replica takes over what b holds; then b goes too: the data is still served
        with replica(tmp_path / "c.sqlite", "c", bus_env):
            wait_for(
                lambda: inspect_store(tmp_path / "c.sqlite").total_samples >= 5,
                HISTORY_S,
                "replica c to align with b",
            )
            kill9(b)
            with Bus(domain_id) as bus:
                reader, got = history(bus, logs=tmp_path)
                assert items(got) == expected and "c" in reader.history.replicas


def test_without_a_service_readers_get_live_data_and_stored_writes_time_out(
    bus_env: dict[str, str], domain_id: int
) -> None:
    with Bus(domain_id) as bus:
        reader = bus.reader("Checkpoint", history_timeout_s=0.5)
        writer_ = bus.writer("Checkpoint")
        assert not reader.wait_for_history(10.0) and reader.history.done
        assert writer_.wait_for_readers(1, timeout_s=HISTORY_S)
        writer_.write(types.Checkpoint(job_id="j", worker_id="w", items_done=7))
        assert items(reader.take_until(1, timeout_s=HISTORY_S)) == [("w", 7)]
        with pytest.raises(RequestTimeoutError, match="0 of 1 persistence replicas"):
            writer_.write_stored(types.Checkpoint(job_id="j"), timeout_s=0.5)


def test_the_app_keeps_its_store_in_the_run_dir(
    bus_env: dict[str, str], domain_id: int, tmp_path: Path
) -> None:
    with (
        app_instance(
            "mcc.persist.service:main", env=bus_env, system="persist", logs=tmp_path, index=1
        ) as proc,
        Bus(domain_id) as bus,
    ):
        cp = bus.writer("Checkpoint")
        cp.write_stored(types.Checkpoint(job_id="j", worker_id="w"), timeout_s=HISTORY_S)
        reader, got = history(bus, logs=tmp_path)
        assert reader.history.replicas == ("persist-1",) and items(got) == [("w", 0)]
        stop_app(proc, tmp_path, "persist")
    assert inspect_store(tmp_path / "persist-1.sqlite").total_samples == 1


@pytest.mark.parametrize(
    ("kind", "action"), [("garbage", "serve"), ("foreign", "inspect"), ("truncated", "serve")]
)
def test_serve_and_inspect_refuse_a_store_that_is_not_ours(
    bus_env: dict[str, str], tmp_path: Path, kind: str, action: str
) -> None:
    path = tmp_path / "store.sqlite"
    BROKEN[kind][0](path)
    args = ["serve", "--store", str(path)] if action == "serve" else ["inspect", str(path)]
    proc = run_cli(["persist", *args], env=bus_env, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"mcc: error: persistence store {path}" in proc.stderr
    assert BROKEN[kind][1] in proc.stderr and "Traceback" not in proc.stderr
    # the other command says the same (through python -m mcc.persist: faster to start)
    other = ["inspect", str(path)] if action == "serve" else ["serve", "--store", str(path)]
    again = subprocess.run(
        [sys.executable, "-m", "mcc.persist", *other],
        env=bus_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 2 and BROKEN[kind][1] in again.stderr, again.stderr


def test_inspect_lists_topics_instances_writers_and_samples(
    bus_env: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "p.sqlite"
    with Store.open(path) as store:
        store.ensure_topic(DURABLE)
        store.apply([write("a", 1_700_000_000_000_000_000), write("b", 1_700_000_001_000_000_000)])
    data = json.loads(run_cli(["persist", "inspect", str(path), "--json"], env=bus_env).stdout)
    assert [
        (t["name"], t["durability"], t["history"], t["instances"], t["samples"])
        for t in data["topics"]
    ] == [("Checkpoint", "transient", "keep-last 3", 2, 2)]
    assert [(i["key"], i["samples"]) for i in data["instances"]] == [
        ('{"worker_id": "a"}', 1),
        ('{"worker_id": "b"}', 1),
    ]
    assert data["writers"][0]["stored"] == 2 and data["total_samples"] == 2
    assert data["samples"][0]["source_iso"] == "2023-11-14T22:13:21.000+00:00"
    assert data["topics"][0]["size_bytes"] == len(b"a@1700000000000000000") * 2
    table = subprocess.run(  # python -m mcc.persist: the same command, a faster start
        [sys.executable, "-m", "mcc.persist", "inspect", str(path)],
        env={**bus_env, "COLUMNS": "250"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    for text in (
        "MCC persistence store",
        "Checkpoint",
        '{"worker_id": "b"}',
        "w-1",
        "2023-11-14T22:13:21.000Z",
        "keep-last 3",
    ):
        assert text in table, table
