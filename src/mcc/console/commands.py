"""`mcc console` (serve the web console) and `mcc console adduser` (operator accounts)."""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import sys
from pathlib import Path
from typing import Any, NamedTuple

from mcc.bus.transport import Transport
from mcc.errors import MccError
from mcc.settings import current


def add_parsers(sub: Any) -> None:
    """Register `mcc console` on the `mcc` sub-parser set."""
    console = sub.add_parser(
        "console",
        help="the web tactical console: air picture, threats, engagements, health, controls",
        description="Serve the tactical console (a web page) for the mission on a DDS "
        "domain: the air picture, ranked threats, weapons, engagements and the health of "
        "every instance, live; commanders also change the phase, start, stop and scale "
        "systems and approve engagements. Operators log in with accounts made by "
        "`mcc console adduser`; every control action is audited.",
        epilog="Example: mcc console adduser alice --role commander; "
        "mcc console --manifest missions/sam-toc.yaml",
    )
    where = console.add_mutually_exclusive_group()
    where.add_argument(
        "--domain",
        type=int,
        help="DDS domain of the mission (default: the manifest's, or the mission running here)",
    )
    where.add_argument("--mission", help="a mission running here (`mcc up`), found by name")
    console.add_argument(
        "--manifest", help="mission manifest: its phases, systems, scenario and weapons"
    )
    console.add_argument("--scenario", help="scenario file: defended assets, radar coverage")
    console.add_argument("--weapons", help="weapons file: launcher specs")
    console.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (%(default)s: this host only; 0.0.0.0: every interface)",
    )
    console.add_argument("--port", type=int, default=8080, help="port (%(default)s; 0: any)")
    console.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name or address browsers reach the console by (the Host header), beside "
        "localhost, 127.0.0.1, ::1 and the bound address; repeat for more",
    )
    console.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="another origin allowed to send requests, e.g. https://toc.example for a TLS proxy; "
        "repeat for more",
    )
    console.add_argument(
        "--tls-cert", metavar="FILE", help="serve HTTPS with this PEM certificate (chain)"
    )
    console.add_argument(
        "--tls-key",
        metavar="FILE",
        help="its private key (PEM); `mcc security tls KEYSTORE --host NAME` makes both",
    )
    console.add_argument(
        "--users", help="operator accounts (default <MCC_HOME>/console/users.json)"
    )
    console.add_argument(
        "--audit", help="audit log, JSON lines (default <MCC_HOME>/console/audit.jsonl)"
    )
    console.add_argument("--truth", action="store_true", help="overlay the simulation truth")
    console.add_argument(
        "--update-hz", type=float, default=10.0, help="updates per second per browser (≤ 10)"
    )
    console.add_argument("--tag", default=None, help="discovery tag (env MCC_DISCOVERY_TAG)")
    console.set_defaults(func=cmd_console)

    actions = console.add_subparsers(dest="console_command", metavar="ACTION")
    adduser = actions.add_parser(
        "adduser",
        help="create or replace an operator account",
        description="Create or replace operator NAME with a role: observer (read-only) or "
        "commander (may change the phase, start/stop/scale systems, approve engagements). "
        "The password is asked for (twice), or read from the first line of stdin.",
    )
    adduser.add_argument("name")
    adduser.add_argument("--role", required=True, choices=["observer", "commander"])
    adduser.add_argument("--users", default=argparse.SUPPRESS, help="accounts file")
    adduser.add_argument(
        "--password-stdin", action="store_true", help="read the password from stdin"
    )
    adduser.set_defaults(func=cmd_adduser)


def _paths(args: argparse.Namespace) -> tuple[Path, Path]:
    from mcc.console.auth import default_dir

    users = Path(args.users) if getattr(args, "users", None) else default_dir() / "users.json"
    audit = Path(args.audit) if getattr(args, "audit", None) else default_dir() / "audit.jsonl"
    return users, audit


def cmd_adduser(args: argparse.Namespace) -> int:
    from mcc.console.auth import UserStore

    users, _ = _paths(args)
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass(f"password for {args.name}: ")
        if getpass.getpass("again: ") != password:
            raise MccError("the two passwords differ; nothing saved")
    UserStore(users).add(args.name, password, args.role)
    print(f"operator {args.name!r} ({args.role}) saved in {users}")
    return 0


class ConsoleJoin(NamedTuple):
    """Where the console joins: a domain, the mission it commands (None: any on the domain)
    and the bus transport (None: this process's environment, `mcc.bus.Bus`)."""

    domain: int
    mission: str | None
    transport: Transport | None = None


