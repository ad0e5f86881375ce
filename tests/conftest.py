"""Shared test fixtures: a fresh DDS domain and discovery tag per test, tool requirements."""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from mcc.bus.transport import ScratchDomains, Transport
from mcc.orchestrate import LocalBackend, Supervisor, parse_manifest

REPO = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() == "true"

_scratch_domains = ScratchDomains()

#: The watchdog fires this long after pytest-timeout would have: it is the backstop for a test
#: stuck where pytest-timeout cannot reach it (a thread holding the GIL inside C).
WATCHDOG_GRACE_S = 60


@pytest.fixture(autouse=True, scope="session")
def _private_mcc_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """No test writes into the user's own MCC home (``~/.local/state/mcc``): the session has
    one of its own, 0700; tests that need a fresh one set ``MCC_HOME`` themselves."""
    saved = os.environ.get("MCC_HOME")
    os.environ["MCC_HOME"] = str(tmp_path_factory.mktemp("mcc-home"))
    # A mission whose supervisor a test killed stops itself this soon (default 60 s).
    os.environ.setdefault("MCC_AGENT_ORPHAN_S", "15")
    yield
    if saved is None:
        os.environ.pop("MCC_HOME", None)
    else:
        os.environ["MCC_HOME"] = saved


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Arm a watchdog per test: faulthandler's own C thread (it needs no GIL) dumps every
    thread's stack and ends the run if the test outlives its timeout by ``WATCHDOG_GRACE_S``."""
    marker = item.get_closest_marker("timeout")
    limit = (
        float(marker.args[0])
        if marker and marker.args
        else float(item.config.getini("timeout") or 300)
    )
    faulthandler.dump_traceback_later(limit + WATCHDOG_GRACE_S, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """No test may leave a process behind: kill what is left and say which ones."""
    import psutil

    base = str(session.config._tmp_path_factory.getbasetemp())  # type: ignore[attr-defined]
    left = psutil.Process().children(recursive=True) + _mission_processes(base)
    if not left:
        return
    names = []
    for proc in left:
        with contextlib.suppress(psutil.Error):
            names.append(" ".join(proc.cmdline()[:4]))
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(left, timeout=5)
    if names:
        print(f"\nconftest: killed {len(names)} processes left by the tests: {names}")


def _mission_processes(base: str) -> list[Any]:
    """Node agents and their instances started by this session: they are nobody's children
    (an agent is detached, so that a supervisor's death leaves the mission running); each
    carries its agent's socket in its environment, and an ``MCC_HOME`` under ``base``."""
    import psutil

    me, started = os.getuid(), psutil.Process().create_time()
    found = []
    for proc in psutil.process_iter(["uids", "create_time"]):
        with contextlib.suppress(psutil.Error):
            if proc.info["uids"].real != me or proc.info["create_time"] < started:
                continue
            env = proc.environ()
            if "MCC_AGENT_SOCKET" in env and env.get("MCC_HOME", "").startswith(base):
                found.append(proc)
    return found


def require_tool(name: str) -> str:
    """The path of system tool ``name``; a missing tool fails the test in CI, skips it elsewhere."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed (.ci/run installs it: see README)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture
def domain_id() -> int:
    """A scratch DDS domain (never on ephemeral ports), the next one in turn; the
    per-test discovery tag of `bus_env` keeps tests that share one apart."""
    return next(_scratch_domains)


@pytest.fixture
def bus_env(domain_id: int, request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """Environment for child processes: same domain, a discovery tag unique to this test."""
    from mcc.bus.transport import Transport

    tag = re.sub(r"[^A-Za-z0-9_.-]", "_", f"test-{os.getpid()}-{request.node.name}")[:60]
    overrides = Transport.loopback(tag).apply_to_env({})
    overrides.update(MCC_DOMAIN=str(domain_id), MCC_DISCOVERY_TAG=tag)
    saved = {k: os.environ.get(k) for k in overrides}
    os.environ.update(overrides)  # buses opened by the test itself use them too
    yield {**os.environ}
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def run_cli(
    args: Sequence[str], *, env: dict[str, str], timeout_s: float = 60.0, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``mcc ARGS`` in a subprocess; on timeout or failure show what it printed."""
    cmd = [sys.executable, "-m", "mcc.cli", *args]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"{' '.join(cmd)} timed out after {timeout_s} s\nstdout:\n{exc.stdout}\n"
            f"stderr:\n{exc.stderr}"
        )
    if check and proc.returncode != 0:
        pytest.fail(
            f"{' '.join(cmd)} exited {proc.returncode}\nstdout:\n{proc.stdout}\n"
            f"stderr:\n{proc.stderr}"
        )
    return proc


