"""The container images of deploy/, built here without any registry (``make images``).

    python -m mcc.lab images [--dist DIST] [--root CHECKOUT]

1. The base image ``localhost/mcc-base:bookworm``: ``mmdebstrap --variant=minbase bookworm`` makes
   a Debian root filesystem from Debian's package mirror, ``podman import`` turns it into an
   image. Made once; ``--rebuild-base`` makes it again (security updates).
2. ``localhost/mcc-core`` and ``localhost/mcc-console`` from deploy/Containerfile.core and
   Containerfile.console on that base (and ``localhost/mcc-ray``: the core with the ``ray``
   extra and ``redis-server``, the lab's Ray hosts), with the wheels of DIST (``make wheels``)
   as their only MCC input: the build context is a folder holding ``dist/`` alone. Their build
   stage reaches PyPI through the host's network (``--network host``), trusting the host's CA
   bundle when the host names one (``PIP_CERT``, ``SSL_CERT_FILE``: a TLS-inspecting proxy).

Each image is labelled with the digest of the wheels' contents (``mcc.wheels``), so that
:func:`build_images` rebuilds only what changed.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mcc.lab.podman import PodmanError, podman
from mcc.settings import external

__all__ = ["BASE", "IMAGES", "Built", "build_base", "build_images", "image_size", "wheels_digest"]

BASE = "localhost/mcc-base:bookworm"
#: image → its Containerfile under deploy/
IMAGES = {
    "localhost/mcc-core:latest": "Containerfile.core",
    "localhost/mcc-console:latest": "Containerfile.console",
    "localhost/mcc-ray:latest": "Containerfile.core",
}
#: image → its build arguments: the lab's Ray hosts have MCC's ``ray`` extra and Debian's
#: ``redis-server`` (the head's GCS fault tolerance)
BUILD_ARGS = {
    "localhost/mcc-ray:latest": {"WHEEL_EXTRAS": "[ray]", "APT_PACKAGES": "redis-server"},
}
SUITE = "bookworm"
BUILD_TIMEOUT_S = 1200.0


@dataclass(frozen=True)
class Built:
    image: str
    seconds: float  # 0 when the image was up to date
    size_bytes: int


def _wheels(dist: Path) -> list[Path]:
    found = sorted([*dist.glob("mcc-*.whl"), *dist.glob("cyclonedds-*.whl")])
    if len(found) != 2 or not any(w.name.startswith("cyclonedds-11.0.1+mcc") for w in found):
        raise PodmanError(
            f"{dist}: no wheels of `make wheels` (mcc-*.whl and cyclonedds-11.0.1+mcc-*.whl); "
            "run `make wheels` first"
        )
    return found


#: An ELF note of the GNU build id: namesz 4, descsz 20, type 3, "GNU", then the 20 bytes, which
#: differ between two builds of the same sources in different folders (cyclonedds-python's sdist
#: is compiled in a temporary one)
_BUILD_ID = b"\x04\x00\x00\x00\x14\x00\x00\x00\x03\x00\x00\x00GNU\x00"


def wheels_digest(dist: Path) -> str:
    """A digest of what the wheels hold: names and bytes of their members, less the zip dates,
    RECORD and the ELF build ids."""
    digest = hashlib.sha256()
    for wheel in _wheels(dist):
        with zipfile.ZipFile(wheel) as zf:
            for name in sorted(zf.namelist()):
                if name.endswith("/RECORD"):
                    continue
                data = bytearray(zf.read(name))
                at = data.find(_BUILD_ID) if data[:4] == b"\x7fELF" else -1
                if at >= 0:
                    start = at + len(_BUILD_ID)
                    data[start : start + 20] = bytes(20)
                digest.update(name.encode() + b"\0" + bytes(data))
    return digest.hexdigest()[:16]


def image_label(image: str, label: str) -> str | None:
    """A label of a local image, None when the image is not there."""
    proc = podman(
        ["image", "inspect", "--format", f'{{{{index .Labels "{label}"}}}}', image], check=False
    )
    return proc.stdout.strip() if proc.returncode == 0 else None


def image_size(image: str) -> int:
    return int(podman(["image", "inspect", "--format", "{{.Size}}", image]).stdout.strip())


def build_base(*, rebuild: bool = False) -> Built:
    """The Debian base image, from mmdebstrap and podman import (no registry)."""
    if not rebuild and image_label(BASE, "mcc.suite") is not None:
        return Built(BASE, 0.0, image_size(BASE))
    if shutil.which("mmdebstrap") is None:
        raise PodmanError("mmdebstrap is not installed: run `make system` (Debian's mmdebstrap)")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mcc-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs.tar"
        proc = subprocess.run(
            ["mmdebstrap", "--quiet", "--variant=minbase", SUITE, str(rootfs)],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
        if proc.returncode != 0:
            raise PodmanError(
                f"mmdebstrap --variant=minbase {SUITE} failed (exit {proc.returncode}): "
                f"{proc.stderr.strip()[-2000:]}\nit needs Debian's package mirror over the "
                "network (deb.debian.org)"
            )
        podman(
            [
                "import",
                "--change",
                f"LABEL mcc.suite={SUITE}",
                "--change",
                'CMD ["/bin/bash"]',
                str(rootfs),
                BASE,
            ],
            timeout_s=300,
        )
    return Built(BASE, time.monotonic() - started, image_size(BASE))


def _ca_bundle() -> Path | None:
    env = external()
    for path in (env.pip_cert, env.ssl_cert_file, env.requests_ca_bundle):
        if path is not None and path.is_file():
            return path
    return None


def build_images(dist: Path, root: Path, *, force: bool = False) -> list[Built]:
    """The base image, then the images of deploy/ from the wheels of ``dist``."""
    digest = wheels_digest(dist)
    built = [build_base()]
    building = False
    try:
        with tempfile.TemporaryDirectory(prefix="mcc-context-") as tmp:
            context = Path(tmp)
            (context / "dist").mkdir()
            for wheel in _wheels(dist):
                shutil.copyfile(wheel, context / "dist" / wheel.name)
            for image, containerfile in IMAGES.items():
                if not force and image_label(image, "mcc.wheels") == digest:
                    built.append(Built(image, 0.0, image_size(image)))
                    continue
                args = [
                    "build",
                    "--format",
                    "docker",
                    "--network",
                    "host",
                    "--label",
                    f"mcc.wheels={digest}",
                    "-f",
                    str(root / "deploy" / containerfile),
                    "-t",
                    image,
                ]
                for key, value in BUILD_ARGS.get(image, {}).items():
                    args += ["--build-arg", f"{key}={value}"]
                bundle = _ca_bundle()
                if bundle is not None:
                    args += [
                        "-v",
                        f"{bundle}:/run/host-ca.crt:ro",
                        "--build-arg",
                        "PIP_CERT=/run/host-ca.crt",
                    ]
                started, building = time.monotonic(), True
                podman([*args, str(context)], timeout_s=BUILD_TIMEOUT_S)
                built.append(Built(image, time.monotonic() - started, image_size(image)))
    finally:
        if building:  # the build stages' dangling layers, also of a failed build
            podman(["image", "prune", "--force"], check=False, timeout_s=300)
    return built


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mcc.lab images",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dist", type=Path, default=Path("dist"), help="the wheels (dist)")
    parser.add_argument("--root", type=Path, default=Path("."), help="the checkout (.)")
    parser.add_argument("--force", action="store_true", help="rebuild deploy/'s images")
    parser.add_argument("--rebuild-base", action="store_true", help="and the base image")
    args = parser.parse_args(argv)
    if not (args.root / "deploy" / "Containerfile.core").is_file():
        parser.error(f"--root {args.root}: no deploy/Containerfile.core (give the checkout)")
    try:
        if args.rebuild_base:
            build_base(rebuild=True)
        for item in build_images(args.dist, args.root, force=args.force):
            took = f"built in {item.seconds:.0f} s" if item.seconds else "up to date"
            print(f"{item.image}: {item.size_bytes / 1e6:.0f} MB, {took}")
    except PodmanError as exc:
        print(f"mcc.lab images: {exc}", file=sys.stderr)
        return 1
    return 0
