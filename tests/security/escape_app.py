"""An app (for the confinement test) that tries, from inside a mission's instance, everything a
compromised instance would try to leave its confinement, and records what each attempt got in
``RUN_DIR/escape-INDEX.json``: ``"ok"`` or the error."""

from __future__ import annotations

import json
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path

from mcc.orchestrate.agent import AgentPaths
from mcc.orchestrate.appspec import app
from mcc.orchestrate.runtime import AppContext
from mcc.security.mission import Topics


def _try(action: Callable[[], object]) -> str:
    try:
        action()
    except Exception as exc:  # what it got is the record, whatever it is
        return f"{type(exc).__name__}: {exc}"[:300]
    return "ok"


@app(topics=Topics())
def main(ctx: AppContext) -> int:
    home = Path(os.environ["MCC_HOME"])
    keystore = home / "keystores" / ctx.identity.mission
    me = f"{ctx.identity.system}.{ctx.identity.index}"
    other = keystore / "identities" / ctx.identity.mission / "tracker.0"  # the test's other
    agent_socket = str(ctx.settings.agent_socket)
    token_file = AgentPaths.for_mission(home, ctx.identity.mission, ctx.settings.domain).token

    def mint() -> None:
        from mcc.security import Keystore

        Keystore(keystore).identity(f"{ctx.identity.mission}/evil", (), domains=(0,))

    def take_over_agent() -> None:
        try:
            token = token_file.read_text().strip()
        except OSError:
            token = "guessed" * 8
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(agent_socket)
            hello = {"op": "hello", "pid": os.getpid(), "claim": True, "token": token}
            sock.sendall((json.dumps(hello) + "\n").encode())
            answer = json.loads(sock.makefile().readline() or "{}")
            if "hello" not in answer:
                raise PermissionError(f"agent said {answer}")

    delivered = Path(str(ctx.settings.identity_dir))  # where its agent wrote its identity
    others_delivered = delivered.parent / f"{ctx.identity.mission}.tracker.0"

    def config_names_no_keystore() -> None:
        config = os.environ.get("CYCLONEDDS_URI", "")
        if str(keystore) in config or "PRIVATE KEY" in config:
            raise AssertionError("the keystore or a key is in the environment")

    def sqlite_spills() -> None:
        """What an app's SQLite does with a large sort inside a transaction: it spills to its
        temporary folder, which it picks by access(2) (Landlock does not change that): the
        instance's ``TMPDIR`` must name one the confinement lets it write."""
        import sqlite3

        db = sqlite3.connect(ctx.run_dir / f"spill-{me}.sqlite", isolation_level=None)
        try:
            db.execute("PRAGMA cache_size = 2")
            db.execute("CREATE TABLE t (a INTEGER PRIMARY KEY, b BLOB, k INT)")
            db.execute("BEGIN")
            rows = ((os.urandom(200), i % 7) for i in range(20_000))
            db.executemany("INSERT INTO t (b, k) VALUES (?, ?)", rows)
            db.execute("SAVEPOINT s")
            db.execute("DELETE FROM t WHERE a IN (SELECT a FROM t WHERE k = 3 ORDER BY b)")
            db.execute("RELEASE s")
            db.execute("COMMIT")
        finally:
            db.close()

    attempts = {
        "own identity": lambda: (delivered / "key.pem").read_bytes(),
        "own identity in the keystore": lambda: (
            keystore / "identities" / ctx.identity.mission / me / "key.pem"
        ).read_bytes(),
        "no keystore in the environment": config_names_no_keystore,
        "other identity as delivered": lambda: (others_delivered / "key.pem").read_bytes(),
        "ca key": lambda: (keystore / "ca" / "identity_ca.key").read_bytes(),
        "ca key via /proc/PPID/root": lambda: Path(
            f"/proc/{os.getppid()}/root{keystore}/ca/permissions_ca.key"
        ).read_bytes(),
        "mint an identity": mint,
        "other identity": lambda: (other / "key.pem").read_bytes(),
        "agent token": token_file.read_bytes,
        "take over the agent": take_over_agent,
        "agent memory": lambda: Path(f"/proc/{os.getppid()}/environ").read_bytes(),
        "signal the agent": lambda: os.kill(os.getppid(), signal.SIGCONT),
        "write the working folder": lambda: Path("escape-was-here").write_text("x"),
        "write the run folder": lambda: (ctx.run_dir / f"note-{me}").write_text("x"),
        "write /tmp": lambda: Path(f"/tmp/mcc-escape-{os.getpid()}").write_text("x"),
        "sqlite's temporary files": sqlite_spills,
    }
    results = {name: _try(action) for name, action in attempts.items()}
    Path(f"/tmp/mcc-escape-{os.getpid()}").unlink(missing_ok=True)
    (ctx.run_dir / f"escape-{ctx.identity.index}.json").write_text(json.dumps(results, indent=1))
    ctx.stop.wait()
    return 0
