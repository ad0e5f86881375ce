"""``mcc security``: make and check a mission keystore (``init``, ``identity``, ``check``), carry
an identity to another host (``export``, ``import``) and the console's TLS certificate
(``tls``).

It lives above `mcc.security` because ``check MISSION.yaml`` compares a keystore with what a
mission's manifest grants (`mcc.orchestrate.services`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from mcc.security.documents import PROTECTIONS, Grant
from mcc.security.keystore import Keystore, SecurityError, check_identity_name


def add_parsers(sub: Any) -> None:
    security = sub.add_parser(
        "security",
        help="DDS Security keystores: certificate authorities, identities, permissions",
        description="Make the certificate authorities of a mission, an identity per "
        "participant with its signed permissions, and check them (docs/security.md).",
    )
    ssub = security.add_subparsers(dest="security_command", metavar="ACTION", required=True)
    init = ssub.add_parser("init", help="create a keystore: identity and permissions CAs")
    init.add_argument("keystore", help="a new folder")
    init.add_argument("--mission", default="mcc", help="named in the CA certificates")
    init.add_argument("--domain", type=int, action="append", required=True, help="DDS domain id")
    init.add_argument("--protect", choices=PROTECTIONS, default="ENCRYPT", help="data protection")
    init.set_defaults(func=_init)
    ident = ssub.add_parser("identity", help="create an identity with its permissions")
    ident.add_argument("keystore")
    ident.add_argument("name", type=_identity_name, help="the identity, e.g. sam-toc/radar")
    ident.add_argument("--domain", type=int, action="append", required=True, help="DDS domain id")
    ident.add_argument("--publish", default="", help="topics it may write, comma-separated")
    ident.add_argument("--subscribe", default="", help="topics it may read, comma-separated")
    ident.add_argument("--days", type=int, default=365, help="validity (default %(default)s)")
    ident.add_argument(
        "--operator",
        action="store_true",
        help="an operator of the mission (MISSION/NAME): may send commands, attributed to NAME "
        "(`mcc status|stop|... --as NAME`); --publish/--subscribe are not used",
    )
    ident.set_defaults(func=_identity)
    check = ssub.add_parser(
        "check",
        help="say what is missing, expired or does not match",
        description="Check identities of a keystore, or, given a manifest, every identity its "
        "mission needs (supervisor, operator, console, one per instance) against what the "
        "manifest declares now.",
    )
    check.add_argument("keystore")
    check.add_argument("names", nargs="+", help="identities to check, or a manifest file")
    check.set_defaults(func=_check)
    tls = ssub.add_parser(
        "tls",
        help="a TLS server certificate for the web console, signed by the identity CA",
        description="Create (or replace) KEYSTORE/tls/NAME/cert.pem and key.pem (0600): a TLS "
        "server certificate for the given hosts, signed by the keystore's identity CA, for "
        "`mcc console --tls-cert --tls-key`. Browsers trust it once KEYSTORE/ca/identity_ca.pem "
        "is installed as an authority.",
        epilog="Example: mcc security tls ~/.local/state/mcc/keystores/sam-toc "
        "--host toc.example --host 10.0.0.5",
    )
    tls.add_argument("keystore")
    tls.add_argument(
        "--host",
        action="append",
        required=True,
        metavar="NAME",
        help="a host name or IP address browsers use to reach the console; repeat for more",
    )
    tls.add_argument("--name", default="console", help="the certificate's folder (%(default)s)")
    tls.add_argument("--days", type=int, default=365, help="validity (default %(default)s)")
    tls.set_defaults(func=_tls)
    export = ssub.add_parser(
        "export",
        help="write one identity to a file that another host imports",
        description="Write identity MISSION/NAME of KEYSTORE (certificate, key, permissions, the "
        "CA certificates, revocation list and governance; never a CA key) to one file, 0600. "
        "On an operator's workstation `mcc security import FILE` installs it; then `mcc status "
        "--domain N` and the other commands reach the mission from there as NAME.",
        epilog="Example: mcc security identity ~/.local/state/mcc/keystores/sam-toc sam-toc/alice "
        "--domain 42 --operator && mcc security export ~/.local/state/mcc/keystores/sam-toc "
        "sam-toc/alice --out alice.mcc-identity",
    )
    export.add_argument("keystore")
    export.add_argument("name", type=_identity_name, help="the identity, e.g. sam-toc/alice")
    export.add_argument("--out", required=True, help="the file to write (0600: it holds a key)")
    export.set_defaults(func=_export)
    imp = ssub.add_parser(
        "import",
        help="install an identity file made by `mcc security export` on this host",
        description="Check FILE (certificate issued by its CA, key and permissions its own) and "
        "install it in $MCC_HOME/imported/MISSION (0700): commands given --domain use it.",
    )
    imp.add_argument("file")
    imp.set_defaults(func=_import)


def _topics(text: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in text.split(",") if t.strip())


def _identity_name(text: str) -> str:
    try:
        return check_identity_name(text)
    except SecurityError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _init(args: argparse.Namespace) -> int:
    ks = Keystore.init(args.keystore, mission=args.mission)
    ks.write_governance(tuple(args.domain), protect=args.protect)
    print(f"keystore {ks.path}: identity and permissions CAs, governance for {args.domain}")
    return 0


def _identity(args: argparse.Namespace) -> int:
    grants: tuple[Grant, ...] = (
        Grant(publish=_topics(args.publish), subscribe=_topics(args.subscribe)),
    )
    if args.operator:
        from mcc.security.mission import OPERATOR_TOPICS

        grants = OPERATOR_TOPICS.grants(args.name.rsplit("/", 1)[-1])
    ident = Keystore(args.keystore).identity(
        args.name, grants, domains=tuple(args.domain), days=args.days
    )
    print(f"identity {ident.subject}: {ident.folder}")
    return 0


def _check(args: argparse.Namespace) -> int:
    ks = Keystore(args.keystore)
    expected: dict[str, str] = {}  # identity → its permissions document as the manifest wants
    names = list(args.names)
    if len(names) == 1 and names[0].endswith((".yaml", ".yml")):
        from mcc.orchestrate.services import expected_permissions

        expected = expected_permissions(names[0])
        names = list(expected)
    bad = 0
    for name in names:
        problems = ks.check(name)
        if not problems and name in expected and not ks.grants_match(name, expected[name]):
            problems = [
                "its permissions do not match the manifest (start the mission again, or "
                "`mcc security identity`, to reissue them)"
            ]
        bad += bool(problems)
        for problem in problems:
            print(f"{name}: {problem}", file=sys.stderr)
        if not problems:
            print(f"{name}: ok")
    return 1 if bad else 0


def _export(args: argparse.Namespace) -> int:
    from pathlib import Path

    from mcc.security.bundle import export_identity, write_bundle

    Keystore(args.keystore)  # says what is wrong with a folder that is not a keystore
    bundle = export_identity(Path(args.keystore), args.name)
    write_bundle(bundle, Path(args.out))
    print(f"identity {args.name} (domains {bundle['domains']}) written to {args.out} (0600)")
    return 0


def _import(args: argparse.Namespace) -> int:
    from pathlib import Path

    from mcc.orchestrate.registry import home
    from mcc.security.bundle import import_identity, read_bundle

    done = import_identity(read_bundle(Path(args.file)), home())
    print(
        f"identity {done.name} installed in {done.identity.keystore} (domains "
        f"{list(done.domains)}): `mcc status --domain {done.domains[0] if done.domains else 'N'}` "
        f"reaches mission {done.mission} as {done.principal}"
    )
    return 0


def _tls(args: argparse.Namespace) -> int:
    from mcc.security.tls import server_certificate

    made = server_certificate(args.keystore, args.host, name=args.name, days=args.days)
    print(
        f"TLS certificate for {', '.join(made.hosts)} (until {made.not_after:%Y-%m-%d}): "
        f"{made.cert}, key {made.key}; authority {made.ca}"
    )
    print(
        f"serve with: mcc console --tls-cert {made.cert} --tls-key {made.key} "
        + " ".join(f"--allow-host {h}" for h in made.hosts)
    )
    return 0
