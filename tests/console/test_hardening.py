"""The console against the attacks of its security review, on a real bus and a real server:
poisoned and far-future samples, a huge picture, login guessing, cross-site requests, DNS
rebinding, TLS, the default bind address, and whether the bus is secured."""

from __future__ import annotations

import json
import os
import socket
import ssl
import stat
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2 as httpx
import psutil
import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import WebSocketDenialResponse

from mcc.bus import Bus
from mcc.console import ConsoleConfig, create_app, read_audit
from mcc.console.server import host_pattern
from mcc.errors import MccError
from mcc.orchestrate import Supervisor
from mcc.types import MissionStatus, Threat, Track, TrackStatus
from tests.conftest import run_cli, wait_for
from tests.console.conftest import COMMANDER, OBSERVER, console_process
from tests.console.test_state import _big_picture
from tests.orchestrate.test_supervisor import APP

S = 1_000_000_000
DECADE_NS = 10 * 365 * 86_400 * S


def strict_json(text: str) -> Any:
    """``text`` parsed as a browser's ``JSON.parse`` would: NaN and Infinity are errors."""

    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


@contextmanager
def console_client(
    accounts: Path, tmp_path: Path, domain_id: int, **options: Any
) -> Iterator[TestClient]:
    config = ConsoleConfig(
        domain=domain_id, users_path=accounts, audit_path=tmp_path / "audit.jsonl", **options
    )
    with TestClient(create_app(config), base_url="http://localhost") as client:
        yield client


def login(client: TestClient, account: tuple[str, str], **headers: str) -> Any:
    return client.post(
        "/api/login", json={"name": account[0], "password": account[1]}, headers=headers
    )


