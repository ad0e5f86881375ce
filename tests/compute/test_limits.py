"""Every compute request is bounded: sizes, parameters, compute time, and each client's share.

The attacks come first, as a foreign DDS client would send them (the generic serialiser, no
client-side checks); then what the service answers and that it keeps serving the others.
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import numpy as np
import pytest

from mcc.bus import Bus, Requester
from mcc.compute import open_compute, rodinia
from mcc.compute.limits import (
    ComputeBudgetError,
    QueueFullError,
    ServiceLimits,
    compute_budget,
)
from mcc.compute.montecarlo import EngagementPlan, simulate_raid
from mcc.compute.remote import ComputeService, FairQueue, service_partition
from mcc.compute.wire import decode_request
from mcc.errors import ComputeError, RequestTimeoutError
from mcc.types import ComputeReply, ComputeRequest
from mcc.types.arrays import to_ndarray_msg
from tests.compute.test_remote import _slow_hotspot
from tests.conftest import wait_for

PK = to_ndarray_msg(np.full((8, 2), 0.7))


@pytest.fixture
def requester(bus_env: dict[str, str], domain_id: int) -> Iterator[Requester[Any, Any]]:
    """A foreign client of service ``lim``: raw requests, no checks on its side."""
    with (
        Bus(domain_id, partitions=[service_partition("lim")]) as bus,
        Requester(bus, "ComputeRequest", "ComputeReply") as rq,
    ):
        yield rq


def _ask(rq: Requester[Any, Any], kernel: str, args: list[Any], **params: Any) -> ComputeReply:
    deadline_ns = params.pop("deadline_ns", 0)
    request = ComputeRequest(
        kernel=kernel, args=args, params_json=json.dumps(params), deadline_ns=deadline_ns
    )
    reply: ComputeReply = rq.request(request, timeout_s=30)
    return reply


def test_trials_2_to_the_40_is_refused_at_once_naming_the_bound(
    requester: Requester[Any, Any],
) -> None:
    with ComputeService(name="lim") as service:
        # The review's attack: about 30 hours of the service for one request.
        reply = _ask(requester, "montecarlo", [PK], trials=2**40)
        assert not reply.ok
        assert "parameter trials=1099511627776 is out of range; allowed 1..1e+09" in reply.error
        # In range, but more than the budget: refused on its estimate, before it runs.
        reply = _ask(requester, "montecarlo", [PK], trials=10**9)
        assert not reply.ok and "refused: kernel 'montecarlo': estimated" in reply.error
        assert "the budget of 30 s (ServiceLimits.budget_s)" in reply.error
        # Other parameters are bounded too.
        reply = _ask(requester, "montecarlo", [PK], trials=1000, looks=10**6)
        assert not reply.ok and "parameter looks=1000000 is out of range" in reply.error
        # and the service goes on serving reasonable requests
        good = _ask(requester, "montecarlo", [PK], trials=1000, seed=3)
        assert good.ok and good.results[0].shape == []
        stats = service.statistics()
        assert (stats.refused, stats.over_budget, stats.requests) == (3, 1, 1)
        assert stats.busy_s < 5.0  # nothing of the refused requests ran


def test_a_deadline_only_shortens_the_budget(requester: Requester[Any, Any]) -> None:
    temp, power = rodinia.hotspot_inputs(64, seed=1)
    grid = [to_ndarray_msg(temp), to_ndarray_msg(power)]
    limits = ServiceLimits(budget_s=2.0)
    with ComputeService(name="lim", limits=limits) as service:
        # ~7 s of HotSpot (estimated): over the service's budget of 2 s ...
        reply = _ask(requester, "hotspot", grid, iterations=200_000)
        assert not reply.ok and "the budget of 2 s (ServiceLimits.budget_s)" in reply.error
        # ... and a deadline far away does not lengthen it,
        far = time.time_ns() + 3600 * 10**9
        reply = _ask(requester, "hotspot", grid, iterations=200_000, deadline_ns=far)
        assert not reply.ok and "(ServiceLimits.budget_s)" in reply.error
        # while a near one shortens it below what the call needs (~0.4 s estimated).
        near = time.time_ns() + 200_000_000
        reply = _ask(requester, "hotspot", grid, iterations=10_000, deadline_ns=near)
        assert not reply.ok
        assert "the request's deadline" in reply.error or "deadline passed" in reply.error
        assert _ask(requester, "hotspot", grid, iterations=10).ok
        assert service.statistics().requests == 1


def test_oversized_and_malformed_requests_are_refused_or_dropped(
    requester: Requester[Any, Any], domain_id: int
) -> None:
    limits = ServiceLimits(max_request_bytes=4096, max_params_chars=64, max_id_chars=200)
    with ComputeService(name="lim", limits=limits) as service:
        big = to_ndarray_msg(np.zeros((40, 40), dtype=np.int32))  # 6400 bytes
        reply = _ask(requester, "nw", [big])
        assert not reply.ok and "6400 bytes of arrays, more than max_request_bytes = 4096" in (
            reply.error
        )
        small = to_ndarray_msg(np.zeros((4, 4), dtype=np.int32))
        nested = ComputeRequest(kernel="nw", args=[small], params_json="[" * 60 + "]" * 60)
        reply = requester.request(nested, timeout_s=30)
        assert not reply.ok and "max_params_chars = 64" in reply.error
        # An identifier a reply would have to echo: not answered, counted.
        with (
            Bus(domain_id, partitions=[service_partition("lim")]) as bus,
            Requester(bus, "ComputeRequest", "ComputeReply", client_id="c" * 300) as long_id,
            pytest.raises(RequestTimeoutError),
        ):
            long_id.request(ComputeRequest(kernel="nw", args=[small]), timeout_s=2.0)
        wait_for(lambda: service.statistics().dropped == 1, 10, "the dropped request")
        assert _ask(requester, "nw", [small]).ok


def test_one_client_cannot_fill_the_queue_for_the_others(
    requester: Requester[Any, Any], domain_id: int
) -> None:
    slow, params = _slow_hotspot(2.0)
    grid = [to_ndarray_msg(a) for a in slow]
    small = to_ndarray_msg(np.zeros((4, 4), dtype=np.int32))
    limits = ServiceLimits(max_queued_per_client=2)
    with ComputeService(name="lim", limits=limits) as service:
        request = ComputeRequest(kernel="hotspot", args=grid, params_json=json.dumps(params))
        busy = requester.request_async(request, timeout_s=30)
        wait_for(
            lambda: service.statistics().requests == 1 and service.statistics().queued == 0,
            10,
            "the service to start the slow call",
        )
        flood: list[Future[ComputeReply]] = [
            requester.request_async(ComputeRequest(kernel="nw", args=[small]), timeout_s=30)
            for _ in range(4)
        ]
        replies = [f.result(timeout=60) for f in flood]
        refused = [r for r in replies if not r.ok]
        assert len(refused) == 2 and all("max_queued_per_client = 2" in r.error for r in refused)
        with (
            Bus(domain_id, partitions=[service_partition("lim")]) as bus,
            Requester(bus, "ComputeRequest", "ComputeReply") as other,
        ):
            reply: ComputeReply = other.request(
                ComputeRequest(kernel="nw", args=[small]), timeout_s=60
            )
        assert reply.ok  # another client still gets its turn
        assert busy.result(timeout=60).ok
        stats = service.statistics()
        assert stats.throttled == 2 and stats.clients == 2


def test_the_fair_queue_bounds_each_client_and_the_whole() -> None:
    q: FairQueue[str] = FairQueue(max_items=3, max_items_per_client=2, max_bytes_per_client=100)
    q.put("a", "a1", nbytes=60)
    with pytest.raises(QueueFullError, match="client a is full \\(max_queued_bytes_per_client"):
        q.put("a", "a2", nbytes=60)
    q.put("a", "a2", nbytes=40)
    with pytest.raises(QueueFullError, match="client a is full \\(max_queued_per_client = 2"):
        q.put("a", "a3")
    q.put("b", "b1")
    with pytest.raises(QueueFullError, match="the queue is full \\(max_queued = 3"):
        q.put("c", "c1")
    assert [q.get_batch()[0] for _ in range(3)] == ["a1", "b1", "a2"]
    assert len(q) == 0 and q.nbytes == 0
    q.put("a", "a3", nbytes=100)  # room again once served


@pytest.mark.parametrize(
    ("kernel", "run"),
    [
        ("hotspot", lambda: rodinia.hotspot(*rodinia.hotspot_inputs(64), iterations=10**7)),
        (
            "montecarlo",
            lambda: simulate_raid(EngagementPlan(pk=np.full((8, 2), 0.7)), trials=10**9),
        ),
        ("nw", lambda: rodinia.needleman_wunsch(rodinia.nw_inputs(4000))),
    ],
)
def test_an_iterative_kernel_stops_once_its_budget_is_spent(kernel: str, run: Any) -> None:
    # Minutes to hours of work each, were it not stopped.
    t0 = time.monotonic()
    with compute_budget(0.05), pytest.raises(ComputeBudgetError, match="budget of 0.05 s"):
        run()
    assert time.monotonic() - t0 < 60.0, kernel
    # outside a budget (a local call) nothing is checked
    assert rodinia.hotspot(*rodinia.hotspot_inputs(8), iterations=5).shape == (8, 8)


def test_local_calls_check_parameter_ranges_too() -> None:
    with (
        open_compute("cpu") as kernels,
        pytest.raises(ComputeError, match="trials=.* out of range"),
    ):
        kernels.montecarlo(np.full((2, 2), 0.5), trials=2**40)


def _xcdr2_request(args_body: bytes) -> bytes:
    """A ComputeRequest whose ``args`` member is ``args_body`` (hand-made hostile bytes)."""

    def string(text: str) -> bytes:
        data = text.encode() + b"\0"
        return struct.pack("<I", len(data)) + data + b"\0" * (-len(data) & 3)

    body = string("r/1") + string("c") + string("nw") + args_body + string("") + bytes(16)
    return b"\x00\x09\x00\x00" + struct.pack("<I", len(body)) + body


@pytest.mark.parametrize(
    ("args_body", "message"),
    [
        (struct.pack("<II", 8, 2**31), "2147483648 arrays: at most 64 accepted"),
        (
            struct.pack("<III", 24, 1, 20)
            + struct.pack("<I", 3)
            + b"|O\0\0"
            + struct.pack("<I", 0),
            "is not a plain number type",
        ),
        (
            struct.pack("<III", 24, 1, 20)
            + struct.pack("<I", 4)
            + b"<f8\0"
            + struct.pack("<I", 10**6),
            "1000000 dimensions of array 0: at most 32 accepted",
        ),
    ],
)
def test_hostile_counts_in_a_request_are_refused_before_any_loop(
    args_body: bytes, message: str
) -> None:
    with pytest.raises(ComputeError, match=message):
        decode_request(_xcdr2_request(args_body))
