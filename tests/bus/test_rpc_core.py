"""The request/reply core (`mcc.bus.rpc`): Requester/Replier round trips, deadlines carried
with the request, the fair queue, and the shared helpers."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from mcc.bus import Bus, Replier, Requester
from mcc.bus.rpc import FairQueue, QueueFullError, deadline_passed, ids_too_long, stamp_reply
from mcc.types import Command, CommandReply, ComputeReply, ComputeRequest


def test_replier_answers_each_request_once_and_refuses_an_expired_one(
    bus_env: dict[str, str], domain_id: int
) -> None:
    ran: list[str] = []

    def handle(request: ComputeRequest) -> ComputeReply:
        ran.append(request.kernel)
        return ComputeReply(ok=True, device=f"ran {request.kernel}")

    with (
        Bus(domain_id) as bus,
        Replier(bus, handle, "ComputeRequest", "ComputeReply", replier_id="r1") as replier,
        Requester(bus, "ComputeRequest", "ComputeReply") as requester,
    ):
        fresh = ComputeRequest(kernel="fresh", deadline_ns=time.time_ns() + 10**10)
        reply = requester.request(fresh, timeout_s=10.0)
        assert (reply.ok, reply.device, reply.server_id) == (True, "ran fresh", "r1")
        assert (reply.request_id, reply.client_id) == (fresh.request_id, requester.client_id)

        late = ComputeRequest(kernel="late", deadline_ns=time.time_ns() - 1)
        reply = requester.request(late, timeout_s=10.0)
        assert not reply.ok
        assert "deadline passed" in reply.error
        assert reply.request_id == late.request_id
    assert ran == ["fresh"]  # the expired request was answered, not run
    assert replier.served == 1


def test_a_requester_takes_replies_only_from_the_replier_it_names(
    bus_env: dict[str, str], domain_id: int
) -> None:
    """Two systems may write ``CommandReply`` (the supervisor, TEWA for approvals); a client
    naming the supervisor's identity ignores the other's answers, however early they come."""

    def answer(text: str, delay_s: float) -> Callable[[Command], CommandReply]:
        def handle(command: Command) -> CommandReply:
            time.sleep(delay_s)
            return CommandReply(ok=True, message=text)

        return handle

    with (
        Bus(domain_id, source="supervisor") as supervisor_bus,
        Bus(domain_id, source="tewa.0") as tewa_bus,
        Bus(domain_id) as client_bus,
        Replier(supervisor_bus, answer("supervisor", 0.3)),
        Replier(tewa_bus, answer("tewa", 0.0)),
        Requester[Command, CommandReply](client_bus, replier_source="supervisor") as trusting,
        Requester[Command, CommandReply](client_bus) as anyone,
    ):
        assert trusting.request(Command(verb="status"), timeout_s=10).message == "supervisor"
        assert anyone.request(Command(verb="status"), timeout_s=10).message == "tewa"
        assert trusting._client.counts["replies refused"] >= 1


def test_fair_queue_serves_clients_in_turn_and_batches_equal_keys() -> None:
    queue: FairQueue[tuple[str, int]] = FairQueue(max_items_per_client=3)
    for n in range(3):
        queue.put("busy", ("busy", n))
    queue.put("quiet", ("quiet", 0))
    with pytest.raises(QueueFullError, match="client busy is full"):
        queue.put("busy", ("busy", 3))
    first = queue.get_batch(timeout_s=0)
    second = queue.get_batch(timeout_s=0)
    assert [first, second] == [[("busy", 0)], [("quiet", 0)]]  # quiet is not starved
    queue.put("other", ("other", 0))
    assert queue.get_batch(timeout_s=0, key=lambda item: "same") == [("busy", 1)]  # max 1
    queue.put("other", ("other", 1))
    batch = queue.get_batch(max_items=2, key=lambda item: "same", timeout_s=0)
    assert batch == [("other", 0), ("busy", 2)]  # client by client, equal keys join
    assert queue.get_batch(max_items=5, key=lambda item: None, timeout_s=0) == [("other", 1)]
    queue.close()
    assert queue.get_batch(timeout_s=None) == []


def test_helpers_read_the_correlation_fields() -> None:
    now = time.time_ns()
    assert deadline_passed(ComputeRequest(deadline_ns=now - 1), now)
    assert not deadline_passed(ComputeRequest(deadline_ns=0), now)  # 0: no deadline
    assert not deadline_passed(ComputeRequest(deadline_ns=now + 10**9), now)
    assert ids_too_long(ComputeRequest(request_id="x" * 300), 256)
    assert not ids_too_long(ComputeRequest(request_id="x", client_id="c"), 256)
    request = ComputeRequest(request_id="id-1", client_id="c-1")
    reply = stamp_reply(ComputeReply(), request, "request_id", "id-1", "replier-1")
    assert (reply.request_id, reply.client_id, reply.server_id) == ("id-1", "c-1", "replier-1")
    assert reply.reply_ns >= request.issue_ns
