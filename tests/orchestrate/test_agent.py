"""The node agent's protocol, driven over its socket as a supervisor would: one active
controller, fencing by epoch, promotion, adoption by a new agent, hostile input."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from mcc.orchestrate.agent import AgentPaths, agent_token, proc_start_time
from tests.conftest import wait_for


class Controller:
    """A raw connection to the agent, as `LocalBackend` makes one."""

    def __init__(self, paths: AgentPaths, pid: int) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10.0)
        self.sock.connect(str(paths.socket))
        self.token = agent_token(paths.token)
        self.reader = self.sock.makefile("rb")
        self.pid = pid

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall((json.dumps(message) + "\n").encode())

    def read(self) -> dict[str, Any]:
        line = self.reader.readline()
        assert line, "the agent closed the connection"
        return dict(json.loads(line))

    def hello(self, **extra: Any) -> dict[str, Any]:
        hello = {"op": "hello", "pid": self.pid, "host": "test", "claim": True, "token": self.token}
        self.send({**hello, **extra})
        return dict(self.read()["hello"])

    def spawn(self, instance_id: str, tmp: Path) -> None:
        self.send({
            "op": "spawn", "id": instance_id, "env": dict(os.environ),
            "log": str(tmp / f"{instance_id.replace('/', '-')}.log"), "argv": ["sleep", "300"],
        })  # fmt: skip

    def closed(self) -> bool:
        try:
            return self.reader.readline() == b""
        except OSError:
            return True

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[AgentPaths]:
    home = tmp_path / "home"
    (home / "agents").mkdir(parents=True, mode=0o700)
    paths = AgentPaths.for_mission(home, "ag", 7)
    yield start_agent(paths, tmp_path)
    with contextlib.suppress(OSError, ValueError, KeyError):
        record = json.loads(paths.state.read_text())
        for pid in [record["agent_pid"], *(i["pid"] for i in record["instances"])]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def start_agent(paths: AgentPaths, tmp: Path) -> AgentPaths:
    argv = paths.argv(orphan_s=20)
    env = {**os.environ, "MCC_AGENT_SOCKET": str(paths.socket)}
    with (tmp / "agent.log").open("a") as log:
        subprocess.run(argv, env=env, stdout=log, stderr=log, check=True, timeout=60)

    def answers() -> bool:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(str(paths.socket))
            except OSError:
                return False
            return True

    wait_for(answers, 30, "the agent's socket")
    return paths


def test_one_active_controller_and_the_others_are_fenced(agent: AgentPaths, tmp_path: Path) -> None:
    first, second = Controller(agent, 101), Controller(agent, 102)
    try:
        assert first.hello()["active"] is True
        standby = second.hello()
        assert standby["active"] is False and standby["active_pid"] == 101
        epoch = standby["epoch"]
        second.spawn("ag/x/0", tmp_path)  # a standby cannot start anything
        assert second.read()["fenced"] == epoch
        first.spawn("ag/x/0", tmp_path)
        spawned = first.read()
        assert spawned["spawned"] == "ag/x/0"
        first.spawn("ag/x/0", tmp_path)  # one process per instance
        assert "already running" in first.read()["message"]
        second.send({"op": "claim", "expect_epoch": epoch - 1})  # stale: refused
        assert second.read() == {"claimed": False, "epoch": epoch}
        second.send({"op": "claim", "expect_epoch": epoch})  # the active is cut off: take over
        promoted = second.read()["promoted"]
        assert promoted["active"] and promoted["epoch"] == epoch + 1
        assert [i["id"] for i in promoted["instances"]] == ["ag/x/0"]
        assert first.read() == {"fenced": epoch + 1}
        assert first.closed()
        assert psutil.pid_exists(spawned["pid"])  # nothing stopped by the change
    finally:
        first.close()
        second.close()


def test_the_active_dying_promotes_the_standby_with_the_desired_state(
    agent: AgentPaths, tmp_path: Path
) -> None:
    first, second = Controller(agent, 201), Controller(agent, 202)
    try:
        first.hello()
        first.spawn("ag/y/0", tmp_path)
        pid = first.read()["pid"]
        first.send({"op": "state", "state": {"phase": "engagement"}})
        second.hello()
        first.close()  # the supervisor's process died: the kernel closed its socket
        promoted = second.read()["promoted"]
        assert promoted["state"] == {"phase": "engagement"}
        assert promoted["instances"][0]["pid"] == pid
        os.kill(pid, signal.SIGKILL)
        exit_event = second.read()
        assert exit_event == {"exit": "ag/y/0", "pid": pid, "returncode": -9}
    finally:
        second.close()


def test_a_new_agent_adopts_the_apps_of_a_killed_one(
    agent: AgentPaths, tmp_path: Path, bus_env: dict[str, str], domain_id: int
) -> None:
    first = Controller(agent, 301)
    first.hello()
    env = {**bus_env, "MCC_MISSION": "ag", "MCC_SYSTEM": "app", "MCC_DOMAIN": str(domain_id)}
    first.send({
        "op": "spawn", "id": "ag/app/0", "env": env, "log": str(tmp_path / "app.log"),
        "app": "mcc.orchestrate.probe:idle", "args": [],
    })  # fmt: skip
    app = first.read()["pid"]
    first.spawn("ag/cmd/0", tmp_path)  # a foreign binary: it dies with its agent
    command = first.read()["pid"]
    record = json.loads(agent.state.read_text())
    assert {i["pid"]: i["start_time"] for i in record["instances"]} == {
        app: proc_start_time(app),
        command: proc_start_time(command),
    }
    os.kill(record["agent_pid"], signal.SIGKILL)
    assert first.closed()
    first.close()
    start_agent(agent, tmp_path)
    standby, again = Controller(agent, 302), Controller(agent, 301)
    try:
        # a standby that reconnects first learns nothing that belongs to the active one
        early = standby.hello(claim=False)
        assert not early["active"] and early["instances"] == [] and early["exits"] == []
        hello = again.hello(expect_epoch=record["epoch"])
        assert hello["active"] and hello["epoch"] == record["epoch"] + 1
        assert [(i["id"], i["pid"]) for i in hello["instances"]] == [("ag/app/0", app)]
        assert hello["exits"] == [{"exit": "ag/cmd/0", "pid": command, "returncode": None}]
        again.send({"op": "signal", "id": "ag/app/0", "pid": app, "sig": signal.SIGKILL})
        # not its child: the exit comes through a pidfd, its status unknown
        assert again.read() == {"exit": "ag/app/0", "pid": app, "returncode": None}
    finally:
        again.close()
        standby.close()


def test_garbage_on_the_socket_drops_that_connection_only(
    agent: AgentPaths, tmp_path: Path
) -> None:
    active = Controller(agent, 401)
    try:
        active.hello()
        for junk in (b"\xff\xfe not json\n", b"[1, 2]\n", b"x" * (5 * 2**20)):
            rogue = Controller(agent, 402)
            with contextlib.suppress(OSError):
                rogue.sock.sendall(junk)
            assert rogue.closed()
            rogue.close()
        active.send({"op": "ping", "seq": 7})
        assert active.read()["pong"] == 7  # the agent and its active controller unharmed
    finally:
        active.close()


def test_a_hello_without_the_token_is_refused(agent: AgentPaths) -> None:
    """Any process of the user can connect to the socket (a confined instance too: Landlock
    does not check connect); only one that can read the agent's token may control it."""
    active = Controller(agent, 501)
    try:
        active.hello()
        for token in (None, "", "0" * 64, active.token[:-1] + "x"):
            rogue = Controller(agent, 502)
            message = {"op": "hello", "pid": 502, "host": "x", "claim": True}
            if token is not None:
                message["token"] = token
            rogue.send(message)
            assert "no hello with the agent's token" in rogue.read()["message"]
            assert rogue.closed()
            rogue.close()
        sneaky = Controller(agent, 503)  # an operation before any hello
        sneaky.send({"op": "claim", "expect_epoch": 1})
        assert "token" in sneaky.read()["message"] and sneaky.closed()
        sneaky.close()
        active.send({"op": "ping", "seq": 8})
        assert active.read()["pong"] == 8
        assert oct(os.stat(agent.token).st_mode & 0o777) == "0o600"
    finally:
        active.close()


def test_a_long_home_gets_a_private_unguessable_socket_folder(tmp_path: Path) -> None:
    """sun_path holds 108 bytes: a long MCC_HOME's sockets go to a short folder, made by
    mkdtemp (no other user can pre-create it to block `mcc up`), the same for every process."""
    import stat as st

    home = tmp_path / ("h" * 90)
    first = AgentPaths.for_mission(home, "long", 7).socket.parent
    try:
        assert str(first).startswith(f"/tmp/mcc-{os.getuid()}-") and len(str(first)) < 60
        mode = os.stat(first)
        assert st.S_IMODE(mode.st_mode) == 0o700 and mode.st_uid == os.geteuid()
        assert AgentPaths.for_mission(home, "other", 8).socket.parent == first  # found again
        # a kept folder that is no longer private is not used
        os.chmod(first, 0o755)
        second = AgentPaths.for_mission(home, "long", 7).socket.parent
        assert second != first and st.S_IMODE(os.stat(second).st_mode) == 0o700
        os.rmdir(second)
    finally:
        os.rmdir(first)
