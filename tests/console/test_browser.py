"""The console in a real browser (Debian's Chromium through Playwright) against a real mission:
radar, tracker, TEWA (approval mode) and a launcher as processes under a supervisor."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from mcc.console import read_audit
from mcc.orchestrate import Supervisor
from tests.apps.test_tewa import SMALL, WEAPONS
from tests.console.conftest import (
    COMMANDER,
    OBSERVER,
    console_process,
    friendly_scenario,
    open_page,
)

MISSION = """
mission: console-test
domain: {domain}
phases: [surveillance, engagement]
systems:
  truth: {app: "mcc.apps.radar:truth", config: {scenario: SMALL}, resources: {cpus: 0.1}}
  radar:
    app: mcc.apps.radar:radar
    config: {scenario: SMALL}
    after: [truth]
    resources: {cpus: 0.1}
  tracker:
    app: mcc.apps.tracker:tracker
    config: {scenario: SMALL}
    after: [radar]
    resources: {cpus: 0.1}
  tewa:
    app: mcc.apps.tewa:tewa
    config: {scenario: SMALL, weapons: WEAPONS, approval: true}
    phases: [engagement]
    resources: {cpus: 0.1}
  launcher:
    app: mcc.apps.launcher:launcher
    config: {weapons: WEAPONS}
    phases: [engagement]
    resources: {cpus: 0.1}