def metric(text: str, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None


def ready_line(log: Path) -> str:
    (line,) = [x for x in log.read_text().splitlines() if x.startswith("mcc console: http")]
    return line


# -- 1. poisoned picture, 2. sender clocks, 3. size --------------------------------------------


def test_a_poisoned_sample_on_the_bus_never_reaches_the_browsers(
    accounts: Path, tmp_path: Path, domain_id: int, bus_env: dict[str, str]
) -> None:
    # MissionStatus.clusters_json is text: the bus cannot check its numbers, and Python's
    # json.loads takes NaN. Before, every update then carried NaN and no browser could read it.
    poisoned = '{"mc": {"size": NaN, "min": 1, "max": 4}}'
    with (
        console_client(accounts, tmp_path, domain_id) as client,
        Bus(domain_id, name="hostile") as bus,
    ):
        assert login(client, OBSERVER).status_code == 200
        state = client.app.state.console.state
        missions, tracks = bus.writer("MissionStatus"), bus.writer("Track")

        def delivered() -> bool:
            now = time.time_ns()
            missions.write(
                MissionStatus(mission="m", phase="x", time_ns=now, clusters_json=poisoned)
            )
            tracks.write(
                Track(track_id=2, x_m=5.0, update_ns=now, status=TrackStatus.TRACK_CONFIRMED)
            )
            return state.samples["MissionStatus"] > 0 and state.samples["Track"] > 0

        wait_for(delivered, 20, "the poisoned MissionStatus and a Track at the console")
        snap = strict_json(client.get("/api/state").text)  # before: "NaN is not JSON"
        assert snap["mission"] is None and [t["id"] for t in snap["tracks"]] == [2]
        assert snap["dropped"]["MissionStatus"]["nonfinite"] >= 1
        with client.websocket_connect("ws://localhost/ws") as ws:
            assert strict_json(ws.receive_text())["type"] == "hello"
            update = strict_json(ws.receive_text())
        assert update["type"] == "state" and [t["id"] for t in update["tracks"]] == [2]
        text = client.get("/metrics").text
        dropped = metric(
            text, "mcc_console_samples_dropped_total", topic="MissionStatus", reason="nonfinite"
        )
        assert dropped is not None and dropped >= 1


def test_far_future_stamps_on_the_bus_neither_hide_threats_nor_freeze_the_mission(
    accounts: Path, tmp_path: Path, domain_id: int, bus_env: dict[str, str]
) -> None:
    with (
        console_client(accounts, tmp_path, domain_id, mission="m") as client,
        Bus(domain_id, name="hostile") as bus,
    ):
        assert login(client, OBSERVER).status_code == 200
        state = client.app.state.console.state
        missions, threats = bus.writer("MissionStatus"), bus.writer("Threat")

        def sent_from_the_future() -> bool:
            ahead = time.time_ns() + DECADE_NS
            threats.write(Threat(track_id=666, rank=1, score=1.0, update_ns=ahead))
            missions.write(MissionStatus(mission="m", phase="frozen", time_ns=ahead))
            return state.samples["Threat"] > 0 and state.samples["MissionStatus"] > 0

        wait_for(sent_from_the_future, 20, "the far-future samples at the console")

        def current() -> Any:
            now = time.time_ns()
            threats.write(Threat(track_id=7, rank=2, score=0.8, update_ns=now))
            missions.write(MissionStatus(mission="m", phase="engagement", time_ns=now))
            snap = strict_json(client.get("/api/state").text)
            phase = snap["mission"]["phase"] if snap["mission"] else None
            shown = [t["track_id"] for t in snap["threats"]]
            return snap if phase == "engagement" and shown == [7] else None

        # Before: the far-future threat hid the real one, the far-future status stayed.
        snap = wait_for(current, 20, "the real threat and mission status at the console")
        assert set(snap["dropped"]) == {"Threat", "MissionStatus"}
        assert snap["dropped"]["Threat"] == {"future": state.dropped[("Threat", "future")]}


def test_a_huge_picture_makes_small_updates_and_the_page_is_told(
    accounts: Path, tmp_path: Path, domain_id: int, bus_env: dict[str, str]
) -> None:
    with console_client(accounts, tmp_path, domain_id) as client:
        assert login(client, OBSERVER).status_code == 200
        client.app.state.console.state.on_air_pictures([_big_picture(time.time_ns(), 20_000)])
        response = client.get("/api/state")
        assert len(response.content) < 250_000  # was 3.5 MB
        snap = strict_json(response.text)
        assert snap["stats"]["tracks"] == 1000 and snap["left_out"] == {"tracks": 19_000}
        with client.websocket_connect("ws://localhost/ws") as ws:
            ws.receive_text()
            assert len(ws.receive_text()) < 250_000
        text = client.get("/metrics").text
        assert metric(text, "mcc_console_left_out_total", kind="tracks") == 19_000
        assert 0 < (metric(text, "mcc_console_update_bytes") or 0) < 250_000


# -- 4. login throttle ---------------------------------------------------------------------------


def test_guesses_in_parallel_or_from_other_addresses_get_no_extra_tries(
    accounts: Path, tmp_path: Path, domain_id: int, bus_env: dict[str, str]
) -> None:
    args = ("--domain", str(domain_id), "--users", str(accounts), "--audit", str(tmp_path / "a"))
    with console_process(*args, env=bus_env, log=tmp_path / "console.log") as console:
        url = console.url + "api/login"

        def guess(i: int, name: str = "cmdr", source: str = "127.0.0.1") -> int:
            with httpx.Client(transport=httpx.HTTPTransport(local_address=source)) as client:
                return client.post(url, json={"name": name, "password": f"guess-{i}"}).status_code

        # Before: the throttle was checked before the (50 ms) hash and recorded after it, so
        # 60 guesses at once all got an answer.
        with ThreadPoolExecutor(60) as pool:
            statuses = list(pool.map(guess, range(60)))
        assert sorted(statuses) == [401] * 10 + [429] * 50
        # Before: throttled per address only; 127.0.0.2 got ten fresh tries at the commander.
        assert guess(99, source="127.0.0.2") == 429
        assert guess(99, name="obs", source="127.0.0.2") == 401  # the observer is not locked
        # Per address too: ten failures with ten names, then no more tries from there.
        assert [guess(i, name=f"x{i}", source="127.0.0.3") for i in range(10)] == [401] * 10
        with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.3")) as client:
            refused = client.post(url, json={"name": "obs", "password": OBSERVER[1]})
        assert refused.status_code == 429 and "wait 5 minutes" in refused.json()["detail"]
        with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.4")) as client:
            assert client.post(url, json={"name": "obs", "password": OBSERVER[1]}).is_success
        metrics = httpx.get(console.url + "metrics").text
        assert metric(metrics, "mcc_console_logins_total", result="throttled") == 52


def test_someone_elses_failures_do_not_lock_the_commander_out_of_a_known_workstation() -> None:
    from mcc.console.auth import LoginThrottle

    throttle = LoginThrottle(max_failures=10)

    def attempt(account: str, client: str, ok: bool) -> bool:
        try_ = throttle.reserve(account, client)
        if try_ is None:
            return False
        try_.succeeded() if ok else try_.failed()
        return True

    assert attempt("cmdr", "10.0.0.5", ok=True)  # the commander's workstation
    # a guesser spreads 10 failures over 10 addresses, then every new address is refused
    assert all(attempt("cmdr", f"10.0.1.{i}", ok=False) for i in range(10))
    assert not attempt("cmdr", "10.0.2.1", ok=False)
    assert throttle.blocked("CMDR ", "10.0.2.1")
    # the commander's right password from the workstation that logged in before: admitted
    assert not throttle.blocked("cmdr", "10.0.0.5") and attempt("cmdr", "10.0.0.5", ok=True)
    # ... and one login forgives nobody else's guesses
    assert throttle.blocked("cmdr", "10.0.2.1")
    # per address and per account-at-address as before
    assert all(attempt(f"x{i}", "10.0.3.1", ok=False) for i in range(10))
    assert not attempt("obs", "10.0.3.1", ok=True)


# -- 5. cross-site requests ----------------------------------------------------------------------


def test_another_site_can_neither_log_in_nor_lock_the_commander_out(
    accounts: Path, tmp_path: Path, domain_id: int, bus_env: dict[str, str]
) -> None:
    creds = json.dumps({"name": COMMANDER[0], "password": COMMANDER[1]})
    wrong = json.dumps({"name": COMMANDER[0], "password": "wrong"})
    evil = {"origin": "http://evil.example"}
    with console_client(accounts, tmp_path, domain_id) as client:
        # A form or a no-cors fetch can send text/plain (no preflight): before, it logged in.
        plain = client.post("/api/login", content=creds, headers={"content-type": "text/plain"})
        assert plain.status_code == 415 and "set-cookie" not in plain.headers
        form = client.post("/api/login", data={"name": "cmdr", "password": COMMANDER[1]})
        assert form.status_code == 415
        assert login(client, COMMANDER, **evil).status_code == 403
        assert login(client, COMMANDER, origin="null").status_code == 403
        # Before: 30 cross-site wrong guesses locked the commander out for 5 minutes.
        for _ in range(15):
            headers = {"content-type": "text/plain", **evil}
            assert client.post("/api/login", content=wrong, headers=headers).status_code == 403
            assert client.post("/api/login", content=wrong, headers=evil).status_code == 403
        assert login(client, COMMANDER, origin="http://localhost").status_code == 200
        # Logout: another site cannot end the commander's session either.
        assert client.post("/api/logout", json={}, headers=evil).status_code == 403
        assert client.post("/api/logout", content=b"{}").status_code == 415
        assert client.get("/api/me").status_code == 200
        assert client.post("/api/logout", json={}).status_code == 200
        assert client.get("/api/me").status_code == 401
        text = client.get("/metrics").text
        assert metric(text, "mcc_console_logins_total", result="refused") == 32
    entries = [
        (e["action"], e["status"], e["message"]) for e in read_audit(tmp_path / "audit.jsonl")
    ]
    assert entries.count(("login", 403, "cross-origin request refused")) == 32
    assert entries.count(("logout", 403, "cross-origin request refused")) == 1
    # An origin on the allow-list (e.g. a TLS proxy's) may.
    proxied = ("https://toc.example",)
    with console_client(accounts, tmp_path, domain_id, allowed_origins=proxied) as client:
        assert login(client, COMMANDER, origin="https://toc.example").status_code == 200
        assert login(client, COMMANDER, origin="https://toc.example.evil").status_code == 403


# -- 6. DNS rebinding, 8. default bind address ---------------------------------------------------


def test_only_allowed_host_names_are_answered(
    accounts: Path, tmp_path: Path, domain_id: int, bus_env: dict[str, str]
) -> None:
    with console_client(accounts, tmp_path, domain_id) as client:
        # A rebound name (evil.example → 127.0.0.1) read /metrics before.
        for path in ("/metrics", "/healthz", "/login"):
            assert client.get(path, headers={"host": "evil.example:8080"}).status_code == 400
        assert login(client, COMMANDER, host="evil.example").status_code == 400
        assert client.get("/metrics", headers={"host": "testserver"}).status_code == 400
        with pytest.raises(WebSocketDenialResponse) as denied:
            client.websocket_connect("ws://evil.example/ws").__enter__()
        assert denied.value.status_code == 400
        for host in ("localhost:8080", "127.0.0.1", "[::1]:8080"):
            assert client.get("/metrics", headers={"host": host}).status_code == 200, host
        assert client.get("/metrics", headers={"host": "toc.example"}).status_code == 400
    with console_client(accounts, tmp_path, domain_id, allowed_hosts=("TOC.example",)) as client:
        for host in ("toc.example", "Toc.Example:8443", "localhost"):
            assert client.get("/metrics", headers={"host": host}).status_code == 200, host
    assert host_pattern("::1") == "[::1]" and host_pattern("Toc.Example") == "toc.example"
    for bad in ("*", "*.example", "toc.example:8080", "a b"):
        with pytest.raises(MccError, match="use a host name or an address"):
            host_pattern(bad)


def test_the_console_listens_on_loopback_unless_told_and_checks_hosts(
    accounts: Path, tmp_path: Path, domain_id: int, bus_env: dict[str, str]
) -> None:
    args = ("--domain", str(domain_id), "--users", str(accounts), "--audit", str(tmp_path / "a"))
    args += ("--allow-host", "toc.example")
    with console_process(*args, env=bus_env, log=tmp_path / "console.log") as console:
        assert console.url.startswith("http://127.0.0.1:")
        listening = [
            c.laddr
            for c in psutil.Process(console.proc.pid).net_connections("tcp")
            if c.status == psutil.CONN_LISTEN
        ]
        assert [addr.ip for addr in listening] == ["127.0.0.1"]
        metrics = console.url + "metrics"
        assert httpx.get(metrics, headers={"host": "evil.example"}).status_code == 400
        assert httpx.get(metrics, headers={"host": "toc.example"}).status_code == 200
        assert httpx.get(metrics).status_code == 200
        # The websocket handshake of a rebound page is refused too.
        with socket.create_connection(("127.0.0.1", console.port), timeout=10) as sock:
            sock.sendall(
                b"GET /ws HTTP/1.1\r\nHost: evil.example\r\nUpgrade: websocket\r\n"
                b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                b"Sec-WebSocket-Version: 13\r\n\r\n"
            )
            assert sock.recv(1024).split(b"\r\n")[0] == b"HTTP/1.1 400 Bad Request"


# -- 7. TLS ----------------------------------------------------------------------------------


def test_https_with_a_server_certificate_from_the_mission_keystore(
    accounts: Path, tmp_path: Path, domain_id: int, bus_env: dict[str, str]
) -> None:
    keystore = tmp_path / "keystore"
    run_cli(["security", "init", str(keystore), "--domain", str(domain_id)], env=bus_env)
    hosts = ["--host", "localhost", "--host", "127.0.0.1", "--host", "::1"]
    made = run_cli(["security", "tls", str(keystore), *hosts], env=bus_env)
    folder = keystore / "tls" / "console"
    cert_path, key_path, ca_path = (
        folder / "cert.pem",
        folder / "key.pem",
        keystore / "ca" / "identity_ca.pem",
    )
    assert f"--tls-cert {cert_path} --tls-key {key_path}" in made.stdout
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca_path.read_bytes()))
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    assert [str(a) for a in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "::1"]
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca

    args = ("--domain", str(domain_id), "--users", str(accounts), "--audit", str(tmp_path / "a"))
    tls = ("--tls-cert", str(cert_path), "--tls-key", str(key_path))
    with console_process(*args, *tls, env=bus_env, log=tmp_path / "console.log") as console:
        assert console.url.startswith("https://127.0.0.1:")
        trust = ssl.create_default_context(cafile=str(ca_path))
        for base in (console.url, f"https://localhost:{console.port}/"):
            with httpx.Client(base_url=base, verify=trust) as client:
                assert client.get("/healthz").json()["ok"] is True
                response = client.post(
                    "/api/login", json={"name": COMMANDER[0], "password": COMMANDER[1]}
                )
                assert response.status_code == 200 and "Secure" in response.headers["set-cookie"]
        with pytest.raises(httpx.HTTPError):
            httpx.get(console.url + "healthz", verify=ssl.create_default_context())  # untrusted
    half = run_cli(["console", *args, "--tls-cert", str(cert_path)], env=bus_env, check=False)
    assert half.returncode == 2 and "TLS needs both --tls-cert and --tls-key" in half.stderr
    swapped = run_cli(
        ["console", *args, "--tls-cert", str(key_path), "--tls-key", str(cert_path)],
        env=bus_env,
        check=False,
    )
    assert swapped.returncode == 2 and "not a PEM certificate and its private key" in swapped.stderr
    wildcard = run_cli(
        ["security", "tls", str(keystore), "--host", "*.example"], env=bus_env, check=False
    )
    assert wildcard.returncode != 0 and "use a host name" in wildcard.stderr