def resolve_domain(
    *,
    domain: int | None,
    mission: str | None,
    manifest: tuple[str, int] | None = None,
    tag: str | None = None,
) -> ConsoleJoin:
    """The domain to join and the mission name to command: from ``--domain``, else the
    registry of missions running here (``--mission``, the manifest's mission, or the only one
    running), else the manifest's domain, else ``MCC_DOMAIN``. A mission found in the registry
    gives its transport and discovery tag (where this process's environment sets none) and,
    secured, the console's identity from its keystore unless the transport carries one
    already. ``tag`` (``--tag``) is the discovery tag whatever else says. Nothing is set in
    ``os.environ``: the transport is returned."""
    from mcc.orchestrate import registry

    settings = current()
    own = _tagged(Transport.from_env() if settings.transport else None, tag)
    if domain is not None:
        return ConsoleJoin(domain, mission or (manifest[0] if manifest else None), own)
    try:
        record = registry.find(mission or (manifest[0] if manifest else None))
    except MccError:
        if mission is not None:
            raise
        if manifest is not None:
            return ConsoleJoin(manifest[1], manifest[0], own)
        if "domain" in settings.model_fields_set:  # MCC_DOMAIN given
            return ConsoleJoin(settings.domain, None, own)
        raise
    base = Transport.from_env() if settings.transport else record.transport
    transport = _tagged(base, tag or settings.discovery_tag or record.discovery_tag)
    if record.keystore:
        transport = _as_console(transport, record.keystore, record.mission)
    return ConsoleJoin(record.domain, record.mission, transport)


def _tagged(transport: Transport | None, tag: str | None) -> Transport | None:
    """``transport`` (None: Cyclone's defaults) with discovery tag ``tag`` (None: as it is)."""
    if tag is None:
        return transport
    return dataclasses.replace(transport or Transport(), discovery_tag=tag)


def _as_console(transport: Transport | None, keystore: str, mission: str) -> Transport:
    """``transport`` with the mission's ``console`` identity, unless it carries a DDS Security
    identity already."""
    from mcc.console.bridge import transport_secured
    from mcc.orchestrate.client import operator_transport
    from mcc.security.mission import CONSOLE

    base = transport or Transport()
    if transport_secured(base):
        return base
    return operator_transport(keystore, mission, CONSOLE, base=base)


def cmd_console(args: argparse.Namespace) -> int:
    from mcc.console.auth import UserStore
    from mcc.console.layout import load_layout
    from mcc.console.server import ConsoleConfig, serve

    layout = load_layout(manifest=args.manifest, scenario=args.scenario, weapons=args.weapons)
    manifest = (
        (layout.mission, layout.domain) if layout.mission and layout.domain is not None else None
    )
    domain, mission, transport = resolve_domain(
        domain=args.domain, mission=args.mission, manifest=manifest, tag=args.tag
    )
    users, audit = _paths(args)
    if not UserStore(users).users():
        raise MccError(
            f"no operator account in {users}: create one with "
            "`mcc console adduser NAME --role commander` (or --users FILE)"
        )
    config = ConsoleConfig(
        domain=domain,
        users_path=users,
        audit_path=audit,
        mission=mission,
        layout=layout,
        truth=args.truth,
        update_hz=args.update_hz,
        allowed_hosts=tuple(args.allow_host),
        allowed_origins=tuple(args.allow_origin),
        transport=transport,
    )
    if args.host not in ("127.0.0.1", "localhost", "::1") and not args.tls_cert:
        print(
            f"mcc console: warning: serving on {args.host} over plain HTTP; use --tls-cert and "
            "--tls-key (or a TLS proxy) before operators log in from other hosts, and "
            "--allow-host NAME for the names they use",
            file=sys.stderr,
        )
    if args.tls_key:
        _warn_if_readable(Path(args.tls_key))

    def ready(url: str, secured: bool | None) -> None:
        bus = "bus secured (DDS Security)" if secured else "bus NOT SECURED (security: none)"
        print(
            f"mcc console: {url} · mission {mission or '(any)'} on domain {domain} · {bus} · "
            f"accounts {users} · audit {audit}",
            flush=True,
        )
        if not secured:
            print(
                "mcc console: warning: the bus is not secured: anyone on its network can "
                "feed this console and read the mission; run it with security: on",
                file=sys.stderr,
                flush=True,
            )

    serve(
        config,
        host=args.host,
        port=args.port,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        on_ready=ready,
    )
    return 0


def _warn_if_readable(key: Path) -> None:
    try:
        mode = key.stat().st_mode
    except OSError:
        return  # serve names the missing file
    if mode & 0o077:
        print(
            f"mcc console: warning: {key} is readable by others (mode {mode & 0o777:o}); "
            f"chmod 600 {key}",
            file=sys.stderr,
        )


def main(argv: list[str] | None = None) -> int:
    """`python -m mcc.console ARGS` = `mcc console ARGS`, without the rest of `mcc`'s imports
    (the demo starts the console this way)."""
    from mcc._entry import main_for

    return main_for("console", add_parsers, argv)
