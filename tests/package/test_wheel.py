"""The wheels of `make wheels`, as a new user gets them: built from this checkout by
native/build-wheels.py, installed into a fresh venv outside it with ``CYCLONEDDS_HOME`` unset, then
run from a folder that has no MCC files: every installed shared object resolves inside the venv
or the system, a secured bus carries samples between two processes, the core install finds its
shipped data and names the extra a command lacks, `iox-roudi` runs; with ``[console]`` it runs
`mcc demo` (the secured SAM TOC mission) and its web console, whose /metrics prometheus-client's
parser reads. PyPI's cyclonedds in place of the bundled one is named, with the fix."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mcc.bus import _native
from mcc.security import Grant, Keystore
from tests.conftest import REPO, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

CYCLONE = Path(_native.LIBRARY).resolve().parents[1]  # the Cyclone the native core links
PIP_TIMEOUT_S = 600


@dataclass(frozen=True)
class Installed:
    wheel: Path
    cyclonedds_wheel: Path
    venv: Path
    cwd: Path  # a folder with no MCC files in it
    env: dict[str, str]

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def mcc(self) -> Path:
        return self.venv / "bin" / "mcc"


def run(
    cmd: Sequence[str | Path],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout_s: float = PIP_TIMEOUT_S,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd``; on a timeout or a failure the test fails with what it printed."""
    try:
        proc = subprocess.run(
            [str(c) for c in cmd],
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{cmd} timed out after {timeout_s} s\n{exc.stdout}\n{exc.stderr}")
    if check and proc.returncode != 0:
        pytest.fail(f"{cmd} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def clean_env(home: Path) -> dict[str, str]:
    """This environment less everything that points into the checkout or its venv."""
    drop = {"PYTHONPATH", "VIRTUAL_ENV", "CYCLONEDDS_HOME", "MCC_QOS_FILE", "PYTHONHOME"}
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("PYTEST")}
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p
    )
    env["MCC_HOME"] = str(home)
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """Both wheels, built afresh (about 10 s: a cyclonedds-python compile, auditwheel), into a
    new venv; ``make wheels`` runs the same script into dist/."""
    base = tmp_path_factory.mktemp("wheel")
    assert REPO not in base.parents, "the venv must be outside the checkout"
    wheels = base / "dist"
    started = time.monotonic()
    run([sys.executable, REPO / "native" / "build-wheels.py", CYCLONE, wheels], cwd=base)
    built_s = time.monotonic() - started
    (wheel,) = wheels.glob("mcc-*.whl")
    (cyclonedds_wheel,) = wheels.glob("cyclonedds-*.whl")
    venv = base / "venv"
    run([sys.executable, "-m", "venv", venv])
    cwd = base / "elsewhere"
    cwd.mkdir()
    env = clean_env(base / "home")
    started = time.monotonic()
    run(
        [venv / "bin" / "python", "-m", "pip", "install", "--quiet", cyclonedds_wheel, wheel],
        env=env,
        cwd=cwd,
    )
    print(f"wheels built in {built_s:.0f} s, installed in {time.monotonic() - started:.0f} s")
    return Installed(wheel, cyclonedds_wheel, venv, cwd, env)


def site_packages(installed: Installed) -> Path:
    (site,) = (installed.venv / "lib").glob("python3.*/site-packages")
    return site


