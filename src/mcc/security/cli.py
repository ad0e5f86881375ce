"""``mcc security``: make and check a mission keystore (``init``, ``identity``, ``check``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from mcc.security.documents import PROTECTIONS, Grant
from mcc.security.keystore import Keystore


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
    ident.add_argument("name", help="the identity, e.g. sam-toc/radar")
    ident.add_argument("--domain", type=int, action="append", required=True, help="DDS domain id")
    ident.add_argument("--publish", default="", help="topics it may write, comma-separated")
    ident.add_argument("--subscribe", default="", help="topics it may read, comma-separated")
    ident.add_argument("--days", type=int, default=365, help="validity (default %(default)s)")
    ident.set_defaults(func=_identity)
    check = ssub.add_parser("check", help="say what is missing, expired or does not match")
    check.add_argument("keystore")
    check.add_argument("names", nargs="+", help="identities to check")
    check.set_defaults(func=_check)


def _topics(text: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in text.split(",") if t.strip())


def _init(args: argparse.Namespace) -> int:
    ks = Keystore.init(args.keystore, mission=args.mission)
    ks.write_governance(tuple(args.domain), protect=args.protect)
    print(f"keystore {ks.path}: identity and permissions CAs, governance for {args.domain}")
    return 0


def _identity(args: argparse.Namespace) -> int:
    grant = Grant(publish=_topics(args.publish), subscribe=_topics(args.subscribe))
    ident = Keystore(args.keystore).identity(
        args.name, (grant,), domains=tuple(args.domain), days=args.days
    )
    print(f"identity {ident.subject}: {ident.folder}")
    return 0


def _check(args: argparse.Namespace) -> int:
    ks = Keystore(args.keystore)
    bad = 0
    for name in args.names:
        problems = ks.check(name)
        bad += bool(problems)
        for problem in problems:
            print(f"{name}: {problem}", file=sys.stderr)
        if not problems:
            print(f"{name}: ok")
    return 1 if bad else 0
