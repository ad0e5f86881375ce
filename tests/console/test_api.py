"""The console's HTTP API on a real bus: sessions, refusals, validation, commands through the
supervisor's ``Command`` topic, the audit log and /metrics."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from mcc.console import ConsoleConfig, Layout, UserStore, create_app, read_audit
from mcc.orchestrate import Supervisor
from mcc.types import Identity, IffAnswer
from mcc.types.arrays import pack
from tests.conftest import wait_for
from tests.console.conftest import COMMANDER, OBSERVER
from tests.console.test_state import picture
from tests.orchestrate.test_supervisor import APP


@pytest.fixture
def audit_path(tmp_path: Path) -> Path:
    return tmp_path / "audit.jsonl"


@pytest.fixture
def client(
    accounts: Path, audit_path: Path, domain_id: int, bus_env: dict[str, str]
) -> Iterator[TestClient]:
    config = ConsoleConfig(
        domain=domain_id,
        users_path=accounts,
        audit_path=audit_path,
        command_timeout_s=2.0,
        layout=Layout(phases=("idle", "busy")),
    )
    # The console answers to loopback names only (Starlette's default "testserver" is refused)
    with TestClient(create_app(config), base_url="http://localhost") as test_client:
        yield test_client


def login(client: TestClient, account: tuple[str, str]) -> Any:
    client.cookies.clear()
    response = client.post("/api/login", json={"name": account[0], "password": account[1]})
    assert response.status_code == 200, response.text
    return response


def audited(path: Path) -> list[tuple[str, str, str, str, int]]:
    return [
        (e["who"], e["action"], e["target"], e["result"], e["status"]) for e in read_audit(path)
    ]


def test_login_sets_a_strict_cookie_and_opens_the_console(
    client: TestClient, audit_path: Path
) -> None:
    page = client.get("/", follow_redirects=False)
    assert page.status_code == 303 and page.headers["location"] == "/login"
    assert client.get("/api/state").status_code == 401
    wrong = client.post("/api/login", json={"name": "cmdr", "password": "guess"})
    assert wrong.status_code == 401 and wrong.json()["detail"] == "wrong operator name or password"

    response = login(client, COMMANDER)
    assert response.json() == {"name": "cmdr", "role": "commander"}
    cookie = response.headers["set-cookie"]
    assert cookie.startswith("mcc_session=")
    for flag in ("HttpOnly", "SameSite=strict", "Path=/"):
        assert flag in cookie, cookie
    page = client.get("/")
    assert page.status_code == 200 and 'id="ppi"' in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"
    script = client.get("/static/js/main.js")
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert client.get("/api/me").json() == {"name": "cmdr", "role": "commander"}
    assert client.get("/api/layout").json()["phases"] == ["idle", "busy"]

    assert client.post("/api/logout", json={}).status_code == 200
    assert client.get("/api/me").status_code == 401
    assert audited(audit_path) == [
        ("cmdr", "login", "", "refused", 401),
        ("cmdr", "login", "", "ok", 200),
        ("cmdr", "logout", "", "ok", 200),
    ]


def test_control_needs_a_session_and_the_commander_role(
    client: TestClient, audit_path: Path
) -> None:
    body = {"verb": "phase", "target": "busy"}
    anonymous = client.post("/api/command", json=body)
    assert anonymous.status_code == 401 and anonymous.json()["detail"] == "log in first"
    login(client, OBSERVER)
    observer = client.post("/api/command", json=body)
    assert observer.status_code == 403
    assert observer.json()["detail"] == "obs is an observer: commands need the commander role"
    assert client.get("/api/state").status_code == 200  # observers see everything
    login(client, COMMANDER)
    foreign = client.post("/api/command", json=body, headers={"origin": "http://evil.example"})
    assert foreign.status_code == 403 and "cross-origin" in foreign.json()["detail"]
    entries = read_audit(audit_path)
    refused = [e for e in entries if e["action"] == "phase"]
    assert [(e["who"], e["role"], e["target"], e["result"], e["status"]) for e in refused] == [
        ("anonymous", "", "busy", "refused", 401),
        ("obs", "observer", "busy", "refused", 403),
        ("cmdr", "commander", "busy", "refused", 403),
    ]
    assert all(e["remote"] and e["time"].endswith("Z") for e in refused)


def test_malformed_commands_get_422_with_the_reason(client: TestClient, audit_path: Path) -> None:
    login(client, COMMANDER)
    cases: list[tuple[Any, str]] = [
        ({"verb": "launch", "target": "x"}, "verb: Input should be 'phase', 'start'"),
        ({"verb": "phase"}, "target: Field required"),
        ({"verb": "phase", "target": "a b"}, "target: a phase, system, cluster or order id: l"),
        ({"verb": "scale", "target": "mc"}, "scale needs 'size', the new number of workers"),
        ({"verb": "scale", "target": "mc", "size": -1}, "size: Input should be greater than or"),
        ({"verb": "stop", "target": "radar", "size": 2}, "stop takes no 'size'; only scale does"),
        ({"verb": "approve", "target": "first"}, "approve: target must be the order id"),
        ({"verb": "phase", "target": "busy", "force": True}, "force: Extra inputs are not"),
        ([1, 2], "the body must be a JSON object"),
    ]
    for body, reason in cases:
        response = client.post("/api/command", json=body)
        assert response.status_code == 422, (body, response.text)
        assert reason in response.json()["detail"], (body, response.json())
    response = client.post(
        "/api/command", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 422
    other = client.post("/api/command", content=b'{"verb": "stop"}', headers={"content-type": "x"})
    assert other.status_code == 415 and "application/json" in other.json()["detail"]
    invalid = [e for e in read_audit(audit_path) if e["result"] == "invalid"]
    assert [e["status"] for e in invalid] == [422] * (len(cases) + 1) + [415]
    assert invalid[0]["action"] == "launch" and "verb:" in invalid[0]["message"]


def test_commands_reach_the_supervisor_through_the_command_topic(
    client: TestClient, audit_path: Path, run_supervisor: Callable[..., Supervisor]
) -> None:
    supervisor = run_supervisor(
        f"""