def test_the_wheels_carry_the_native_core_the_cyclone_the_data_and_the_license(
    installed: Installed,
) -> None:
    assert re.search(r"^mcc-0\.1\.0-cp311-cp311-manylinux_2_\d+_x86_64\.whl$", installed.wheel.name)
    assert re.search(
        r"^cyclonedds-11\.0\.1\+mcc-cp311-cp311-manylinux_2_\d+_x86_64\.whl$",
        installed.cyclonedds_wheel.name,
    )
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    for shipped in (
        "mcc/data/qos/mcc.xml",
        "mcc/data/idl/mcc.idl",
        "mcc/data/missions/sam-toc.yaml",
        "mcc/data/scenarios/sam-toc.yaml",
        "mcc/data/scenarios/weapons-sam-toc.yaml",
        "mcc-0.1.0.dist-info/licenses/LICENSE",
    ):
        assert shipped in names, shipped
    assert any(re.fullmatch(r"mcc/bus/_native\.cpython-311-.*\.so", n) for n in names)
    metadata = zipfile.ZipFile(installed.wheel).read("mcc-0.1.0.dist-info/METADATA").decode()
    assert "Provides-Extra: console" in metadata and "Requires-Dist: fastapi" in metadata
    assert not re.search(r"^Requires-Dist: fastapi[^;]*$", metadata, re.M)  # only in an extra
    bundled = set(zipfile.ZipFile(installed.cyclonedds_wheel).namelist())
    for name in (
        "libddsc.so.11",
        "libdds_security_auth.so",
        "libdds_security_ac.so",
        "libdds_security_crypto.so",
        "libpsmx_iox.so",
    ):
        assert f"cyclonedds/_cyclone/lib/{name}" in bundled, name
    for name in ("iox-roudi", "ddsperf", "idlc"):
        assert f"cyclonedds/_cyclone/bin/{name}" in bundled, name
    for wheel in (installed.wheel, installed.cyclonedds_wheel):
        print(f"{wheel.name}: {wheel.stat().st_size / 2**20:.1f} MiB")


def test_core_install_outside_the_checkout(
    installed: Installed, domain_id: int, bus_env: dict[str, str]
) -> None:
    code = f"""
import time
t = time.perf_counter()
import mcc.bus
import_s = time.perf_counter() - t
import json, mcc, mcc.resources as r
from mcc.bus import Bus
with Bus({domain_id}) as bus:
    qos = str(bus.qos.path)
print(json.dumps({{"import_s": import_s, "mcc": mcc.__file__, "data": str(r.data_root()),
                  "qos": qos, "mission": str(r.shipped("missions/sam-toc.yaml"))}}))
"""
    bus_only = ("CYCLONEDDS_URI", "MCC_TRANSPORT", "MCC_DISCOVERY_TAG")  # this test's loopback
    env = {**installed.env, **{k: bus_env[k] for k in bus_only}}
    proc = run([installed.python, "-c", code], env=env, cwd=installed.cwd, timeout_s=60)
    found = json.loads(proc.stdout.splitlines()[-1])
    site = installed.venv / "lib"
    for key in ("mcc", "data", "qos", "mission"):
        assert Path(found[key]).is_relative_to(site), (key, found[key])
    assert found["qos"].endswith("mcc/data/qos/mcc.xml")
    print(f"import mcc.bus in a fresh venv: {found['import_s']:.3f} s")
    assert found["import_s"] < 1.0, found  # the target is 0.3 s: see docs/deploy.md


def test_every_installed_shared_object_resolves_inside_the_venv_or_the_system(
    installed: Installed,
) -> None:
    """ldd of every ELF file in the venv (libraries and the bundled programs) names files of the
    venv or of the system's library folders, nothing of the checkout; MCC's and cyclonedds's
    resolve every dependency and have only ``$ORIGIN`` RUNPATHs."""
    site = site_packages(installed)
    system = ("/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/")
    checked = 0
    for path in sorted(site.rglob("*")):
        if not path.is_file() or path.suffix == ".py":
            continue
        with path.open("rb") as f:
            if f.read(4) != b"\x7fELF":
                continue
        ours = path.relative_to(site).parts[0] in ("mcc", "cyclonedds", "cyclonedds.libs")
        proc = run(["ldd", path], timeout_s=30, check=False)
        # PyPI's wheels may ship a library that only its siblings' RUNPATH finds (scipy's
        # libgfortran needs libquadmath): ldd of it alone says "not found"; ours stand alone
        assert not ours or "not found" not in proc.stdout, f"{path}:\n{proc.stdout}"
        for target in re.findall(r"=> (/\S+)", proc.stdout):
            real = str(Path(target).resolve())
            assert real.startswith(str(installed.venv.resolve())) or real.startswith(system), (
                f"{path} loads {target}"
            )
        checked += 1
        if ours:
            dynamic = run(["readelf", "-d", path], timeout_s=30).stdout
            for runpath in re.findall(r"R(?:UN)?PATH.*\[(.*)\]", dynamic):
                assert all(e.startswith("$ORIGIN") for e in runpath.split(":")), (path, runpath)
            assert str(REPO) not in dynamic
    assert checked > 20, checked
    for text in [*site.rglob("*.pth"), *site.glob("cyclonedds/__library__.py")]:
        assert str(REPO) not in text.read_text(), text


