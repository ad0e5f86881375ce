"""The perftest machinery: send-queue QoS, options, publisher/subscriber processes, throttles."""

from __future__ import annotations

import pytest
from cyclonedds.qos import Policy

from mcc.bench import perftest
from mcc.bench.perftest import PerfOptions, PubSpec
from mcc.bus import QosLibrary, default_library
from mcc.bus.transport import scratch_domains
from mcc.errors import MccError

pytestmark = pytest.mark.slow


def _policy(qos: object, kind: type) -> object:
    return next(p for p in qos if isinstance(p, kind))  # type: ignore[attr-defined]


def test_send_queue_library_sizes_the_perf_profiles() -> None:
    lib = QosLibrary.load(perftest.perf_qos_file(7))
    stream = perftest.STREAM_PROFILE
    writer = lib.writer_qos(stream)
    assert _policy(writer, Policy.History.KeepAll.__class__) == Policy.History.KeepAll
    assert _policy(writer, Policy.ResourceLimits).max_samples == 7  # type: ignore[attr-defined]
    reader = lib.reader_qos(stream)
    assert _policy(reader, Policy.History.KeepAll.__class__) == Policy.History.KeepAll
    # the ping-pong's profiles keep the last N, as qos/mcc.xml (with depth 50) does
    for name in ("perf_reliable", "perf_best_effort"):
        for qos in (lib.writer_qos(name), lib.reader_qos(name)):
            assert _policy(qos, Policy.History.KeepLast) == Policy.History.KeepLast(7)
    # everything else is the repository's library unchanged
    base = default_library()
    assert set(lib.names()) == set(base.names()) | {stream}
    for name in base.names():
        if not name.startswith("perf_"):
            assert lib.describe(name) == base.describe(name), name
    for name in ("perf_reliable", stream):
        assert lib.describe(name)["reliability"] == base.describe("perf_reliable")["reliability"]


def test_next_domain_skips_domains_this_process_configured() -> None:
    pool = scratch_domains()
    first = perftest.next_domain()
    following = pool[(pool.index(first) + 1) % len(pool)]  # handed out in turn
    perftest.claim_in_process(following)
    assert perftest.next_domain() == pool[(pool.index(following) + 1) % len(pool)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"transport": "quic"}, "--transport 'quic'"),
        ({"net": "vm"}, "--net 'vm'"),
        ({"send_queue": 0}, "--send-queue 0"),
        ({"transport": "tcp", "multicast": True}, "TCP has no multicast"),
    ],
)
def test_bad_options_name_the_option(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(MccError, match=message):
        PerfOptions(**kwargs)  # type: ignore[arg-type]


def test_pubsub_delivers_every_sample_and_measures_it() -> None:
    options = PerfOptions()
    with perftest.open_network("host", 2) as nodes:
        run = perftest.run_pubsub(
            options,
            nodes,
            [
                PubSpec(
                    domain=perftest.next_domain(),
                    writer_id=f"w{i}",
                    size_bytes=200,
                    rate_hz=1000,
                    duration_s=0.5,
                )
                for i in range(2)
            ],
            subscribers=1,
        )
    sub = run.subs[0]
    assert run.sent_samples == sum(p["sent"] for p in run.pubs) > 400
    result = perftest.throughput_of(sub, run.sent_samples)
    assert result.lost == 0 and result.received == run.sent_samples
    assert sub["bytes"] == 200 * run.sent_samples
    assert set(sub["writers"]) == {"w0", "w1"}
    assert all(w["ended"] and w["gaps"] == 0 for w in sub["writers"].values())
    assert result.latency is not None
    # the first samples of each writer are warm-up; the rest are in the histogram
    assert result.latency.count == run.sent_samples - 2 * perftest.SubSpec(domain=0).warmup_samples
    assert result.samples_per_s > 0 and result.mb_per_s > 0


def test_cyclone_write_batching_delivers_keyed_samples_whole() -> None:
    # Batched writes sit in the writer until a packet fills or the publisher flushes.
    with perftest.open_network("host", 2) as nodes:
        run = perftest.run_pubsub(
            PerfOptions(keyed=True),
            nodes,
            [PubSpec(domain=perftest.next_domain(), writer_id="w", size_bytes=64, duration_s=0.5)],
            write_batching=True,
        )
    result = perftest.throughput_of(run.subs[0], run.sent_samples)
    assert result.received == run.sent_samples > 0 and result.lost == 0
    assert run.subs[0]["bytes"] == run.sent_samples * 64


def test_full_send_queue_blocks_writes_and_cyclone_counts_them() -> None:
    # A queue of 2 samples, written flat out: writes must wait for acknowledgements.
    with perftest.open_network("host", 2) as nodes:
        run = perftest.run_pubsub(
            PerfOptions(send_queue=2),
            nodes,
            [
                PubSpec(
                    domain=perftest.next_domain(),
                    writer_id="w",
                    size_bytes=4096,
                    duration_s=0.5,
                    count_throttles=True,
                )
            ],
            latency=False,
        )
    pub = run.pubs[0]
    assert pub["blocked"] > 0 and pub["throttle_ms"] > 0
    assert pub["blocked"] <= pub["throttle_count"]
    assert pub["blocked_hist"] is not None
    assert perftest.throughput_of(run.subs[0], run.sent_samples).lost == 0


def test_throughput_of_counts_between_first_and_last_sample() -> None:
    sub = {"received": 101, "bytes": 101 * 1000, "seconds": 0.5, "latency_hist": None}
    result = perftest.throughput_of(sub, sent_samples=110)
    assert result.samples_per_s == pytest.approx(100 / 0.5)
    assert result.mb_per_s == pytest.approx(100 * 1000 / 0.5 / 1e6)
    assert (result.received, result.lost) == (101, 9)
    assert result.latency is None


def test_tcp_is_refused_for_mcc_processes_with_the_reason() -> None:
    reason = perftest.require_mcc_transport(PerfOptions(transport="tcp"))
    from mcc.bus.transport import tcp_supported

    if tcp_supported():
        assert reason is None
    else:
        assert reason is not None and "TCP not supported" in reason
        with perftest.open_network("host", 2) as nodes, pytest.raises(MccError, match="TCP"):
            perftest.run_pubsub(
                PerfOptions(transport="tcp"),
                nodes,
                [PubSpec(domain=1, writer_id="w", size_bytes=1)],
            )