""".replace("SMALL", SMALL)

APPROVE = '#orders tr[data-status="proposed"] button[data-action="approve"]'


@pytest.mark.slow
def test_commander_watches_commands_approves_and_survives_a_restart(
    browser: Any,
    accounts: Path,
    tmp_path: Path,
    domain_id: int,
    bus_env: dict[str, str],
    run_supervisor: Callable[..., Supervisor],
) -> None:
    from playwright.sync_api import expect

    weapons = tmp_path / "weapons.yaml"
    weapons.write_text(WEAPONS)
    text = MISSION.replace("WEAPONS", str(weapons))
    # The radar interrogates IFF and a friendly fighter (target 901) flies through its coverage
    text = text.replace(SMALL, str(friendly_scenario(SMALL, tmp_path / "friendly.yaml")))
    manifest = tmp_path / "mission.yaml"
    manifest.write_text(text.replace("{domain}", str(domain_id)))
    supervisor = run_supervisor(text)  # secured (the default)
    audit = tmp_path / "audit.jsonl"
    log = tmp_path / "console.log"
    args = ("--manifest", str(manifest), "--users", str(accounts), "--audit", str(audit))

    # The console as the mission's console identity (what `mcc console` finds in the registry)
    console_env = {**bus_env, **supervisor.console_env}
    with console_process(*args, env=console_env, log=log) as console:
        page = open_page(browser, console.url, COMMANDER)
        expect(page.locator("#who")).to_have_text("cmdr · commander")
        assert page.evaluate("mcc.secured") is True  # the console identity's DDS Security
        expect(page.locator("#bus-unsecured")).to_be_hidden()
        # Tracks appear on the air picture, then move.
        page.wait_for_function(
            "mcc.state && mcc.state.tracks.some(t => t.status === 'confirmed')", timeout=90_000
        )
        expect(page.locator("#mission-name")).to_have_text("console-test")
        track = page.evaluate("mcc.state.tracks.find(t => t.status === 'confirmed')")
        page.wait_for_function(
            """([id, x, y]) => {
                const t = mcc.state.tracks.find(t => t.id === id);
                return t && Math.hypot(t.x - x, t.y - y) > 50;
            }""",
            arg=[track["id"], track["x"], track["y"]],
            timeout=30_000,
        )
        assert int(page.inner_text("#kpi-tracks")) >= 1
        # The friend (IFF Mode 5 replies) is drawn as a friend on the PPI and listed as one.
        page.wait_for_function(
            "mcc.state.tracks.some(t => t.identity === 'friend' "
            "&& mcc.ppi.drawn.get(t.id) === 'friend')",
            timeout=60_000,
        )
        friend = page.evaluate("mcc.state.tracks.find(t => t.identity === 'friend').id")
        page.evaluate("id => mcc.ppi.select(id)", friend)
        expect(page.locator("#track-card dd").first).to_have_text("friend")
        assert int(page.inner_text("#kpi-friends")) >= 1
        expect(page.locator("#identity-errors")).to_be_hidden()
        expect(page.locator('#health tr[data-id="console-test/tracker/0"]')).to_have_attribute(
            "data-state", "running"
        )

        # The commander changes the phase: TEWA and the launcher start.
        page.select_option("#phase-select", "engagement")
        page.click("#phase-apply")
        expect(page.locator(".toast.ok")).to_contain_text("phase engagement: done")
        for system in ("tewa", "launcher"):
            row = page.locator(f'#health tr[data-id="console-test/{system}/0"]')
            expect(row).to_have_attribute("data-state", "running", timeout=90_000)
        expect(page.locator("#phase")).to_have_text("engagement")

        # A threat is ranked; TEWA proposes an engagement; the commander approves it.
        first_rank = page.locator("#threats tbody tr").first.locator("td").first
        expect(first_rank).to_have_text("1", timeout=60_000)
        approve = page.locator(APPROVE).first
        approve.wait_for(timeout=60_000)
        order_id = int(
            page.locator('#orders tr[data-status="proposed"]').first.get_attribute("data-order")
        )
        page.locator(f'#orders tr[data-order="{order_id}"] button[data-action="approve"]').click()
        page.wait_for_function(
            "id => mcc.state.orders.some(o => o.id === id && o.status !== 'proposed')",
            arg=order_id,
            timeout=30_000,
        )
        actions = [(e["who"], e["action"], e["target"], e["result"]) for e in read_audit(audit)]
        # TEWA never proposed to engage the friend; the threat table lists identities.
        assert page.evaluate("id => mcc.state.orders.every(o => o.track !== id)", friend)
        expect(page.locator("#threats tbody tr").first.locator(".ident")).to_have_count(1)
        assert ("cmdr", "phase", "engagement", "ok") in actions
        assert ("cmdr", "approve", str(order_id), "ok") in actions
        port, updates = console.port, page.evaluate("mcc.updates")

    # The console goes away: the page says so, then reconnects to the new one by itself.
    page.wait_for_function("mcc.link !== 'live'", timeout=20_000)
    with console_process(*args, env=console_env, log=log, port=port):
        page.wait_for_function(
            "n => mcc.link === 'live' && mcc.updates > n && mcc.state.tracks.length > 0",
            arg=updates,
            timeout=60_000,
        )
        assert page.url == f"http://127.0.0.1:{port}/"  # still logged in: no login page
        expect(page.locator("#link")).to_have_text("live")
    assert page.errors == []


def test_observer_sees_the_console_but_cannot_command(
    browser: Any, accounts: Path, tmp_path: Path, domain_id: int, bus_env: dict[str, str]
) -> None:
    from playwright.sync_api import expect

    audit = tmp_path / "audit.jsonl"
    args = ("--domain", str(domain_id), "--users", str(accounts), "--audit", str(audit))
    with console_process(*args, env=bus_env, log=tmp_path / "console.log") as console:
        page = open_page(browser, console.url, OBSERVER)
        expect(page.locator("#role-badge")).to_have_text("observer")
        expect(page.locator("#bus-unsecured")).to_have_text("bus not secured")  # --domain only
        expect(page.locator("#readonly-note")).to_be_visible()
        for control in ("#phase-apply", "#system-stop", "#cluster-scale"):
            expect(page.locator(control)).to_be_hidden()
        # Going round the UI does not help: the server refuses and audits it.
        status, detail = page.evaluate(
            """async () => {
                const r = await fetch('/api/command', {
                    method: 'POST',
                    headers: {'content-type': 'application/json'},
                    body: JSON.stringify({verb: 'phase', target: 'engagement'}),
                });
                return [r.status, (await r.json()).detail];
            }"""
        )
        assert (status, detail) == (403, "obs is an observer: commands need the commander role")
        assert page.errors == []
    (entry,) = [e for e in read_audit(audit) if e["action"] == "phase"]
    assert (entry["who"], entry["role"], entry["result"], entry["status"]) == (
        "obs",
        "observer",
        "refused",
        403,
    )


def test_a_page_of_another_site_cannot_log_in_or_lock_the_commander_out(
    browser: Any, accounts: Path, tmp_path: Path, domain_id: int, bus_env: dict[str, str]
) -> None:
    """What another page the operator's browser opens could do to the console: send it
    text/plain POSTs (a "simple" request: no CORS preflight; the answer is opaque, but the
    request arrives). Before, 10 wrong guesses from such a page locked the commander out."""
    audit = tmp_path / "audit.jsonl"
    args = ("--domain", str(domain_id), "--users", str(accounts), "--audit", str(audit))
    with (
        console_process(*args, env=bus_env, log=tmp_path / "console.log") as console,
        other_site("<h1>cat pictures</h1>") as elsewhere,
    ):
        page = browser.new_context().new_page()
        page.goto(elsewhere)  # another origin: 127.0.0.1, another port
        statuses = page.evaluate(
            """async ([url, name]) => {
                const types = [];
                for (let i = 0; i < 15; i++) {
                    const r = await fetch(url, {
                        method: "POST", mode: "no-cors",
                        headers: {"content-type": "text/plain"},
                        body: JSON.stringify({name, password: "guess-" + i}),
                    });
                    types.push(r.type);
                }
                return types;
            }""",
            [console.url + "api/login", COMMANDER[0]],
        )
        assert statuses == ["opaque"] * 15  # sent, the answer hidden from the page
        page.context.close()
        logins = [(e["status"], e["message"]) for e in read_audit(audit)]
        assert logins == [(403, "cross-origin request refused")] * 15  # before: 15 × 401
        # The commander logs in as usual.
        page = open_page(browser, console.url, COMMANDER)
        assert page.evaluate("mcc.role") == "commander"


@contextmanager
def other_site(html: str) -> Iterator[str]:
    """A page served from another origin (a free port on 127.0.0.1); its URL."""
    body = html.encode()

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the name http.server calls)
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