SECURED_PEER = r"""
import dataclasses, json, os, sys, time
import mcc.bus._native as native
from mcc.bus import Bus, Transport
from mcc.security import Keystore
from mcc.types import DetectionBatch
role, keystore, ident, seconds = sys.argv[1:5]
t = dataclasses.replace(Transport.from_env(),
                        extra_xml=Keystore(keystore).existing(ident).security_xml())
with Bus(int(os.environ["MCC_DOMAIN"]), transport=t, name=ident) as bus:
    assert bus.secured
    end = time.monotonic() + float(seconds)
    if role == "pub":
        w, n = bus.writer("DetectionBatch"), 0
        while time.monotonic() < end:
            w.write(DetectionBatch(sensor_id=ident, scan_id=n))
            n += 1
            time.sleep(0.02)
        out = {"sent": n}
    else:
        got = bus.reader("DetectionBatch").take_until(10**6, timeout_s=float(seconds))
        out = {"got": len(got), "from": sorted({s.sensor_id for s in got})}
print(json.dumps({**out, "library": native.LIBRARY,
                  "home": os.environ.get("CYCLONEDDS_HOME")}))
"""


def test_a_secured_bus_round_trip(
    installed: Installed, domain_id: int, bus_env: dict[str, str], tmp_path: Path
) -> None:
    """DDS Security (the bundled plugins, found beside the bundled libddsc): an authenticated,
    permitted radar reaches a tracker, both in the fresh venv, with no CYCLONEDDS_HOME set."""
    keystore = Keystore.init(tmp_path / "keystore", mission="wheel")
    keystore.write_governance((domain_id,))
    keystore.identity("radar", (Grant(publish=("DetectionBatch",)),), domains=(domain_id,))
    keystore.identity("tracker", (Grant(subscribe=("DetectionBatch",)),), domains=(domain_id,))
    bus_only = ("CYCLONEDDS_URI", "MCC_TRANSPORT", "MCC_DISCOVERY_TAG", "MCC_DOMAIN")
    env = {**installed.env, **{k: bus_env[k] for k in bus_only if k in bus_env}}
    procs = {
        role: subprocess.Popen(
            [installed.python, "-c", SECURED_PEER, role, str(keystore.path), ident, seconds],
            env=env,
            cwd=installed.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for role, ident, seconds in (("sub", "tracker", "6"), ("pub", "radar", "8"))
    }
    results = {}
    for role, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        assert proc.returncode == 0, f"{role}: {out}\n{err}"
        results[role] = json.loads(out.strip().splitlines()[-1])
    assert results["sub"]["got"] > 20 and results["sub"]["from"] == ["radar"], results
    for result in results.values():
        assert Path(result["library"]).resolve().is_relative_to(installed.venv.resolve())
        assert result["home"] is None, "importing mcc set CYCLONEDDS_HOME"


def test_iox_roudi_is_a_console_script(installed: Installed) -> None:
    proc = run([installed.venv / "bin" / "iox-roudi", "--help"], env=installed.env, timeout_s=30)
    assert "Usage:" in proc.stdout and "_cyclone/bin/iox-roudi" in proc.stdout, proc.stdout


def test_pypi_cyclonedds_in_its_place_is_named_with_the_fix(
    installed: Installed, tmp_path: Path
) -> None:
    """MCC's wheel with PyPI's cyclonedds (no Security, a Cyclone of its own): one line says
    which package to remove and which to install; then pip replaces it with the bundled one."""
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv])
    pip = [venv / "bin" / "python", "-m", "pip", "install", "--quiet", "--no-deps"]
    run([*pip, "cyclonedds==11.0.1", installed.wheel], env=installed.env, cwd=installed.cwd)
    proc = run([venv / "bin" / "mcc", "--help"], env=installed.env, cwd=installed.cwd, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "pip uninstall -y cyclonedds" in proc.stderr, proc.stderr
    assert "cyclonedds-11.0.1+mcc" in proc.stderr, proc.stderr
    run([*pip, installed.cyclonedds_wheel], env=installed.env, cwd=installed.cwd)
    run([venv / "bin" / "python", "-c", "import mcc"], env=installed.env, cwd=installed.cwd)


def test_a_command_names_the_extra_it_needs(installed: Installed) -> None:
    proc = run(
        [installed.mcc, "console"], env=installed.env, cwd=installed.cwd, timeout_s=60, check=False
    )
    assert proc.returncode == 2, proc
    assert "pip install 'mcc[console]'" in proc.stderr, proc.stderr
    # The benchmarks are not part of the core install: `mcc bench` names their extra.
    bench = run(
        [installed.mcc, "bench", "--help"],
        env=installed.env,
        cwd=installed.cwd,
        timeout_s=60,
        check=False,
    )
    assert bench.returncode == 2 and "pip install 'mcc[bench]'" in bench.stderr, bench
    shipped = run(
        [installed.python, "-c", "import mcc.resources as r; print(r.mission_file('sam-toc'))"],
        env=installed.env,
        cwd=installed.cwd,
        timeout_s=60,
    ).stdout.strip()
    # The observer and its metrics are core: prometheus-client is a core dependency.
    run(
        [installed.python, "-m", "mcc.observe", "--help"],
        env=installed.env,
        cwd=installed.cwd,
        timeout_s=60,
    )
    # The apps' config: blocks (scenario: scenarios/sam-toc.yaml) name shipped files too.
    run([installed.mcc, "validate", shipped], env=installed.env, cwd=installed.cwd, timeout_s=60)


def test_demo_and_console_from_the_wheel(installed: Installed, domain_id: int) -> None:
    run(
        [installed.python, "-m", "pip", "install", "--quiet", f"{installed.wheel}[console]"],
        env=installed.env,
        cwd=installed.cwd,
    )
    log = installed.cwd / "demo.log"
    with log.open("w") as out:
        demo = subprocess.Popen(
            [
                installed.mcc,
                "demo",
                "--duration",
                "25",
                "--console-port",
                "0",
                "--domain",
                str(domain_id),
            ],
            env={**installed.env, "COLUMNS": "200"},
            cwd=installed.cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        url = wait_for(
            lambda: (m := re.search(r"console\S*: (http://\S+/)", log.read_text())) and m[1],
            90,
            "the demo's console URL",
        )
        with urllib.request.urlopen(url + "metrics", timeout=10) as response:
            families = {f.name: f for f in text_string_to_metric_families(response.read().decode())}
        assert "mcc_console_clients" in families and "mcc_console_bus_secured" in families
        demo.wait(timeout=120)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait(10)
    text = log.read_text()
    assert demo.returncode == 0, text
    assert "security on" in text, text  # the secured SAM TOC mission
    run_dir = re.search(r"run folder: (\S+)", text.replace("\n", " "))
    assert run_dir, text
    summary = json.loads((Path(run_dir[1]) / "summary.json").read_text())
    assert summary, text
    assert Path(run_dir[1]).is_relative_to(Path(installed.env["MCC_HOME"])), run_dir[1]