# -- 9. an unsecured bus says so -------------------------------------------------------------

SECURED = f"""
mission: console-secured
domain: {{domain}}
phases: [idle, busy]
systems:
  worker: {{app: "{APP}", phases: [busy], resources: {{cpus: 0.1}}}}
"""


def test_the_banner_and_metrics_say_whether_the_bus_is_secured(
    accounts: Path,
    tmp_path: Path,
    domain_id: int,
    bus_env: dict[str, str],
    run_supervisor: Callable[..., Supervisor],
) -> None:
    args = ("--users", str(accounts), "--audit", str(tmp_path / "a"))
    log = tmp_path / "plain.log"
    with console_process("--domain", str(domain_id), *args, env=bus_env, log=log) as console:
        assert "· bus NOT SECURED (security: none) ·" in ready_line(log)
        metrics = httpx.get(console.url + "metrics").text
        assert metric(metrics, "mcc_console_bus_secured") == 0
    assert "warning: the bus is not secured" in log.read_text()

    # A secured mission found in the registry: the console joins as its console identity.
    run_supervisor(SECURED)
    env = {**bus_env, "MCC_HOME": os.environ["MCC_HOME"]}
    log = tmp_path / "secured.log"
    with console_process("--mission", "console-secured", *args, env=env, log=log) as console:
        assert "· bus secured (DDS Security) ·" in ready_line(log)
        assert metric(httpx.get(console.url + "metrics").text, "mcc_console_bus_secured") == 1
        with httpx.Client(base_url=console.url) as client:
            client.post("/api/login", json={"name": OBSERVER[0], "password": OBSERVER[1]})

            def mission() -> Any:
                return client.get("/api/state").json()["mission"]

            seen = wait_for(mission, 30, "the secured mission's status at the console")
        assert seen["name"] == "console-secured"
    assert "not secured" not in log.read_text()