@contextmanager
def peer(
    *args: str, env: dict[str, str], ready_timeout_s: float = 30.0
) -> Iterator[subprocess.Popen[str]]:
    """Start ``tests/integration/bus_peer.py ARGS``; wait for its ``ready`` line; stop it after."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.bus_peer", *args],
        cwd=REPO,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = read_line(proc, ready_timeout_s)
        if line.strip() != "ready":
            proc.kill()
            pytest.fail(f"peer {args} did not start: {line!r}\n{proc.stderr.read()}")
        yield proc
    finally:
        try:
            proc.stdin.close()
            proc.wait(10)
        except (subprocess.TimeoutExpired, BrokenPipeError):
            proc.kill()
            proc.wait(5)
        proc.stdout.close()
        proc.stderr.close()


@contextmanager
def mcc_up(
    manifest: Path,
    *,
    env: dict[str, str],
    log: Path,
    stop_signal: int = signal.SIGINT,
    stop_timeout_s: float = 20.0,
) -> Iterator[subprocess.Popen[str]]:
    """``mcc up MANIFEST --quiet`` in its own process (output in ``log``); ``stop_signal``
    after the block, then SIGKILL if it does not stop within ``stop_timeout_s``."""
    out = log.open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mcc.cli", "up", str(manifest), "--quiet"],
        cwd=REPO,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(stop_signal)
            try:
                proc.wait(stop_timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        out.close()


def read_line(proc: subprocess.Popen[str], timeout_s: float) -> str:
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        ready = sel.select(timeout_s)
    if not ready:
        proc.kill()
        pytest.fail(f"peer silent for {timeout_s} s; stderr:\n{proc.stderr.read()}")
    return proc.stdout.readline()


@contextmanager
def app_instance(
    spec: str, *args: str, env: dict[str, str], system: str, logs: Path, index: int = 0
) -> Iterator[subprocess.Popen[bytes]]:
    """Run app ``module:function ARGS`` under the runtime as ``test/SYSTEM/INDEX``, its output in
    ``logs/SYSTEM.log``; SIGTERM it (then SIGKILL) if it still runs after the block."""
    out = (logs / f"{system}.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mcc.orchestrate.runtime", spec, *args],
        cwd=REPO,
        env={
            **env,
            "MCC_MISSION": "test",
            "MCC_SYSTEM": system,
            "MCC_INDEX": str(index),
            "MCC_RUN_DIR": str(logs),
        },
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        out.close()


def stop_app(
    proc: subprocess.Popen[bytes], logs: Path, system: str, *, within_s: float = 5.0
) -> None:
    """SIGTERM an app instance; it must exit 0 within ``within_s``."""
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(within_s)
    except subprocess.TimeoutExpired:
        pytest.fail(
            f"{system} ignored SIGTERM for {within_s:g} s:\n{(logs / f'{system}.log').read_text()}"
        )
    assert code == 0, (logs / f"{system}.log").read_text()


def mission_status(env: dict[str, str]) -> dict[str, Any] | None:
    """``mcc status --json`` of the mission ``env`` reaches; None while it does not answer."""
    proc = run_cli(["status", "--json"], env=env, check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def running_instances(status: dict[str, Any] | None) -> set[str]:
    """The ids of the instances ``status`` says are running."""
    return {i["id"] for i in (status or {}).get("instances", []) if i["state"] == "running"}


def running_ids(env: dict[str, str]) -> set[str]:
    """The ids of the running instances of the mission ``env`` reaches (none: no answer)."""
    return running_instances(mission_status(env))


def wait_for(condition: Callable[[], Any], timeout_s: float = 15.0, what: str = "") -> Any:
    """`mcc.waiting.wait_for` every 50 ms: ``condition()``'s first truthy value; the test fails
    at the deadline."""
    from mcc.waiting import WaitTimeoutError
    from mcc.waiting import wait_for as poll

    try:
        return poll(condition, timeout_s, what or str(condition), period_s=0.05)
    except WaitTimeoutError as exc:
        pytest.fail(str(exc))


def mission_transport(
    home: Path,
    mission: str,
    domain: int,
    *,
    publish: Sequence[str] = (),
    subscribe: Sequence[str] = ("*",),
    name: str = "test",
    timeout_s: float = 60.0,
    base: Transport | None = None,
) -> Transport:
    """How a test talks to a secured mission: a transport with an identity ``MISSION/name`` of
    the mission's keystore (made by its supervisor under ``home``) that may publish and
    subscribe the given topics, as an operator would grant it with `mcc security identity`."""
    from mcc.security import Keystore
    from mcc.security.documents import Grant

    keystore = Path(home) / "keystores" / mission
    wait_for(lambda: (keystore / "governance.p7s").exists(), timeout_s, f"keystore {keystore}")
    identity = Keystore(keystore).identity(
        f"{mission}/{name}",
        (Grant(publish=tuple(publish), subscribe=tuple(subscribe)),),
        domains=(domain,),
    )
    base = base or Transport.from_env()
    return dataclasses.replace(base, extra_xml=base.extra_xml + identity.security_xml())


@pytest.fixture
def run_supervisor(
    tmp_path: Path, domain_id: int, bus_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., Supervisor]]:
    """Start a supervisor for manifest text (``{domain}`` filled in); closed after the test."""
    monkeypatch.setenv("MCC_HOME", str(tmp_path / "home"))
    started: list[Supervisor] = []

    def start(text: str, **options: Any) -> Supervisor:
        mission = parse_manifest(text.replace("{domain}", str(domain_id)))
        supervisor = Supervisor(
            mission,
            backend=LocalBackend(mission.nodes, mission=mission.mission, domain=mission.domain),
            run_dir=tmp_path / "run",
            **options,
        )
        started.append(supervisor.start())
        return supervisor

    yield start
    for supervisor in started:
        if not supervisor._done.is_set():
            supervisor.close()
