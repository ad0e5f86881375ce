"""The remote compute service and client: fair queue, batching, refusals, timeouts, restarts.

In-process tests run a `ComputeService` and clients on a fresh domain; the process tests run
``mcc compute serve`` (and the app entry under the runtime) as real processes, kill and
restart them mid-stream.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mcc.bus import Bus, Requester
from mcc.compute import KERNELS, Kernels, open_compute
from mcc.compute.remote import ComputeClient, ComputeService, FairQueue, service_partition
from mcc.compute.rodinia import hotspot_inputs
from mcc.errors import ComputeError, PeerLostError, RequestTimeoutError
from mcc.types import ComputeReply, ComputeRequest, NDArray
from mcc.types.arrays import to_ndarray_msg
from tests.conftest import REPO, app_instance, read_line, stop_app, wait_for


def _example(name: str, size: int, seed: int = 0) -> tuple[tuple[np.ndarray, ...], dict[str, Any]]:
    ex = KERNELS[name].example(size, np.random.default_rng(seed))
    return ex.arrays, ex.params


def _slow_hotspot(seconds: float) -> tuple[tuple[np.ndarray, np.ndarray], dict[str, int]]:
    """A HotSpot call that keeps the CPU service busy for at least about ``seconds`` on this
    machine: timed at its fastest of three tries, so that a load burst while timing cannot
    make it end early (a busy host only makes it longer). Its 32 KB of input stays well below
    Cyclone's writer-history watermark (500 kB), which a killed service's unacknowledged
    requests would otherwise fill until its lease expires."""
    temp, power = hotspot_inputs(64, seed=1)
    tries = []
    with open_compute("cpu") as local:
        for _ in range(3):
            t0 = time.perf_counter()
            local.hotspot(temp, power, iterations=50)
            tries.append((time.perf_counter() - t0) / 50)
    return (temp, power), {"iterations": max(100, int(seconds / min(tries)))}


# -- the fair queue -------------------------------------------------------------------------------


def test_fair_queue_serves_clients_round_robin() -> None:
    q: FairQueue[str] = FairQueue()
    for item in ("a1", "a2", "a3"):
        q.put("a", item)
    q.put("b", "b1")
    q.put("c", "c1")
    q.put("b", "b2")
    order = [q.get_batch(timeout_s=0)[0] for _ in range(6)]
    assert order == ["a1", "b1", "c1", "a2", "b2", "a3"]
    assert len(q) == 0 and q.get_batch(timeout_s=0.01) == []


def test_fair_queue_batches_heads_with_the_same_key_in_turn() -> None:
    q: FairQueue[tuple[str, str]] = FairQueue()
    for client, key in (("a", "k"), ("a", "k"), ("a", "x"), ("b", "k"), ("c", "x"), ("c", "k")):
        q.put(client, (client, key))

    def key(item: tuple[str, str]) -> str:
        return item[1]

    # a's head (k), then b's head (k), then a's next (k); a's "x" stops a, c's head is "x".
    assert q.get_batch(max_items=8, key=key) == [("a", "k"), ("b", "k"), ("a", "k")]
    assert q.get_batch(max_items=2, key=key) == [("c", "x"), ("a", "x")]
    assert q.get_batch(max_items=8, key=key) == [("c", "k")]
    q.close()
    assert q.get_batch(timeout_s=None) == []  # closed and empty: no wait


# -- one service in this process ----------------------------------------------------------------


@pytest.fixture
def service(bus_env: dict[str, str]) -> Iterator[ComputeService]:
    with ComputeService(name="svc", max_batch=8) as svc:
        yield svc


@pytest.fixture
def kernels(service: ComputeService) -> Iterator[Kernels]:
    with open_compute("remote:svc", timeout_s=30.0) as k:
        yield k


def test_remote_results_equal_local_ones(kernels: Kernels) -> None:
    with open_compute("cpu") as local:
        for name in ("kalman_update", "gospa", "nw"):
            arrays, params = _example(name, 40)
            for got, want in zip(
                kernels.call(name, *arrays, **params),
                local.call(name, *arrays, **params),
                strict=True,
            ):
                np.testing.assert_array_equal(got, want)
    timing = kernels.last_timing
    assert timing is not None and timing.device == "remote:svc (cpu)"
    assert timing.request_bytes == 41 * 41 * 4 and timing.reply_bytes == 41 * 41 * 4
    assert timing.total_ms > timing.compute_ms > 0 and timing.attempts == 1


def test_a_call_takes_its_own_reply_and_drops_stray_ones(
    service: ComputeService, kernels: Kernels, domain_id: int
) -> None:
    """`Kernels.call` waits for its reply in the calling thread (no reply thread is started);
    replies to ids it never sent, and undecodable ones, are counted and dropped; the service
    unregisters its replies once idle (its writer keeps no instance)."""
    client = kernels.executor
    assert isinstance(client, ComputeClient)
    arrays, params = _example("gospa", 20)
    with open_compute("cpu") as local:
        want = local.call("gospa", *arrays, **params)
    got = kernels.call("gospa", *arrays, **params)  # matched now: the strays reach us
    with Bus(domain_id, partitions=[service_partition("svc")]) as bus:
        rogue = bus.writer("ComputeReply", validate=False)  # hostile: sends what it likes
        assert rogue.wait_for_readers(1, timeout_s=10)
        dropped_before = client._bus.stats.samples_dropped
        rogue.write(ComputeReply(request_id=f"{client.client_id}/999", client_id=client.client_id))
        short = NDArray(dtype="<f8", shape=[3, 3], data=b"\x00" * 5)  # 5 bytes for 9 floats
        rogue.write(
            ComputeReply(request_id="x/1", client_id=client.client_id, ok=True, results=[short])
        )
        for _ in range(3):
            got = kernels.call("gospa", *arrays, **params)
            for g, w in zip(got, want, strict=True):
                np.testing.assert_array_equal(g, w)
        wait_for(
            lambda: client.statistics().get("replies dropped") == 1,
            10,
            "the stray reply to be counted",
        )
        wait_for(
            lambda: client._bus.stats.samples_dropped == dropped_before + 1,
            10,
            "the undecodable reply to be dropped",
        )
    assert client.statistics()["calls"] == 4
    keys = [ComputeReply(request_id=f"{client.client_id}/{n}") for n in range(1, 5)]
    wait_for(
        lambda: all(service._writer.dds.lookup_instance(k) is None for k in keys),
        10,
        "the service to unregister its replies",
    )
    names = [t.name for t in threading.enumerate()]
    assert not any(n.startswith("mcc-compute-client-svc-replies") for n in names), names


def test_queued_requests_from_many_clients_run_as_one_batch(
    service: ComputeService, kernels: Kernels
) -> None:
    slow, slow_params = _slow_hotspot(1.5)
    busy = kernels.submit("hotspot", *slow, **slow_params)
    wait_for(
        lambda: service.statistics().requests == 1 and service.statistics().queued == 0,
        10,
        "the service to start the slow call",
    )
    arrays = [_example("kalman_predict", n, seed=n)[0] for n in (3, 5, 7)]
    with ExitStack() as stack:
        clients = [stack.enter_context(open_compute("remote:svc", timeout_s=30.0)) for _ in arrays]
        futures = [k.submit("kalman_predict", *a) for k, a in zip(clients, arrays, strict=True)]
        # A fourth client's request, and one more from the first client, queue behind them.
        late: Future[Any] = clients[0].submit("kalman_predict", *arrays[0])
        wait_for(lambda: service.statistics().queued == 4, 10, "four queued requests")
        assert not busy.done(), "the slow call ended before the others were queued"
        busy.result(timeout=30)
        results = [f.result(timeout=30) for f in futures]
        late.result(timeout=30)
    stats = service.statistics()
    assert stats.batched_requests == 4 and stats.kernel_calls == 2  # hotspot + one batch
    assert stats.clients == 4 and stats.max_queue == 4
    with open_compute("cpu") as local:
        for res, a in zip(results, arrays, strict=True):
            want = local.kalman_predict(*a)
            np.testing.assert_array_equal(res.x, want.x)
            np.testing.assert_array_equal(res.P, want.P)


def test_a_bad_request_in_a_batch_fails_alone(service: ComputeService, kernels: Kernels) -> None:
    slow, slow_params = _slow_hotspot(1.0)
    busy = kernels.submit("hotspot", *slow, **slow_params)
    wait_for(
        lambda: service.statistics().queued == 0 and service.statistics().requests == 1,
        10,
        "the service to start the slow call",
    )
    good = _example("kalman_predict", 4)[0]
    x, P, F, Q = good
    bad_x = np.array(x)
    bad_x[0, 0] = np.inf  # passes the schema, fails inside the kernel
    ok_future = kernels.submit("kalman_predict", *good)
    bad_future = kernels.submit("kalman_predict", bad_x, P, F, Q)
    busy.result(timeout=30)
    assert ok_future.result(timeout=30).x.shape == (4, 6)
    with pytest.raises(ComputeError, match=r"kalman_predict' failed on cpu: x has 1 NaN/inf"):
        bad_future.result(timeout=30)
    assert service.statistics().failed == 1


def test_requests_from_any_dds_client_are_checked_against_the_registry(
    service: ComputeService, domain_id: int
) -> None:
    """Requests written by the generic serialiser (another tool, another language) are decoded
    and refused with a message naming the kernel, argument or parameter."""
    ref = to_ndarray_msg(np.zeros((3, 3), dtype=np.int32))
    cases = {
        "unknown kernel 'fft'; registered kernels: kalman_predict": ("fft", [ref], ""),
        "argument 'reference' has dtype '<f8'; allowed: '<i4'": (
            "nw",
            [to_ndarray_msg(np.zeros((3, 3)))],
            "",
        ),
        r"argument 'power' has shape (2, 2) but argument 'temp' says rows=3": (
            "hotspot",
            [to_ndarray_msg(np.zeros((3, 3), "<f4")), to_ndarray_msg(np.zeros((2, 2), "<f4"))],
            "",
        ),
        "unknown parameter(s) gap; parameters: penalty (int, default 10)": (
            "nw",
            [ref],
            '{"gap": 3}',
        ),
        "params_json is not JSON": ("nw", [ref], "{penalty: 3}"),
        "takes 1 array(s) (reference), got 0": ("nw", [], ""),
    }
    with (
        Bus(domain_id, partitions=[service_partition("svc")]) as bus,
        Requester(bus, "ComputeRequest", "ComputeReply") as requester,
    ):
        for expected, (kernel, args, params_json) in cases.items():
            reply: ComputeReply = requester.request(
                ComputeRequest(kernel=kernel, args=args, params_json=params_json), timeout_s=10
            )
            assert not reply.ok and reply.results == []
            assert reply.error.startswith("refused: ") and expected in reply.error, reply.error
        good: ComputeReply = requester.request(
            ComputeRequest(kernel="nw", args=[ref], params_json='{"penalty": 2}'), timeout_s=10
        )
    assert good.ok and good.device == "cpu" and good.compute_ms > 0
    (score,) = good.results
    assert isinstance(score, NDArray) and list(score.shape) == [3, 3]
    np.testing.assert_array_equal(
        np.frombuffer(score.data, score.dtype).reshape(3, 3)[0], [0, -2, -4]
    )
    assert service.statistics().refused == len(cases)


def test_the_client_checks_calls_before_sending(kernels: Kernels) -> None:
    with pytest.raises(ComputeError, match=r"kernel 'nw': argument 'reference' has dtype"):
        kernels.nw(np.zeros((3, 3)))
    with pytest.raises(ComputeError, match=r"kernel 'hotspot': unknown parameter\(s\) steps"):
        kernels.hotspot(np.zeros((2, 2)), np.zeros((2, 2)), steps=3)


def test_a_slow_reply_times_out_and_the_stale_request_is_not_run(
    service: ComputeService, kernels: Kernels
) -> None:
    slow, slow_params = _slow_hotspot(5.0)  # long enough to outlast discovery under load
    busy = kernels.submit("hotspot", *slow, **slow_params)
    wait_for(
        lambda: service.statistics().queued == 0 and service.statistics().requests == 1,
        10,
        "the service to start the slow call",
    )
    with open_compute("remote:svc", timeout_s=0.3) as impatient:
        t0 = time.monotonic()
        with pytest.raises(RequestTimeoutError, match=r"no reply to nw request .* within 0.3 s"):
            impatient.nw(np.zeros((5, 5), dtype=np.int32))
        assert time.monotonic() - t0 < 5.0
    busy.result(timeout=30)
    wait_for(lambda: service.statistics().expired == 1, 10, "the expired request's answer")


def test_no_service_fails_fast_with_the_fix(bus_env: dict[str, str]) -> None:
    with open_compute("remote:nobody", connect_timeout_s=0.3) as kernels:
        t0 = time.monotonic()
        with pytest.raises(
            RequestTimeoutError,
            match=r"no compute service 'nobody' answered within 0.3 s.*"
            r"mcc compute serve --name nobody",
        ):
            kernels.nw(np.zeros((2, 2), dtype=np.int32))
        assert time.monotonic() - t0 < 5.0


def test_bad_service_and_client_options_are_refused(bus_env: dict[str, str]) -> None:
    with pytest.raises(ComputeError, match="runs kernels on a local device"):
        ComputeService(device="remote:compute")
    with pytest.raises(ComputeError, match="max_batch=0 must be an integer >= 1"):
        ComputeService(max_batch=0)
    with pytest.raises(ComputeError, match="retries=-1 must be an integer >= 0"):
        ComputeClient(retries=-1)
    with pytest.raises(ComputeError, match="timeout_s=0 must be a number of seconds > 0"):
        ComputeClient(timeout_s=0)


# -- real processes -------------------------------------------------------------------------------

CLI = (sys.executable, "-m", "mcc.cli", "compute", "serve")
LIGHT = (sys.executable, "-m", "mcc.compute.remote", "serve")  # the same, without the whole CLI


@contextmanager
def served(
    env: dict[str, str], name: str, command: tuple[str, ...] = LIGHT
) -> Iterator[subprocess.Popen[str]]:
    """A compute service process NAME until the block ends (SIGTERM, then SIGKILL)."""
    proc = subprocess.Popen(
        [*command, "--name", name],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = read_line(proc, 60.0)
        assert f"serving {name!r} on cpu" in line, line + proc.stderr.read()
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        proc.stdout.close()
        proc.stderr.close()


def test_mcc_compute_serve_answers_and_stops_on_sigterm(bus_env: dict[str, str]) -> None:
    arrays, params = _example("gating_cost", 30)
    with served(bus_env, "proc", CLI) as proc, open_compute("remote:proc") as kernels:
        got = kernels.gating_cost(*arrays, **params).cost
        with open_compute("cpu") as local:
            np.testing.assert_array_equal(got, local.gating_cost(*arrays, **params).cost)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        assert "stopped after 1 replies" in proc.stderr.read()


def test_service_restart_mid_stream_is_transparent(bus_env: dict[str, str]) -> None:
    """SIGKILL the service while calls are queued and running, start a new one: every call
    completes, with the same results, after the client resends what was lost."""
    slow, params = _slow_hotspot(0.4)
    with open_compute("remote:restart", timeout_s=60.0, retries=2) as kernels:
        with served(bus_env, "restart") as first:
            futures = [kernels.submit("hotspot", *slow, **params) for _ in range(4)]
            futures[0].result(timeout=30)  # mid-stream: one answered, three to go
            first.kill()
            first.wait(10)
        assert not all(f.done() for f in futures[1:])
        with served(bus_env, "restart"):
            results = [f.result(timeout=60) for f in futures]
        retries = kernels.executor.statistics()["retries"]  # type: ignore[attr-defined]
    assert retries >= 1
    with open_compute("cpu") as local:
        want = local.hotspot(*slow, **params).temp
    for res in results:
        np.testing.assert_array_equal(res.temp, want)


def test_app_entry_drains_on_stop_and_clients_without_retries_fail_clearly(
    bus_env: dict[str, str], tmp_path: Path
) -> None:
    """The app ``mcc.compute.remote:serve`` under the runtime (as the supervisor runs it):
    SIGTERM drains it, the running call is answered, the queued one is not, and a client
    without retries learns so at once."""
    slow, params = _slow_hotspot(2.0)
    with (
        app_instance(
            "mcc.compute.remote:serve",
            "--max-batch",
            "4",
            env=bus_env,
            system="compute",
            logs=tmp_path,
        ) as proc,
        open_compute(
            "remote:compute", timeout_s=60.0, retries=0, connect_timeout_s=60.0
        ) as kernels,
    ):
        assert kernels.nw(np.zeros((4, 4), dtype=np.int32), penalty=1).score[3, 3] == 0
        running = kernels.submit("hotspot", *slow, **params)
        queued = kernels.submit("nw", np.zeros((4, 4), dtype=np.int32))
        # both taken by the service (the hotspot running, 2 s) before the stop: a call still on
        # its way when SIGTERM lands is not running, and is not drained
        time.sleep(1.0)
        stop_app(proc, tmp_path, "compute", within_s=15.0)
        with pytest.raises(
            PeerLostError,
            match=r"compute service 'compute' went away while running nw request .*"
            r"retries exhausted",
        ):
            queued.result(timeout=15)
        assert running.result(timeout=5).temp.shape == (64, 64)
    assert "serving kernels as 'compute' on cpu" in (tmp_path / "compute.log").read_text()


def test_cli_lists_the_kernels(capsys: pytest.CaptureFixture[str]) -> None:
    from mcc.cli import main

    assert main(["compute", "kernels"]) == 0
    out = capsys.readouterr().out
    for name in KERNELS:
        assert name in out
