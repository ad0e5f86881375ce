"""Large arguments and results as bulk transfers beside their request and reply: a round trip
through the real service, small calls still inline, and transfers that never come, are forged,
cut short, oversized or named by no call counted, dropped and failed with a clear error."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from mcc.bus import Bus, Requester
from mcc.bus.bulk import BLOCK_BYTES, BulkWriter
from mcc.compute import open_compute, wire
from mcc.compute.channel import BULK_MIN_BYTES, BulkInbox
from mcc.compute.remote import ComputeClient, ComputeService, service_partition
from mcc.errors import ComputeError
from mcc.types import BulkBlock, ComputeReply, ComputeRequest, NDArray
from mcc.types.arrays import to_ndarray_msg
from tests.compute.test_remote import _example, served
from tests.conftest import wait_for

# kalman_predict on this many tracks: its covariances (n × 6 × 6 float64, in and out) are over
# BULK_MIN_BYTES, its states (n × 6) under it.
LARGE = 3000


def _large_call() -> tuple[tuple[np.ndarray, ...], dict[str, Any]]:
    arrays, params = _example("kalman_predict", LARGE)
    x, P = arrays[:2]
    assert P.nbytes >= BULK_MIN_BYTES > x.nbytes
    return arrays, params


def _same_as_local(kernel: str, got: Any, arrays: tuple[np.ndarray, ...], params: Any) -> None:
    with open_compute("cpu") as local:
        for g, w in zip(got, local.call(kernel, *arrays, **params), strict=True):
            np.testing.assert_array_equal(g, w)


def test_a_large_argument_and_result_round_trip_through_the_service_process(
    bus_env: dict[str, str],
) -> None:
    arrays, params = _large_call()
    with served(bus_env, "bulk"), open_compute("remote:bulk", timeout_s=60) as kernels:
        client = kernels.executor
        assert isinstance(client, ComputeClient)
        # The service sends a result as a transfer once its result writer has matched this
        # client's inbox, else in the reply (it never waits): on a loaded host the first
        # calls can come before that match. Calls until one came as a transfer (bounded).
        for _ in range(20):
            _same_as_local("kalman_predict", kernels.kalman_predict(*arrays, **params), arrays,
                           params)  # fmt: skip
            if client.statistics().get("bulk received", 0):
                break
        before = client.statistics()["bulk received"]
        for _ in range(3):
            got = kernels.kalman_predict(*arrays, **params)
            assert not got.P.flags.writeable
            _same_as_local("kalman_predict", got, arrays, params)
        stats = client.statistics()
        assert stats["bulk received"] - before == 3  # one large result a call
        assert stats.get("bulk foreign", 0) == 0 and stats.get("bulk broken", 0) == 0


# -- one service in this process ----------------------------------------------------------------


@pytest.fixture
def service(bus_env: dict[str, str]) -> Iterator[ComputeService]:
    with ComputeService(name="bulk") as svc:
        yield svc


@pytest.fixture
def kernels(service: ComputeService) -> Iterator[Any]:
    with open_compute("remote:bulk", timeout_s=30.0) as k:
        yield k


@pytest.fixture
def rogue(service: ComputeService, domain_id: int) -> Iterator[tuple[Bus, Requester[Any, Any]]]:
    """A foreign client of the service: raw requests and raw bulk transfers."""
    with (
        Bus(domain_id, partitions=[service_partition("bulk")]) as bus,
        Requester(bus, "ComputeRequest", "ComputeReply") as rq,
    ):
        # Hostile: its requests are written unchecked (the bus would refuse a "bulk:" dtype).
        rq._writer = bus.writer("ComputeRequest", validate=False)
        yield bus, rq


def test_a_small_call_keeps_its_arrays_in_the_request(
    service: ComputeService, kernels: Any
) -> None:
    arrays, params = _example("kalman_predict", 50)
    got = kernels.kalman_predict(*arrays, **params)
    _same_as_local("kalman_predict", got, arrays, params)
    wait_for(lambda: service.statistics().replies == 1, 10, "the reply to be counted")
    stats = service.statistics()
    assert (stats.bulk_in, stats.bulk_out) == (0, 0)
    assert "bulk received" not in kernels.executor.statistics()
    # On the wire: every array inline, none named by a transfer.
    request = wire.encode_request(
        request_id="c/1",
        client_id="c",
        kernel="kalman_predict",
        args=arrays,
        params_json="{}",
        deadline_ns=0,
        issue_ns=0,
    )
    assert wire.decode_request(request).bulk == ()


def test_a_large_call_in_process_counts_its_transfers(
    service: ComputeService, kernels: Any
) -> None:
    arrays, params = _large_call()
    got = kernels.kalman_predict(*arrays, **params)
    _same_as_local("kalman_predict", got, arrays, params)
    stats = service.statistics()
    assert (stats.bulk_in, stats.bulk_out, stats.bulk_lost) == (1, 1, 0)
    timing = kernels.last_timing
    assert timing.request_bytes == sum(a.nbytes for a in arrays)
    assert timing.reply_bytes == sum(r.nbytes for r in got)


def test_large_calls_of_two_clients_each_take_their_own_results(
    service: ComputeService, kernels: Any
) -> None:
    """Both clients read ``BulkReturn``: each takes its own calls' results and drops the other's
    (futures of `submit` too, settled off the thread that took the reply)."""
    calls = [_example("kalman_predict", LARGE, seed=s) for s in (1, 2, 3, 4)]
    with open_compute("remote:bulk", timeout_s=30.0) as other:
        futures = [
            (k.submit("kalman_predict", *arrays, **params), arrays, params)
            for k in (kernels, other)
            for arrays, params in calls[:2]
        ]
        for future, arrays, params in futures:
            _same_as_local("kalman_predict", future.result(timeout=60), arrays, params)
        stats = [k.executor.statistics() for k in (kernels, other)]
    assert [s["bulk received"] for s in stats] == [2, 2]
    assert all(s.get("bulk foreign", 0) >= 1 for s in stats), stats
    assert service.statistics().bulk_out == 4


def _request(P_ref: NDArray, n: int = LARGE) -> ComputeRequest:
    arrays, _ = _example("kalman_predict", n)
    x, _, F, Q = (to_ndarray_msg(a) for a in arrays)
    return ComputeRequest(kernel="kalman_predict", args=[x, P_ref, F, Q], params_json="{}")


def _ref(transfer: int, n: int = LARGE) -> NDArray:
    return NDArray(dtype="bulk:<f8", shape=[n, 6, 6], data=transfer.to_bytes(8, "little"))


def test_a_transfer_that_never_comes_fails_its_call_and_the_service_goes_on(
    service: ComputeService, kernels: Any, rogue: tuple[Bus, Requester[Any, Any]]
) -> None:
    _, rq = rogue
    t0 = time.monotonic()
    reply: ComputeReply = rq.request(_request(_ref(secrets.randbits(64))), timeout_s=30)
    assert not reply.ok and "did not arrive within" in reply.error, reply.error
    assert "argument 1" in reply.error
    # This client named a transfer it never sent: its next ones are waited for only briefly.
    t1 = time.monotonic()
    reply = rq.request(_request(_ref(secrets.randbits(64))), timeout_s=30)
    assert not reply.ok and "did not arrive within 0.25 s" in reply.error, reply.error
    assert time.monotonic() - t1 < (t1 - t0) / 2
    stats = service.statistics()
    assert stats.refused == 2 and stats.bulk_lost == 2
    arrays, params = _large_call()  # another client: served as before
    _same_as_local("kalman_predict", kernels.kalman_predict(*arrays, **params), arrays, params)


def test_a_forged_transfer_of_another_size_fails_its_call(
    service: ComputeService, rogue: tuple[Bus, Requester[Any, Any]]
) -> None:
    bus, rq = rogue
    transfer = secrets.randbits(64)
    with BulkWriter(bus, "ComputeBulk") as writer:
        assert writer.wait_matched(1, timeout_s=20)
        writer.send(transfer, np.zeros(100, np.uint8))
        wait_for(lambda: service.statistics().bulk_in == 1, 20, "the transfer to be taken")
    reply: ComputeReply = rq.request(_request(_ref(transfer)), timeout_s=30)
    assert not reply.ok and "100 bytes arrived, the message said 864000" in reply.error
    assert service.statistics().bulk_lost == 1


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        (NDArray(dtype="bulk:object", shape=[2], data=b"\0" * 8), "not a plain number type"),
        (NDArray(dtype="bulk:<q9", shape=[2], data=b"\0" * 8), "is not a numpy dtype"),
        (NDArray(dtype="bulk:<f8", shape=[2], data=b"\0" * 9), "its data is the 8-byte"),
        (NDArray(dtype="bulk:<f8", shape=[2**32 - 1] * 3, data=b"\0" * 8), "too large"),
    ],
)
def test_a_malformed_reference_is_not_decoded(ref: NDArray, message: str) -> None:
    data = ComputeRequest(kernel="k", args=[ref]).serialize(use_version_2=True)
    with pytest.raises(ComputeError, match=message):
        wire.decode_request(data.ljust((len(data) + 3) & ~3, b"\0"))


def test_a_reference_too_large_for_the_service_is_refused_before_any_wait(
    service: ComputeService, rogue: tuple[Bus, Requester[Any, Any]]
) -> None:
    _, rq = rogue
    n = 2**20  # 302 MB of covariances, 50 MB of states: neither ever sent
    x = NDArray(dtype="bulk:<f8", shape=[n, 6], data=b"\1" * 8)
    P = NDArray(dtype="bulk:<f8", shape=[n, 6, 6], data=b"\2" * 8)
    F, Q = (to_ndarray_msg(np.eye(6)) for _ in range(2))
    t0 = time.monotonic()
    reply: ComputeReply = rq.request(
        ComputeRequest(kernel="kalman_predict", args=[x, P, F, Q], params_json="{}"), timeout_s=30
    )
    assert not reply.ok and "more than max_request_bytes" in reply.error, reply.error
    assert time.monotonic() - t0 < 4.0  # not the wait for a transfer
    assert service.statistics().bulk_lost == 0


# -- the inbox ------------------------------------------------------------------------------------


@pytest.fixture
def pair(bus_env: dict[str, str], domain_id: int) -> Iterator[tuple[Bus, Bus]]:
    with Bus(domain_id, name="sender") as a, Bus(domain_id, name="receiver") as b:
        yield a, b


def _block(transfer: int, index: int, count: int, total: int, data: bytes) -> BulkBlock:
    return BulkBlock(
        transfer=transfer,
        index=index,
        count=count,
        offset=index * BLOCK_BYTES,
        total=total,
        length=len(data),
        data=list(data.ljust(BLOCK_BYTES, b"\0")),
    )


def test_the_inbox_drops_unclaimed_cut_short_and_oversized_transfers(
    pair: tuple[Bus, Bus], domain_id: int
) -> None:
    a, b = pair
    with (
        Bus(domain_id, name="forger") as c,  # a Python writer of the type: a participant of its own
        BulkInbox(
            b, "Bulk", name="inbox", max_bytes=200_000, pool_bytes=400_000, hold_s=0.3, idle_s=0.3
        ) as inbox,
        BulkWriter(a, "Bulk") as writer,
    ):
        forger = c.writer("Bulk")
        assert writer.wait_matched(1, timeout_s=20) and forger.wait_for_readers(1, timeout_s=20)
        writer.send(1, np.ones(1000, np.uint8))  # named by no call
        writer.send(2, np.ones(300_000, np.uint8))  # more than max_bytes
        forger.write(_block(3, 0, 2, 2 * BLOCK_BYTES, b"abcd"))  # its second block never comes
        wait_for(
            lambda: (
                inbox.statistics().get("broken") == 1 and inbox.statistics().get("refused") == 1
            ),
            20,
            "the oversized and the broken transfer to be dropped",
        )
        with pytest.raises(ComputeError, match="no block for 0.3 s"):
            inbox.claim(3, 2 * BLOCK_BYTES, timeout_s=5)
        with pytest.raises(ComputeError, match="300000 bytes refused"):
            inbox.claim(2, 300_000, timeout_s=5)
        # A block of the refused transfer that comes after its refusal (a loaded host delivers
        # a transfer in several takes) is dropped, not counted as a second refusal: the CI
        # once saw the count pass 1 and this test wait for ever.
        blocks = -(-300_000 // BLOCK_BYTES)
        forger.write(_block(2, blocks - 1, blocks, 300_000, b"late"))
        forger.write(_block(5, 0, 1, 16, b"after the late block"[:16]))
        got5 = inbox.claim(5, 16, timeout_s=20)
        assert bytes(got5) == b"after the late b" and inbox.statistics()["refused"] == 1
        wait_for(lambda: inbox.statistics().get("unclaimed") == 1, 20, "transfer 1 to expire")
        with pytest.raises(ComputeError, match="did not arrive within 0.1 s"):
            inbox.claim(1, 1000, timeout_s=0.1)
        writer.send(4, np.arange(3000, dtype=np.uint16))  # still taking transfers
        got = inbox.claim(4, 6000, timeout_s=20)
        np.testing.assert_array_equal(got.view(np.uint16), np.arange(3000, dtype=np.uint16))
        assert inbox.statistics()["received"] == 3


def test_wire_bulk_references_round_trip_as_placeholders() -> None:
    big = np.arange(24.0).reshape(2, 3, 4)
    small = np.arange(3, dtype="<i4")
    data = wire.encode_request(
        request_id="c/1",
        client_id="c",
        kernel="k",
        args=[small, big],
        params_json="{}",
        deadline_ns=0,
        issue_ns=0,
        bulk={1: 2**64 - 1},
    )
    for sample in (data, ComputeRequest.deserialize(data).serialize(use_version_2=False)):
        req = wire.decode_request(sample)
        assert req.bulk == ((1, 2**64 - 1),)
        np.testing.assert_array_equal(req.args[0], small)
        stand_in = req.args[1]
        assert (stand_in.dtype, stand_in.shape, stand_in.nbytes) == (big.dtype, big.shape, 192)
        assert stand_in.strides == (0, 0, 0) and not stand_in.flags.writeable
        args = wire.with_buffers(req.args, {1: big.view(np.uint8).reshape(-1).copy()})
        np.testing.assert_array_equal(args[1], big)
        assert not args[1].flags.writeable
        with pytest.raises(ComputeError, match="holds 8 bytes, the message said 192"):
            wire.with_buffers(req.args, {1: np.zeros(8, np.uint8)})