mission: console-api
domain: {{domain}}
security: none  # supervisor and console in this one process: Cyclone gives it one identity
phases: [idle, busy]
systems:
  worker: {{app: "{APP}", phases: [busy], resources: {{cpus: 0.1}}}}
"""
    )
    login(client, COMMANDER)
    ok = client.post("/api/command", json={"verb": "phase", "target": "busy"})
    assert ok.status_code == 200, ok.text
    assert ok.json()["message"] == "phase busy"
    assert supervisor.status()["phase"] == "busy"

    def mission_seen() -> dict[str, Any] | None:
        snapshot = client.get("/api/state").json()
        mission = snapshot["mission"]
        workers = [r for r in snapshot["health"] if r["id"] == "console-api/worker/0"]
        running = workers and workers[0]["state"] == "running" and workers[0]["beat_age_ms"]
        return snapshot if mission and mission["phase"] == "busy" and running else None

    snapshot = wait_for(mission_seen, 30, "the worker running, seen through the console")
    assert snapshot["health"][0]["pid"] > 0 and snapshot["systems_seen"] == ["worker"]

    refused = client.post("/api/command", json={"verb": "phase", "target": "party"})
    assert refused.status_code == 409
    assert "phase 'party' is not a phase of 'console-api'" in refused.json()["detail"]
    no_cluster = client.post("/api/command", json={"verb": "scale", "target": "mc", "size": 3})
    assert no_cluster.status_code == 409 and "not a virtual cluster" in no_cluster.text
    stop = client.post("/api/command", json={"verb": "stop", "target": "worker"})
    assert stop.status_code == 200
    wait_for(lambda: not supervisor.status()["instances"], 20, "the worker stopped")

    metrics = client.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(metrics.text)}
    (info,) = families["mcc_mission_info"].samples
    assert info.labels["mission"] == "console-api" and info.labels["phase"] == "busy"
    commands = {s.labels["result"]: s.value for s in families["mcc_console_commands"].samples}
    assert commands == {"ok": 2, "failed": 2}
    assert audited(audit_path)[1:] == [
        ("cmdr", "phase", "busy", "ok", 200),
        ("cmdr", "phase", "party", "failed", 409),
        ("cmdr", "scale", "mc", "failed", 409),
        ("cmdr", "stop", "worker", "ok", 200),
    ]


def test_approval_goes_to_tewa_and_times_out_without_one(
    client: TestClient, audit_path: Path
) -> None:
    login(client, COMMANDER)
    response = client.post("/api/command", json={"verb": "approve", "target": "17"})
    assert response.status_code == 504
    assert "no replier on topic 'Command' within 2 s" in response.json()["detail"]
    assert audited(audit_path)[-1] == ("cmdr", "approve", "17", "timeout", 504)


def test_metrics_need_no_session_and_parse(client: TestClient) -> None:
    response = client.get("/metrics")
    assert response.status_code == 200
    names = {f.name for f in text_string_to_metric_families(response.text)}
    assert {"mcc_tracks", "mcc_console_clients", "mcc_console_bus_samples"} <= names
    assert client.get("/healthz").json()["ok"] is True


def test_websocket_sends_at_most_10_updates_per_second(client: TestClient) -> None:
    from starlette.websockets import WebSocketDisconnect

    with client.websocket_connect("ws://localhost/ws") as ws:  # no session: told so, then closed
        assert ws.receive_json() == {"type": "error", "status": 401, "detail": "log in"}
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_json()
        assert closed.value.code == 4401
    login(client, OBSERVER)
    state = client.app.state.console.state
    stop = threading.Event()

    def produce() -> None:  # the bus side changing the state ~200 times a second
        n = 0
        while not stop.wait(0.005):
            n += 1
            state.on_air_pictures([picture(time.time_ns(), (1, float(n), 0.0))])

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    try:
        with client.websocket_connect("ws://localhost/ws") as ws:
            hello = ws.receive_json()
            assert (hello["type"], hello["user"], hello["role"]) == ("hello", "obs", "observer")
            assert hello["layout"]["phases"] == ["idle", "busy"]
            arrivals, versions = [], []
            for _ in range(12):
                update = ws.receive_json()
                arrivals.append(time.monotonic())
                versions.append(update["version"])
    finally:
        stop.set()
        producer.join(5)
    assert update["type"] == "state" and update["tracks"][0]["id"] == 1
    assert versions == sorted(versions) and len(set(versions)) == 12  # always the newest
    # 11 intervals at >= 100 ms each (a little slack for the event loop's timer)
    assert arrivals[-1] - arrivals[0] >= 11 * 0.095, arrivals
    assert versions[-1] - versions[0] > 11  # the producer outran the feed: updates merged


def test_a_demoted_commander_loses_control_at_once(client: TestClient, accounts: Path) -> None:
    from starlette.websockets import WebSocketDisconnect

    login(client, COMMANDER)
    with client.websocket_connect("ws://localhost/ws") as ws:
        assert ws.receive_json()["role"] == "commander"
        UserStore(accounts).add(*COMMANDER, "observer")  # e.g. by `mcc console adduser`
        refused = client.post("/api/command", json={"verb": "phase", "target": "busy"})
        assert refused.status_code == 403
        with pytest.raises(WebSocketDisconnect) as closed:
            for _ in range(100):  # state updates (≥ 1/s) until the close (within ~1 s)
                ws.receive_json()
        assert closed.value.code == 4000  # the page reconnects and gets its new role
    with client.websocket_connect("ws://localhost/ws") as ws:
        assert ws.receive_json()["role"] == "observer"


def test_the_state_api_and_the_websocket_carry_identity_names(client: TestClient) -> None:
    login(client, OBSERVER)
    state = client.app.state.console.state
    msg = picture(time.time_ns(), (901, 9000.0, 12000.0), (5, 0.0, 100.0))
    friend, hostile = Identity.IDENTITY_FRIEND.value, Identity.IDENTITY_HOSTILE.value
    iff = [IffAnswer.IFF_FRIEND.value, IffAnswer.IFF_NO_REPLY.value]
    state.on_air_pictures(
        [dataclasses.replace(msg, identity=pack([friend, hostile], "u1"), iff=pack(iff, "u1"))]
    )
    want = [(5, "hostile", "no_reply"), (901, "friend", "friend")]
    snapshot = client.get("/api/state").json()
    assert [(t["id"], t["identity"], t["iff"]) for t in snapshot["tracks"]] == want
    with client.websocket_connect("ws://localhost/ws") as ws:
        assert ws.receive_json()["type"] == "hello"
        update = ws.receive_json()
    assert [(t["id"], t["identity"], t["iff"]) for t in update["tracks"]] == want
    assert update["stats"]["identities"] == {"friend": 1, "hostile": 1}
