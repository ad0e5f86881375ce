"""``python -m mcc.lab``: build the images, bring a lab of container hosts up, list, remove."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from mcc.lab import hosts, images
from mcc.lab.podman import PodmanError
from mcc.lab.podman import main as podman_main


def _hosts(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a number of hosts, 1 to {hosts.MAX_HOSTS} (got {text!r})"
        ) from None
    if not 1 <= value <= hosts.MAX_HOSTS:
        raise argparse.ArgumentTypeError(f"1 to {hosts.MAX_HOSTS} hosts (got {value})")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["images"]:
        return images.main(argv[1:])
    if argv[:1] == ["podman"]:
        podman_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m mcc.lab", description=__doc__)
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    sub.add_parser("images", help="build the base image and deploy/'s images (make images)")
    sub.add_parser("podman", help="podman ARGS with this project's flags and configuration")
    up = sub.add_parser("up", help="start N container hosts on a new bridge; they stay")
    up.add_argument("hosts", type=_hosts, help="how many (h1 … hN)")
    up.add_argument("--name", default="lab", help="the lab's name (default lab)")
    up.add_argument("--image", default=hosts.CORE_IMAGE, help=f"default {hosts.CORE_IMAGE}")
    down = sub.add_parser("down", help="remove a lab: its containers and network")
    down.add_argument("name")
    sub.add_parser("list", help="the labs on this machine and their owners")
    sub.add_parser("clean", help="remove the labs whose owning process is gone")
    args = parser.parse_args(argv)
    try:
        if args.action == "up":
            try:
                lab = hosts.ContainerLab(args.hosts, name=args.name, image=args.image, owner="cli")
            except PodmanError as exc:
                parser.error(str(exc))
            lab.up()
            for host in lab.hosts.values():
                print(f"{host.name}\t{host.address}\t{host.container}")
            print(
                f"enter a host: python -m mcc.lab podman exec -it {lab.network}-h1 bash; "
                f"remove: python -m mcc.lab down {lab.name}"
            )
        elif args.action == "down":
            if args.name not in hosts.labs():
                print(f"python -m mcc.lab down: no lab named {args.name!r}", file=sys.stderr)
                return 2
            hosts.remove(args.name)
        elif args.action == "list":
            for name, owner in sorted(hosts.labs().items()):
                print(f"{name}\t{owner}")
        elif args.action == "clean":
            for name in hosts.cleanup_stale():
                print(f"removed stale lab {name}")
    except PodmanError as exc:
        print(f"python -m mcc.lab {args.action}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
